-- The stored 15-minute sums (usage_buckets) as plain numbers for derived/usage_summary/buckets.json: times in epoch microseconds, the session as a one-element list, costs in exact 1e-12 USD units (exact: false when a cost has more decimals, then no summary is written)
WITH buckets AS (
    SELECT * FROM usage_buckets
),
final AS (
    SELECT
        epoch_us(bucket) AS bucket, [session_id] AS session_ids, model, agent, project, format, parent_session_id,
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
        epoch_us(first_at) AS first_at,
        epoch_us(last_at) AS last_at,
        coalesce(CAST(cost_usd AS DECIMAL(38, 12)) = cost_usd, true)
            AND coalesce(CAST(recorded_cost_usd AS DECIMAL(38, 12)) = recorded_cost_usd, true)
            AND coalesce(CAST(compared_cost_usd AS DECIMAL(38, 12)) = compared_cost_usd, true) AS exact
    FROM buckets
)
SELECT * FROM final
ORDER BY bucket NULLS LAST, session_ids, model NULLS LAST, agent, project NULLS LAST, format, parent_session_id NULLS LAST
