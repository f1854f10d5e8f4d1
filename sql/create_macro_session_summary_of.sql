-- session_summary_of(ids, costs): per session of ids and their sub-agents (every session when ids is NULL), the daily-log counts (main thread: prompts, assistant responses, est. tokens) and usage/cost (none when costs is false); the session_summary view is all of it
CREATE OR REPLACE MACRO session_summary_of(ids, costs := true) AS TABLE
WITH wanted AS (
    SELECT DISTINCT session_id
    FROM session_info
    WHERE ids IS NULL OR list_contains(ids, session_id) OR list_contains(ids, parent_session_id)
),
sub_agents AS (
    SELECT DISTINCT session_id FROM session_info WHERE parent_session_id IS NOT NULL
),
main_rows AS (
    -- the main thread: inline sub-agent (sidechain) and SWE-agent demonstration rows left out;
    -- a sub-agent session (all sidechain rows) is its own main thread
    SELECT session_id, source_id, seq, line_no, json_path, role, kind, api_call_id, is_prompt,
           est_tokens
    FROM messages
    WHERE session_id IN (SELECT session_id FROM wanted)
      AND NOT coalesce(is_demo, false)
      AND (NOT coalesce(is_sidechain, false) OR session_id IN (SELECT session_id FROM sub_agents))
),
turn_rows AS (
    -- assistant rows that are not content (e.g. Codex token_count) neither count nor split a turn
    SELECT
        *,
        role = 'assistant' AND kind IN ('text', 'thinking', 'tool_use') AS is_reply,
        lag(role = 'assistant' AND kind IN ('text', 'thinking', 'tool_use'))
            OVER (PARTITION BY session_id ORDER BY source_id, seq) AS after_reply
    FROM main_rows
    WHERE role <> 'assistant' OR kind IN ('text', 'thinking', 'tool_use')
),
counts AS (
    SELECT
        session_id,
        -- user: human prompts (is_prompt), one per source message
        count(DISTINCT source_id || ':' || line_no || ':' || coalesce(json_path, ''))
            FILTER (WHERE is_prompt) AS n_user,
        -- assistant: responses; one per API call id, else one per run of consecutive assistant rows
        count(DISTINCT api_call_id) FILTER (WHERE is_reply AND api_call_id IS NOT NULL)
            + count(*) FILTER (WHERE is_reply AND api_call_id IS NULL
                               AND NOT coalesce(after_reply, false)) AS n_assistant
    FROM turn_rows
    GROUP BY session_id
),
sizes AS (
    SELECT session_id, sum(est_tokens) AS est_tokens FROM main_rows GROUP BY session_id
),
usage AS (
    SELECT
        session_id,
        count(*) FILTER (WHERE usage_scope = 'call') AS api_calls,
        sum(input_tokens) AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cache_write_tokens) AS cache_write_tokens,
        sum(cache_read_tokens) AS cache_read_tokens,
        sum(total_tokens) AS total_tokens,
        CASE WHEN count(cost_usd) = count(*) THEN sum(cost_usd) END AS cost_usd,
        list_sort(list_distinct(list(coalesce(model, '(unknown)')) FILTER (WHERE cost_usd IS NULL))) AS unpriced_models,
        sum(recorded_cost_usd) AS recorded_cost_usd
    FROM usage_calls
    WHERE costs AND session_id IN (SELECT session_id FROM wanted)
    GROUP BY session_id
),
final AS (
    SELECT
        s.session_id, s.format, s.project, s.git_branch, s.parent_session_id, s.started_at,
        s.ended_at, s.model,
        coalesce(counts.n_user, 0) AS n_user,
        coalesce(counts.n_assistant, 0) AS n_assistant,
        coalesce(sizes.est_tokens, 0) AS est_tokens,
        s.n_tool_calls,
        coalesce(usage.api_calls, 0) AS api_calls,
        coalesce(usage.input_tokens, 0) AS input_tokens,
        coalesce(usage.output_tokens, 0) AS output_tokens,
        coalesce(usage.cache_write_tokens, 0) AS cache_write_tokens,
        coalesce(usage.cache_read_tokens, 0) AS cache_read_tokens,
        coalesce(usage.total_tokens, 0) AS total_tokens,
        usage.session_id IS NOT NULL AS has_usage,
        usage.cost_usd,
        coalesce(usage.unpriced_models, []) AS unpriced_models,
        usage.recorded_cost_usd,
        s.first_user_text,
        s.source_id
    FROM sessions AS s
    LEFT JOIN counts USING (session_id)
    LEFT JOIN sizes USING (session_id)
    LEFT JOIN usage USING (session_id)
    WHERE s.session_id IN (SELECT session_id FROM wanted)
)
SELECT * FROM final
