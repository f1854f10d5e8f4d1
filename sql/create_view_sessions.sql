-- sessions: one row per session (sub-agents point to their parent), from session_info and messages
CREATE OR REPLACE VIEW sessions AS
WITH info_rows AS (
    SELECT *, coalesce(first_seen_at, 'infinity'::TIMESTAMPTZ) AS seen_order
    FROM session_info
),
info AS (
    SELECT
        session_id,
        arg_min(format, seen_order) AS format,
        arg_min(project, seen_order) FILTER (WHERE project IS NOT NULL) AS project,
        arg_min(git_branch, seen_order) FILTER (WHERE git_branch IS NOT NULL) AS git_branch,
        arg_min(parent_session_id, seen_order) FILTER (WHERE parent_session_id IS NOT NULL) AS parent_session_id,
        arg_min(agent_id, seen_order) FILTER (WHERE agent_id IS NOT NULL) AS agent_id,
        arg_max(cli_version, seen_order) FILTER (WHERE cli_version IS NOT NULL) AS cli_version,
        min(source_id) AS source_id
    FROM info_rows
    GROUP BY session_id
),
stats AS (
    SELECT
        session_id,
        min("timestamp") AS started_at,
        max("timestamp") AS ended_at,
        count(*) AS n_messages,
        count(*) FILTER (WHERE role = 'user' AND kind = 'text') AS n_user,
        count(*) FILTER (WHERE is_prompt) AS n_prompts,
        count(*) FILTER (WHERE role = 'assistant' AND kind IN ('text', 'thinking', 'tool_use')) AS n_assistant,
        count(*) FILTER (WHERE usage_scope = 'call' AND (input_tokens IS NOT NULL OR output_tokens IS NOT NULL)) AS n_api_calls,
        count(*) FILTER (WHERE kind = 'tool_use') AS n_tool_calls,
        count(*) FILTER (WHERE kind = 'tool_result') AS n_tool_results,
        arg_min(text, seq) FILTER (WHERE is_prompt) AS first_user_text,
        sum(est_tokens) AS est_tokens,
        arg_max(model, seq) FILTER (WHERE model IS NOT NULL AND model <> '<synthetic>') AS model
    FROM messages
    GROUP BY session_id
),
final AS (
    SELECT
        info.session_id, info.format, info.project, info.git_branch, stats.started_at,
        stats.ended_at, info.parent_session_id, info.agent_id, info.cli_version, stats.model,
        coalesce(stats.n_messages, 0) AS n_messages, coalesce(stats.n_user, 0) AS n_user,
        coalesce(stats.n_prompts, 0) AS n_prompts, coalesce(stats.n_assistant, 0) AS n_assistant,
        coalesce(stats.n_api_calls, 0) AS n_api_calls,
        coalesce(stats.n_tool_calls, 0) AS n_tool_calls,
        coalesce(stats.n_tool_results, 0) AS n_tool_results,
        stats.first_user_text, coalesce(stats.est_tokens, 0) AS est_tokens, info.source_id,
        coalesce(session_flags.ignored, false) AS ignored, session_flags.ignored_by
    FROM info
    LEFT JOIN stats USING (session_id)
    LEFT JOIN session_flags USING (session_id)
)
SELECT * FROM final
