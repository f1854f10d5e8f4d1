-- A (source, session) of message, tool call or tool result rows that session_info does not name: scoped cursors (pipeline/core/scope.py) find a session's files through session_info, so every session a source holds must be listed there
WITH row_sessions AS (
    SELECT DISTINCT 'messages' AS table_name, source_id, session_id FROM _messages_current
    UNION ALL
    SELECT DISTINCT 'tool_calls', source_id, session_id FROM tool_calls
    UNION ALL
    SELECT DISTINCT 'tool_results', source_id, session_id FROM tool_results
),
final AS (
    SELECT r.table_name, r.source_id, r.session_id
    FROM row_sessions AS r
    ANTI JOIN session_info AS s
      ON s.source_id = r.source_id AND s.session_id IS NOT DISTINCT FROM r.session_id
    ORDER BY r.table_name, r.source_id, r.session_id
)
SELECT * FROM final
