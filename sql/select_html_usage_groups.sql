-- HTML report overview: recorded usage per (UTC day, model, project, agent format) in the date/project filter ($since/$until: inclusive UTC dates or NULL, $project or NULL), tokens by kind and cost (NULL when a row has no price)
WITH calls AS (
    SELECT
        CAST(u."timestamp" AS DATE) AS day,
        coalesce(u.model, '(unknown)') AS model,
        s.project,
        s.format AS agent,
        u.input_tokens, u.output_tokens, u.cache_write_tokens, u.cache_read_tokens,
        u.total_tokens, u.cost_usd
    FROM usage_calls AS u
    LEFT JOIN sessions AS s USING (session_id)
),
bounded AS (
    SELECT * FROM calls
    WHERE ($since IS NULL OR day >= CAST($since AS DATE))
      AND ($until IS NULL OR day <= CAST($until AS DATE))
      AND ($project IS NULL OR project = $project)
),
final AS (
    SELECT
        day, model, project, agent,
        count(*) AS calls,
        coalesce(sum(input_tokens), 0) AS input_tokens,
        coalesce(sum(output_tokens), 0) AS output_tokens,
        coalesce(sum(cache_write_tokens), 0) AS cache_write_tokens,
        coalesce(sum(cache_read_tokens), 0) AS cache_read_tokens,
        coalesce(sum(total_tokens), 0) AS total_tokens,
        sum(cost_usd) AS cost_usd,
        count(*) - count(cost_usd) AS unpriced_calls
    FROM bounded
    GROUP BY ALL
)
SELECT * FROM final ORDER BY day NULLS LAST, model, project NULLS LAST, agent NULLS LAST
