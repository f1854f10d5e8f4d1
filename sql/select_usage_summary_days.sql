-- The stored 15-minute sums (usage_buckets) summed per local day of time zone $tz, model, agent, project and format, with their sessions, for derived/usage_summary/buckets.json (the day/week/month reports in that zone); costs in exact 1e-12 USD units (exact: false when a cost has more decimals)
WITH buckets AS (
    SELECT *, CAST(timezone(CAST($tz AS VARCHAR), bucket) AS DATE) AS local_day FROM usage_buckets
),
days AS (
    SELECT
        local_day, model, agent, project, format,
        list(DISTINCT session_id ORDER BY session_id) AS session_ids,
        sum(api_calls) AS api_calls,
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
        sum(compared_cost_usd) AS compared_cost_usd,
        sum(compared_unpriced_rows) AS compared_unpriced_rows
    FROM buckets
    GROUP BY ALL
),
final AS (
    SELECT
        strftime(local_day, '%Y-%m-%d') AS day, session_ids, model, agent, project, format,
        CAST(NULL AS VARCHAR) AS parent_session_id,
        CAST(api_calls AS BIGINT) AS api_calls,
        CAST(input_tokens AS BIGINT) AS input_tokens,
        CAST(output_tokens AS BIGINT) AS output_tokens,
        CAST(cache_write_tokens AS BIGINT) AS cache_write_tokens,
        CAST(cache_write_1h_tokens AS BIGINT) AS cache_write_1h_tokens,
        CAST(cache_read_tokens AS BIGINT) AS cache_read_tokens,
        CAST(reasoning_tokens AS BIGINT) AS reasoning_tokens,
        CAST(total_tokens AS BIGINT) AS total_tokens,
        CAST(unpriced_rows AS BIGINT) AS unpriced_rows,
        CAST(CAST(cost_usd AS DECIMAL(38, 12)) * 1000000000000 AS BIGINT) AS cost_usd,
        CAST(CAST(recorded_cost_usd AS DECIMAL(38, 12)) * 1000000000000 AS BIGINT) AS recorded_cost_usd,
        CAST(CAST(compared_cost_usd AS DECIMAL(38, 12)) * 1000000000000 AS BIGINT) AS compared_cost_usd,
        CAST(compared_unpriced_rows AS BIGINT) AS compared_unpriced_rows,
        CAST(NULL AS BIGINT) AS first_at,
        CAST(NULL AS BIGINT) AS last_at,
        coalesce(CAST(cost_usd AS DECIMAL(38, 12)) = cost_usd, true)
            AND coalesce(CAST(recorded_cost_usd AS DECIMAL(38, 12)) = recorded_cost_usd, true)
            AND coalesce(CAST(compared_cost_usd AS DECIMAL(38, 12)) = compared_cost_usd, true) AS exact
    FROM days
)
SELECT * FROM final
ORDER BY day NULLS LAST, model NULLS LAST, agent, project NULLS LAST, format
