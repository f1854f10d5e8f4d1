-- HTML report session list: one row per session in the date/project filter ($since/$until: inclusive UTC dates or NULL, $project or NULL) with counts, usage, cost and the evictions of $policy
WITH chosen AS (
    SELECT *
    FROM session_summary
    WHERE ($since IS NULL OR CAST(started_at AS DATE) >= CAST($since AS DATE))
      AND ($until IS NULL OR CAST(started_at AS DATE) <= CAST($until AS DATE))
      AND ($project IS NULL OR project = $project)
),
evicted AS (
    SELECT
        session_id,
        count(*) AS evictions,
        sum(tokens_before - coalesce(tokens_after, 0)) AS tokens_saved
    FROM evictions
    WHERE policy = $policy
    GROUP BY session_id
),
final AS (
    SELECT
        c.session_id, c.parent_session_id, c.format, c.project, c.git_branch, c.model,
        c.started_at, c.ended_at, c.n_user, c.n_assistant, c.n_tool_calls, c.est_tokens,
        c.api_calls, c.input_tokens, c.output_tokens, c.cache_write_tokens,
        c.cache_read_tokens, c.total_tokens, c.has_usage, c.cost_usd, c.unpriced_models,
        c.recorded_cost_usd,
        coalesce(e.evictions, 0) AS evictions,
        coalesce(e.tokens_saved, 0) AS tokens_saved
    FROM chosen AS c
    LEFT JOIN evicted AS e USING (session_id)
)
SELECT * FROM final ORDER BY started_at NULLS LAST, session_id
