-- The texts (and kinds, tool names) of the assistant rows of each API call with recorded usage of the models $models (what a real tokenizer counts as the call's output), calls keyed by sql/create_table_calibration_rows.sql
WITH output_calls AS (
    SELECT DISTINCT session_id, call_key
    FROM calibration_rows
    WHERE input_tokens IS NOT NULL AND usage_scope = 'call'
      AND input_tokens + coalesce(cache_creation_tokens, 0) + coalesce(cache_read_tokens, 0) > 0
      AND list_contains($models, model)
),
output_rows AS (
    -- an action parsed out of the assistant's text is already in that text
    SELECT k.session_id, k.call_key, k.seq, k.block_no, k.kind = 'thinking' AS is_thinking, k.kind
    FROM calibration_rows AS k
    SEMI JOIN output_calls AS u USING (session_id, call_key)
    WHERE k.role = 'assistant' AND NOT k.is_parsed_action
),
final AS (
    SELECT o.session_id, o.call_key, o.seq, o.block_no, o.is_thinking, o.kind, m.text, m.tool_name
    FROM output_rows AS o
    JOIN messages AS m USING (session_id, seq, block_no)
    ORDER BY o.session_id, o.call_key, o.seq, o.block_no
)
SELECT * FROM final
