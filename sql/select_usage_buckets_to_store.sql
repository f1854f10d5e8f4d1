-- usage_report_rows summed per 15-minute UTC bucket, session, model and group keys, to store as derived/usage_buckets (every time zone's days are whole buckets), in usage.BUCKETS_ORDER
WITH rows AS (
    SELECT * FROM usage_report_rows
),
final AS (
    SELECT
        time_bucket(INTERVAL 15 MINUTE, bucket) AS bucket,
        session_id, model, agent, project, format, parent_session_id,
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
        sum(compared_cost_usd) AS compared_cost_usd,
        sum(compared_unpriced_rows) AS compared_unpriced_rows,
        min(first_at) AS first_at,
        max(last_at) AS last_at,
        CAST($price_source AS VARCHAR) AS price_source
    FROM rows
    GROUP BY ALL
)
SELECT * FROM final
ORDER BY bucket NULLS LAST, session_id, model NULLS LAST, agent, project NULLS LAST, format, parent_session_id
