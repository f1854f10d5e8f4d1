-- daily_usage: tokens and cost per day and model; the day is in the connection's TimeZone (UTC unless SET TimeZone)
CREATE OR REPLACE VIEW daily_usage AS
WITH calls AS (
    SELECT * FROM usage_calls
),
final AS (
    SELECT
        CAST("timestamp" AS DATE) AS day,
        model,
        any_value(priced_as) AS priced_as,
        count(DISTINCT session_id) AS sessions,
        count(*) FILTER (WHERE usage_scope = 'call') AS api_calls,
        sum(input_tokens) AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cache_write_tokens) AS cache_write_tokens,
        sum(cache_read_tokens) AS cache_read_tokens,
        sum(reasoning_tokens) AS reasoning_tokens,
        sum(total_tokens) AS total_tokens,
        -- NULL (unpriced) unless every row of the group has a price: never a silent $0
        CASE WHEN count(cost_usd) = count(*) THEN sum(cost_usd) END AS cost_usd,
        sum(recorded_cost_usd) AS recorded_cost_usd
    FROM calls
    GROUP BY ALL
)
SELECT * FROM final
