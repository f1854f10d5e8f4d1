-- One row per API call with recorded usage: the recorded prompt/output tokens and the heuristic estimate of its context and output, split by content class
WITH parents AS (
    -- as sessions.parent_session_id, read from session_info alone (no scan of the messages)
    SELECT session_id,
           arg_min(parent_session_id, coalesce(first_seen_at, 'infinity'::TIMESTAMPTZ))
               FILTER (WHERE parent_session_id IS NOT NULL) AS parent_session_id
    FROM session_info
    WHERE session_id IN (SELECT DISTINCT session_id FROM calibration_rows)
    GROUP BY session_id
),
keyed_rows AS (
    -- rows keyed to their thread and call: sql/create_table_calibration_rows.sql
    SELECT * FROM calibration_rows
),
classified AS (
    SELECT
        *,
        CASE WHEN in_context AND kind <> 'thinking' AND kind NOT IN ('tool_use', 'tool_result')
             THEN est - est_cjk ELSE 0 END AS prose,
        CASE WHEN in_context AND kind IN ('tool_use', 'tool_result') THEN est - est_cjk ELSE 0 END AS code,
        CASE WHEN in_context AND kind <> 'thinking' THEN est_cjk ELSE 0 END AS cjk,
        CASE WHEN in_context AND kind NOT IN ('thinking', 'tool_use', 'tool_result') THEN 1 ELSE 0 END AS blocks,
        CASE WHEN in_context AND kind IN ('tool_use', 'tool_result') THEN 1 ELSE 0 END AS tool_blocks,
        -- thinking is sent back only within the current turn (the API drops earlier turns'
        -- thinking): tracked apart and added for the rows after the last human prompt
        CASE WHEN in_context AND kind = 'thinking' THEN est - est_cjk ELSE 0 END AS think_prose,
        CASE WHEN in_context AND kind = 'thinking' THEN est_cjk ELSE 0 END AS think_cjk,
        CASE WHEN in_context AND kind = 'thinking' THEN 1 ELSE 0 END AS think_blocks
    FROM keyed_rows
),
running AS (
    SELECT
        *,
        sum(prose) OVER w AS cum_prose,
        sum(code) OVER w AS cum_code,
        sum(cjk) OVER w AS cum_cjk,
        sum(blocks) OVER w AS cum_blocks,
        sum(tool_blocks) OVER w AS cum_tool_blocks,
        sum(think_prose) OVER w AS cum_think_prose,
        sum(think_cjk) OVER w AS cum_think_cjk,
        sum(think_blocks) OVER w AS cum_think_blocks
    FROM classified
    WINDOW w AS (PARTITION BY session_id, is_sidechain, segment_no ORDER BY seq, block_no
                 ROWS UNBOUNDED PRECEDING)
),
keyed AS (
    SELECT
        *,
        -- running thinking totals as they stood at the last human prompt (the turn's start)
        coalesce(max(CASE WHEN is_prompt THEN cum_think_prose END) OVER w, 0) AS turn_think_prose,
        coalesce(max(CASE WHEN is_prompt THEN cum_think_cjk END) OVER w, 0) AS turn_think_cjk,
        coalesce(max(CASE WHEN is_prompt THEN cum_think_blocks END) OVER w, 0) AS turn_think_blocks
    FROM running
    WINDOW w AS (PARTITION BY session_id, is_sidechain, segment_no ORDER BY seq, block_no
                 ROWS UNBOUNDED PRECEDING)
),
usage_rows AS (
    -- the messages view keeps usage once per API call; zero-usage rows (local errors) are skipped
    SELECT session_id, call_key, model, "timestamp",
           input_tokens + coalesce(cache_creation_tokens, 0) + coalesce(cache_read_tokens, 0) AS recorded_prompt,
           output_tokens AS recorded_output,
           -- the part of recorded_output spent on hidden reasoning, where the source records it
           reasoning_tokens AS recorded_reasoning
    FROM keyed
    WHERE input_tokens IS NOT NULL AND usage_scope = 'call'
      AND input_tokens + coalesce(cache_creation_tokens, 0) + coalesce(cache_read_tokens, 0) > 0
      AND model IS NOT NULL AND model <> '<synthetic>'
),
call_rows AS (
    SELECT k.* FROM keyed AS k SEMI JOIN usage_rows AS u USING (session_id, call_key)
),
first_rows AS (
    -- the call starts at its first assistant row (rows before it are its input)
    SELECT * FROM call_rows
    QUALIFY row_number() OVER (PARTITION BY session_id, call_key
                               ORDER BY role <> 'assistant', seq, block_no) = 1
),
outputs AS (
    -- what the call wrote, as the transcript shows it: the visible rows apart from the
    -- thinking rows (a summary of the hidden reasoning for some models); an action parsed
    -- out of the text is already counted in the text
    SELECT
        session_id, call_key,
        sum(CASE WHEN role = 'assistant' THEN prose ELSE 0 END) AS out_prose,
        sum(CASE WHEN role = 'assistant' AND NOT is_parsed_action THEN code ELSE 0 END) AS out_code,
        sum(CASE WHEN role = 'assistant' THEN cjk ELSE 0 END) AS out_cjk,
        sum(CASE WHEN role = 'assistant' THEN think_prose ELSE 0 END) AS out_thinking_prose,
        sum(CASE WHEN role = 'assistant' THEN think_cjk ELSE 0 END) AS out_thinking_cjk,
        sum(CASE WHEN role = 'assistant' AND in_context AND kind <> 'thinking'
                      AND NOT is_parsed_action THEN chars ELSE 0 END) AS out_chars,
        sum(CASE WHEN role = 'assistant' AND in_context AND kind = 'thinking' THEN chars ELSE 0 END)
            AS out_thinking_chars,
        sum(CASE WHEN role = 'assistant' THEN blocks ELSE 0 END) AS out_text_blocks,
        sum(CASE WHEN role = 'assistant' THEN think_blocks ELSE 0 END) AS out_thinking_blocks,
        sum(CASE WHEN role = 'assistant' AND NOT is_parsed_action THEN tool_blocks ELSE 0 END)
            AS out_tool_blocks
    FROM call_rows
    GROUP BY session_id, call_key
),
contexts AS (
    -- the context of a call: the running totals just before its first row
    SELECT
        session_id, call_key, seq AS first_seq, is_sidechain, segment_no,
        cum_prose - prose + (cum_think_prose - think_prose - turn_think_prose) AS ctx_prose,
        cum_code - code AS ctx_code,
        cum_cjk - cjk + (cum_think_cjk - think_cjk - turn_think_cjk) AS ctx_cjk,
        cum_blocks - blocks + (cum_think_blocks - think_blocks - turn_think_blocks) AS ctx_text_blocks,
        cum_tool_blocks - tool_blocks AS ctx_tool_blocks
    FROM first_rows
),
final AS (
    SELECT
        u.session_id,
        -- the hold-out unit: a session together with its sub-agents
        coalesce(s.parent_session_id, u.session_id) AS group_id,
        u.session_id || '#' || CASE WHEN c.is_sidechain THEN 'side' ELSE 'main' END
            || '#' || CAST(c.segment_no AS VARCHAR) AS thread_id,
        u.call_key, c.first_seq, u."timestamp", u.model,
        u.recorded_prompt, u.recorded_output, u.recorded_reasoning,
        CAST(c.ctx_prose AS BIGINT) AS ctx_prose, CAST(c.ctx_code AS BIGINT) AS ctx_code,
        CAST(c.ctx_cjk AS BIGINT) AS ctx_cjk, CAST(c.ctx_text_blocks AS BIGINT) AS ctx_text_blocks,
        CAST(c.ctx_tool_blocks AS BIGINT) AS ctx_tool_blocks,
        CAST(o.out_prose AS BIGINT) AS out_prose, CAST(o.out_code AS BIGINT) AS out_code,
        CAST(o.out_cjk AS BIGINT) AS out_cjk,
        CAST(o.out_thinking_prose AS BIGINT) AS out_thinking_prose,
        CAST(o.out_thinking_cjk AS BIGINT) AS out_thinking_cjk,
        CAST(o.out_chars AS BIGINT) AS out_chars,
        CAST(o.out_thinking_chars AS BIGINT) AS out_thinking_chars,
        CAST(o.out_text_blocks AS BIGINT) AS out_text_blocks,
        CAST(o.out_thinking_blocks AS BIGINT) AS out_thinking_blocks,
        CAST(o.out_tool_blocks AS BIGINT) AS out_tool_blocks
    FROM usage_rows AS u
    JOIN contexts AS c USING (session_id, call_key)
    JOIN outputs AS o USING (session_id, call_key)
    LEFT JOIN parents AS s ON s.session_id = u.session_id
    ORDER BY u.session_id, c.first_seq, u.call_key
)
SELECT * FROM final
