-- A paired tool result that comes before its call in the session (result_seq < call_seq)
WITH paired AS (
    SELECT session_id, call_id, tool_name, call_seq, result_seq
    FROM tool_links
    WHERE status = 'paired'
),
final AS (
    SELECT * FROM paired
    WHERE result_seq < call_seq
    ORDER BY session_id, call_id
)
SELECT * FROM final
