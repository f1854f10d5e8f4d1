-- Usage and cost per period ($period: day | week | month | session, days in time zone $tz), group ($group: model | agent | project | format) and model, with distinct sessions per level, for `ctxlake report` ($undated_formats: the formats whose call without a time is a "(no date)" row, session reports too)
WITH calls AS (
    -- calls, or their stored 15-minute sums (usage_report_rows): every zone's days are whole buckets
    SELECT
        *,
        CAST(timezone(CAST($tz AS VARCHAR), bucket) AS DATE) AS local_day
    FROM usage_report_rows
    WHERE CAST($project AS VARCHAR) IS NULL OR contains(project, CAST($project AS VARCHAR))
),
in_range AS (
    SELECT
        *,
        CASE CAST($period AS VARCHAR)
            WHEN 'day' THEN strftime(local_day, '%Y-%m-%d')
            -- weeks start on day $week_start (ISO: 1 = Monday, the default; 7 = Sunday, ccusage's
            -- default), named by their first day, as ccusage names them
            WHEN 'week' THEN strftime(local_day - CAST((isodow(local_day) - CAST($week_start AS INTEGER) + 7) % 7 AS INTEGER), '%Y-%m-%d')
            WHEN 'month' THEN strftime(local_day, '%Y-%m')
            -- a Claude Code call or Codex token_count whose time cannot be read is "(no
            -- date)" here too, as ccusage leaves it out of its session
            ELSE CASE WHEN bucket IS NOT NULL OR NOT list_contains(CAST($undated_formats AS VARCHAR[]), format) THEN session_id END
        END AS period,
        CASE CAST($group AS VARCHAR)
            WHEN 'agent' THEN agent
            WHEN 'project' THEN coalesce(project, '(no project)')
            WHEN 'format' THEN format
            ELSE coalesce(model, '(unknown)')
        END AS grp
    FROM calls
    WHERE (CAST($since AS DATE) IS NULL OR local_day >= CAST($since AS DATE))
      AND (CAST($until AS DATE) IS NULL OR local_day <= CAST($until AS DATE))
),
cells AS (
    -- one row per (period, group, model): the caller sums them (exact DECIMAL costs)
    SELECT
        'cell' AS level,
        period,
        grp,
        model,
        any_value(priced_as) AS priced_as,
        sum(api_calls) AS api_calls,
        sum(run_rows) AS run_rows,
        sum(input_tokens) AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cache_write_tokens) AS cache_write_tokens,
        sum(cache_write_1h_tokens) AS cache_write_1h_tokens,
        sum(cache_read_tokens) AS cache_read_tokens,
        sum(reasoning_tokens) AS reasoning_tokens,
        sum(total_tokens) AS total_tokens,
        sum(unpriced_rows) AS unpriced_rows,
        sum(cost_usd) AS cost_usd,
        sum(recorded_cost_usd) AS recorded_cost_usd,
        -- the computed cost of the sessions that record their own, and whether all of it is priced
        sum(compared_cost_usd) AS compared_cost_usd,
        sum(compared_unpriced_rows) AS compared_unpriced_rows,
        any_value(project) AS project,
        any_value(format) AS format,
        any_value(parent_session_id) AS parent_session_id,
        min(first_at) AS first_at,
        max(last_at) AS last_at
    FROM in_range
    GROUP BY period, grp, model
),
session_counts AS (
    -- distinct sessions do not add up: counted per group, period and the whole range
    SELECT
        CASE WHEN grouping(period) = 1 THEN 'total'
             WHEN grouping(grp) = 1 THEN 'period'
             ELSE 'group' END AS level,
        period,
        grp,
        count(DISTINCT session_id) AS sessions
    FROM in_range
    GROUP BY GROUPING SETS ((period, grp), (period), ())
),
final AS (
    SELECT * FROM cells
    UNION ALL BY NAME
    SELECT * FROM session_counts
)
SELECT * FROM final ORDER BY level, period NULLS LAST, grp NULLS LAST, model NULLS LAST
