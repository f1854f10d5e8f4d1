-- usage_calls: recorded usage once per API call across the whole lake (or per run), dated, with its cost from model_prices (NULL = unpriced)
CREATE OR REPLACE VIEW usage_calls AS
WITH call_rows AS (
    -- per-session call rows: derived/usage_call_rows (refresh_usage), else usage_call_rows_live
    SELECT * FROM usage_call_rows
),
session_order AS (
    SELECT session_id, min(recorded_at) AS first_at FROM call_rows GROUP BY session_id
),
ranked AS (
    -- one call once across the lake (Claude Code copies earlier calls into a resumed or
    -- forked session's file, same message.id:requestId): kept in the session that recorded
    -- it first (its own time, then the session's first call, then the file path, as ccusage
    -- orders files); session rows and transcripts stay whole, only usage is deduplicated
    SELECT
        call_rows.*,
        call_key IS NULL OR row_number() OVER (
            PARTITION BY call_key
            ORDER BY recorded_at NULLS LAST, session_order.first_at NULLS LAST, source_path,
                     session_id, seq
        ) = 1 AS first_copy
    FROM call_rows
    JOIN session_order USING (session_id)
),
usage_rows AS (
    SELECT * EXCLUDE (first_copy) FROM ranked WHERE first_copy
),
recorded_sessions AS (
    -- sessions that record their own cost: their computed cost is compared with it
    SELECT DISTINCT session_id FROM usage_rows WHERE cost_usd_recorded IS NOT NULL
),
prices AS (
    -- price tables written before the 1-hour cache-write price get it as NULL (the 5-minute price)
    SELECT * FROM model_prices
    UNION ALL BY NAME
    SELECT CAST(NULL AS DECIMAL(38, 12)) AS cache_write_1h_usd_per_mtok WHERE false
),
measured AS (
    SELECT
        *,
        -- the tier is chosen by the call's total input; run totals are priced at the base tier
        CASE WHEN usage_scope = 'run' THEN 0
             ELSE input_tokens + cache_write_tokens + cache_read_tokens END AS tier_tokens,
        CAST(timezone('UTC', "timestamp") AS DATE) AS utc_day,
        CAST(timezone('UTC', "timestamp") AS TIME) AS utc_time
    FROM usage_rows
),
regimes AS (
    -- models with conditional prices (time windows, start dates) need the choice below
    SELECT model, max(priority) > 0 AS conditional FROM prices GROUP BY model
),
candidates AS (
    -- the price row of each call's tier (tiers never overlap) whose condition holds;
    -- priority 0 (the first price) always qualifies, as genai-prices falls back to it
    SELECT measured.*, regimes.conditional, prices.priority, prices.priced_as,
           prices.request_usd, prices.input_usd_per_mtok, prices.cache_write_usd_per_mtok,
           coalesce(prices.cache_write_1h_usd_per_mtok, prices.cache_write_usd_per_mtok) AS cache_write_1h_usd_per_mtok,
           prices.cache_read_usd_per_mtok, prices.output_usd_per_mtok
    FROM measured
    LEFT JOIN regimes ON regimes.model = measured.model
    LEFT JOIN prices
        ON prices.model = measured.model
       AND measured.tier_tokens > prices.input_above
       AND (prices.input_upto IS NULL OR measured.tier_tokens <= prices.input_upto)
       AND (prices.priority = 0 OR (
                (prices.start_date IS NULL OR measured.utc_day >= prices.start_date)
            AND (prices.time_from IS NULL OR CASE
                    WHEN prices.time_to < prices.time_from
                        THEN measured.utc_time >= prices.time_from OR measured.utc_time < prices.time_to
                    ELSE measured.utc_time >= prices.time_from AND measured.utc_time < prices.time_to
                 END)))
),
matched AS (
    -- one row per call: unconditional models have exactly one candidate (or none: unpriced)
    SELECT * FROM candidates WHERE NOT coalesce(conditional, false)
    UNION ALL
    -- genai-prices: the last active conditional price wins
    SELECT * FROM candidates WHERE conditional
    QUALIFY row_number() OVER (PARTITION BY source_id, seq ORDER BY priority DESC) = 1
),
costed AS (
    SELECT
        *,
        request_usd
            + (input_tokens * input_usd_per_mtok
               + (cache_write_tokens - cache_write_1h_tokens) * cache_write_usd_per_mtok
               + cache_write_1h_tokens * cache_write_1h_usd_per_mtok
               + cache_read_tokens * cache_read_usd_per_mtok
               + output_tokens * output_usd_per_mtok) * CAST(0.000001 AS DECIMAL(7, 6)) AS cost_usd
    FROM matched
),
final AS (
    SELECT
        session_id, source_id, seq, api_call_id, call_key, usage_scope, model, "timestamp",
        recorded_at, input_tokens, output_tokens, cache_write_tokens, cache_write_1h_tokens,
        cache_read_tokens, reasoning_tokens,
        input_tokens + output_tokens + cache_write_tokens + cache_read_tokens AS total_tokens,
        priced_as,
        cost_usd,
        CAST(cost_usd_recorded AS DECIMAL(38, 12)) AS recorded_cost_usd,
        -- the computed cost of a session that records its own (to compare them), else NULL
        CASE WHEN session_id IN (SELECT session_id FROM recorded_sessions) THEN cost_usd END AS compared_cost_usd,
        session_id IN (SELECT session_id FROM recorded_sessions) AS cost_recorded,
        project, format, parent_session_id, agent
    FROM costed
)
SELECT * FROM final
