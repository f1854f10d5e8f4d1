-- usage_report_rows: what the period reports sum, one row per call of usage_calls (a report's connection; stored lakes read usage_buckets instead)
CREATE OR REPLACE TEMP VIEW usage_report_rows AS
WITH final AS (
    SELECT
        "timestamp" AS bucket, session_id, model, agent, project, format, parent_session_id,
        priced_as,
        CAST(usage_scope = 'call' AS BIGINT) AS api_calls,
        CAST(usage_scope = 'run' AS BIGINT) AS run_rows,
        input_tokens, output_tokens, cache_write_tokens, cache_write_1h_tokens,
        cache_read_tokens, reasoning_tokens, total_tokens,
        CAST(cost_usd IS NULL AS BIGINT) AS unpriced_rows,
        cost_usd, recorded_cost_usd, compared_cost_usd,
        CAST(cost_recorded AND cost_usd IS NULL AS BIGINT) AS compared_unpriced_rows,
        "timestamp" AS first_at, "timestamp" AS last_at
    FROM usage_calls
)
SELECT * FROM final
