-- usage_calls: recorded usage once per API call across the whole lake (or per run), dated, with its cost from model_prices (NULL = unpriced)
CREATE OR REPLACE VIEW usage_calls AS
WITH call_rows AS (
    -- per-session call rows: derived/usage_call_rows (refresh_usage) while current, else computed
    SELECT * FROM usage_call_rows_current
),
session_rows AS (
    -- each row with its session's first call and whether the session records its own cost
    SELECT
        *,
        min(recorded_at) OVER (PARTITION BY session_id) AS session_first_at,
        bool_or(cost_usd_recorded IS NOT NULL) OVER (PARTITION BY session_id) AS cost_recorded
    FROM call_rows
),
usage_rows AS (
    -- one call once across the lake (Claude Code copies earlier calls into a resumed or
    -- forked session's file, same message.id:requestId): kept in the session that recorded
    -- it first (its own time, then the session's first call, then the file path, as ccusage
    -- orders files); session rows and transcripts stay whole, only usage is deduplicated
    SELECT * FROM session_rows
    QUALIFY call_key IS NULL OR row_number() OVER (
        PARTITION BY call_key
        ORDER BY recorded_at NULLS LAST, session_first_at NULLS LAST, source_path, session_id, seq
    ) = 1
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
candidates AS (
    -- the price row of each call's tier (tiers never overlap) whose condition holds;
    -- priority 0 (the first price) always qualifies, as genai-prices falls back to it
    SELECT measured.*, prices.priority, prices.priced_as,
           prices.request_usd, prices.input_usd_per_mtok, prices.cache_write_usd_per_mtok,
           coalesce(prices.cache_write_1h_usd_per_mtok, prices.cache_write_usd_per_mtok) AS cache_write_1h_usd_per_mtok,
           prices.cache_read_usd_per_mtok, prices.output_usd_per_mtok
    FROM measured
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
    -- one row per call: an unconditional model has one candidate (or none: unpriced); with
    -- conditional prices, the last active one wins (genai-prices)
    SELECT * FROM candidates
    QUALIFY row_number() OVER (PARTITION BY source_id, seq ORDER BY priority DESC NULLS LAST) = 1
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
        CASE WHEN cost_recorded THEN cost_usd END AS compared_cost_usd,
        cost_recorded,
        project, format, parent_session_id, agent
    FROM costed
)
SELECT * FROM final
