-- session_counts_of(ids): per session of ids (every session when ids is NULL; a session's sub-agents are in ids when wanted: select_session_families), the daily-log counts (main thread: prompts, assistant responses, est. tokens) without usage: what the logs and recovery documents read (planning usage_calls costs ~0.25 s a query)
CREATE OR REPLACE MACRO session_counts_of(ids) AS TABLE
WITH wanted AS (
    SELECT DISTINCT session_id
    FROM session_info
    WHERE ids IS NULL OR list_contains(ids, session_id)
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
final AS (
    SELECT
        s.session_id, s.format, s.project, s.git_branch, s.parent_session_id, s.started_at,
        s.ended_at, s.model,
        coalesce(counts.n_user, 0) AS n_user,
        coalesce(counts.n_assistant, 0) AS n_assistant,
        coalesce(sizes.est_tokens, 0) AS est_tokens,
        s.n_tool_calls,
        s.first_user_text,
        s.source_id
    FROM sessions AS s
    LEFT JOIN counts USING (session_id)
    LEFT JOIN sizes USING (session_id)
    -- the ids themselves, not the wanted CTE: a filter on the sessions view's group key is
    -- pushed below its aggregate over every message (an IN over a CTE is not: ~0.4 s)
    WHERE ids IS NULL OR list_contains(ids, s.session_id)
)
SELECT * FROM final
