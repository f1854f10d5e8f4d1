-- A tool result row with no call id (it can never be paired with its call)
WITH results AS (
    SELECT source_id, line_no, seq, block_no, session_id, tool_name, call_id
    FROM tool_results
),
final AS (
    SELECT * FROM results
    WHERE call_id IS NULL
    ORDER BY session_id, source_id, seq, block_no
)
SELECT * FROM final
