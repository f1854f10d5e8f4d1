-- Rows whose stored est_tokens differs from the est_tokens macro recomputed on their text, plus the media tokens of their images/PDFs (messages, tool inputs, tool results)
WITH message_rows AS (
    SELECT 'messages' AS table_name, session_id, seq, block_no, est_tokens AS stored,
           est_tokens(text) + coalesce(media_tokens, 0) AS recomputed
    FROM messages
),
tool_call_rows AS (
    SELECT 'tool_calls' AS table_name, session_id, seq, block_no, est_tokens AS stored,
           est_tokens(input_json) AS recomputed
    FROM tool_calls
),
tool_result_rows AS (
    -- the payload text lives in messages.text, on the tool_result row of the same block
    SELECT 'tool_results' AS table_name, r.session_id, r.seq, r.block_no, r.est_tokens AS stored,
           est_tokens(m.text) + coalesce(m.media_tokens, 0) AS recomputed
    FROM tool_results AS r
    JOIN messages AS m
      ON m.source_id = r.source_id AND m.generation = r.generation AND m.seq = r.seq
     AND m.kind = 'tool_result'
),
all_rows AS (
    SELECT * FROM message_rows
    UNION ALL SELECT * FROM tool_call_rows
    UNION ALL SELECT * FROM tool_result_rows
),
final AS (
    SELECT * FROM all_rows
    WHERE stored IS DISTINCT FROM recomputed
    ORDER BY table_name, session_id, seq, block_no
)
SELECT * FROM final
