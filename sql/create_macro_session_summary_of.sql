-- session_summary_of(ids, costs): session_counts_of(ids) with each session's usage and cost (none when costs is false); the session_summary view is all of it
CREATE OR REPLACE MACRO session_summary_of(ids, costs := true) AS TABLE
WITH summary_counts AS (
    SELECT * FROM session_counts_of(ids)
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
    WHERE costs AND session_id IN (SELECT session_id FROM summary_counts)
    GROUP BY session_id
),
final AS (
    SELECT
        c.session_id, c.format, c.project, c.git_branch, c.parent_session_id, c.started_at,
        c.ended_at, c.model, c.n_user, c.n_assistant, c.est_tokens, c.n_tool_calls,
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
        c.first_user_text,
        c.source_id
    FROM summary_counts AS c
    LEFT JOIN usage USING (session_id)
)
SELECT * FROM final
