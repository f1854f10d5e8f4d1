-- Usage and cost per period ($period: day | month | session, days in time zone $tz) and model, for `ctxlake report`
WITH session_facts AS (
    SELECT
        session_id,
        arg_min(project, coalesce(first_seen_at, TIMESTAMPTZ 'infinity')) FILTER (WHERE project IS NOT NULL) AS project,
        arg_min(format, coalesce(first_seen_at, TIMESTAMPTZ 'infinity')) AS format,
        arg_min(parent_session_id, coalesce(first_seen_at, TIMESTAMPTZ 'infinity'))
            FILTER (WHERE parent_session_id IS NOT NULL) AS parent_session_id
    FROM session_info
    -- only needed for --project and the session report
    WHERE CAST($project AS VARCHAR) IS NOT NULL OR CAST($period AS VARCHAR) = 'session'
    GROUP BY session_id
),
calls AS (
    SELECT
        usage_calls.*,
        session_facts.project,
        session_facts.format,
        session_facts.parent_session_id,
        CAST(timezone(CAST($tz AS VARCHAR), usage_calls."timestamp") AS DATE) AS local_day
    FROM usage_calls
    LEFT JOIN session_facts USING (session_id)
    WHERE CAST($project AS VARCHAR) IS NULL OR contains(session_facts.project, CAST($project AS VARCHAR))
),
in_range AS (
    SELECT
        *,
        CASE CAST($period AS VARCHAR)
            WHEN 'day' THEN strftime(local_day, '%Y-%m-%d')
            WHEN 'month' THEN strftime(local_day, '%Y-%m')
            ELSE session_id
        END AS period
    FROM calls
    WHERE (CAST($since AS DATE) IS NULL OR local_day >= CAST($since AS DATE))
      AND (CAST($until AS DATE) IS NULL OR local_day <= CAST($until AS DATE))
),
final AS (
    -- one row per (period, model); periods and the total are summed by the caller (exact
    -- DECIMAL costs), distinct sessions from the session lists
    SELECT
        period,
        model,
        any_value(priced_as) AS priced_as,
        list_sort(list_distinct(list(session_id))) AS session_ids,
        count(*) FILTER (WHERE usage_scope = 'call') AS api_calls,
        count(*) FILTER (WHERE usage_scope = 'run') AS run_rows,
        sum(input_tokens) AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cache_write_tokens) AS cache_write_tokens,
        sum(cache_read_tokens) AS cache_read_tokens,
        sum(reasoning_tokens) AS reasoning_tokens,
        sum(total_tokens) AS total_tokens,
        count(*) - count(cost_usd) AS unpriced_rows,
        sum(cost_usd) AS cost_usd,
        sum(recorded_cost_usd) AS recorded_cost_usd,
        any_value(project) AS project,
        any_value(format) AS format,
        any_value(parent_session_id) AS parent_session_id,
        min("timestamp") AS first_at,
        max("timestamp") AS last_at
    FROM in_range
    GROUP BY period, model
)
SELECT * FROM final ORDER BY period NULLS LAST, model NULLS LAST
