-- The texts of the assistant rows of each API call with recorded usage of the models $models (what a real tokenizer counts as the call's output), keyed exactly as select_calibration_calls keys its calls
WITH wanted_sessions AS (
    -- only sessions with a row of those models: the call keys are per session, so a session
    -- is taken whole or not at all
    SELECT DISTINCT session_id FROM messages WHERE list_contains($models, model)
),
base AS (
    SELECT
        -- no text here: it is fetched for the output rows only, at the end
        session_id, seq, block_no, role, kind, model, api_call_id, usage_scope,
        coalesce(is_sidechain, false) AS is_sidechain,
        input_tokens, cache_creation_tokens, cache_read_tokens,
        -- as in select_calibration_calls: an action parsed out of the assistant's text by the
        -- reader shares the JSON location of its text row; the model wrote it once
        kind = 'tool_use' AND json_path IS NOT NULL AND coalesce(bool_or(kind = 'text') OVER (
            PARTITION BY session_id, api_call_id, json_path), false) AS is_parsed_action,
        (block_no = 0 AND uuid IS NOT NULL AND parent_uuid IS NULL) OR kind = 'boundary' AS is_root
    FROM messages
    SEMI JOIN wanted_sessions USING (session_id)
),
segmented AS (
    SELECT
        *,
        sum(CAST(is_root AS INTEGER)) OVER (
            PARTITION BY session_id, is_sidechain ORDER BY seq, block_no
            ROWS UNBOUNDED PRECEDING) AS segment_no
    FROM base
),
grouped AS (
    SELECT
        *,
        coalesce(sum(CASE WHEN api_call_id IS NULL AND input_tokens IS NOT NULL AND usage_scope = 'call'
                          THEN 1 ELSE 0 END) OVER (
            PARTITION BY session_id, is_sidechain, segment_no ORDER BY seq, block_no
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS usage_rows_before
    FROM segmented
),
keyed AS (
    SELECT
        *,
        coalesce(api_call_id, 'rows:' || CAST(is_sidechain AS VARCHAR) || ':' || CAST(segment_no AS VARCHAR)
                 || ':' || CAST(usage_rows_before AS VARCHAR)) AS call_key
    FROM grouped
),
usage_rows AS (
    SELECT DISTINCT session_id, call_key
    FROM keyed
    WHERE input_tokens IS NOT NULL AND usage_scope = 'call'
      AND input_tokens + coalesce(cache_creation_tokens, 0) + coalesce(cache_read_tokens, 0) > 0
      AND list_contains($models, model)
),
output_rows AS (
    SELECT k.session_id, k.call_key, k.seq, k.block_no, k.kind = 'thinking' AS is_thinking
    FROM keyed AS k
    SEMI JOIN usage_rows AS u USING (session_id, call_key)
    WHERE k.role = 'assistant' AND NOT k.is_parsed_action
),
final AS (
    SELECT o.session_id, o.call_key, o.seq, o.block_no, o.is_thinking, m.text
    FROM output_rows AS o
    JOIN messages AS m USING (session_id, seq, block_no)
    ORDER BY o.session_id, o.call_key, o.seq, o.block_no
)
SELECT * FROM final
