-- The message rows of the calibration queries, each keyed to its conversation thread (segment) and API call (call_key): the one definition of a call, shared by select_calibration_calls and select_calibration_output_texts; of the sessions in $session_ids (NULL: all)
CREATE OR REPLACE TEMP TABLE calibration_rows AS
WITH base AS (
    SELECT
        session_id, seq, block_no, role, kind, model, api_call_id, usage_scope, "timestamp",
        coalesce(is_sidechain, false) AS is_sidechain,
        coalesce(is_prompt, false) AS is_prompt,
        input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, reasoning_tokens,
        coalesce(est_tokens, 0) AS est,
        coalesce(char_len, 0) AS chars,
        CAST(ceil(coalesce(cjk_count, 0) * 3 / 2.0) AS BIGINT) AS est_cjk,
        -- an action parsed out of the assistant's text by the reader (text-mode agents:
        -- mini-SWE-agent, SWE-agent): its tool_use row shares the JSON location of the text
        -- row it was found in; the model wrote it once, inside that text
        kind = 'tool_use' AND json_path IS NOT NULL AND coalesce(bool_or(kind = 'text') OVER (
            PARTITION BY session_id, api_call_id, json_path), false) AS is_parsed_action,
        -- rows an API request carries: conversation turns (Claude Code's own system records,
        -- boundaries and summaries of the local UI are not sent; a system prompt text is)
        role IN ('user', 'assistant', 'tool') OR (role = 'system' AND kind = 'text') AS in_context,
        -- a new context starts at a root record (Claude: parentUuid null, e.g. the first line
        -- or a compact boundary; sidechains have their own roots) or at any boundary row; only
        -- in a session that links its records at all (Gemini JSONL messages have ids but no
        -- parent links: each would otherwise start a thread of its own)
        (block_no = 0 AND uuid IS NOT NULL AND parent_uuid IS NULL
         AND bool_or(parent_uuid IS NOT NULL) OVER (PARTITION BY session_id))
        OR kind = 'boundary' AS is_root
    FROM messages
    WHERE $session_ids IS NULL OR list_contains($session_ids, session_id)
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
    -- usage rows without an API call id close a call: the rows after the previous such row
    -- belong to it (Codex writes token_count after the call's output; a mini-SWE-agent row
    -- carries its own usage)
    SELECT
        *,
        coalesce(sum(CASE WHEN api_call_id IS NULL AND input_tokens IS NOT NULL AND usage_scope = 'call'
                          THEN 1 ELSE 0 END) OVER (
            PARTITION BY session_id, is_sidechain, segment_no ORDER BY seq, block_no
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS usage_rows_before
    FROM segmented
),
final AS (
    SELECT
        *,
        coalesce(api_call_id, 'rows:' || CAST(is_sidechain AS VARCHAR) || ':' || CAST(segment_no AS VARCHAR)
                 || ':' || CAST(usage_rows_before AS VARCHAR)) AS call_key
    FROM grouped
)
SELECT * FROM final
