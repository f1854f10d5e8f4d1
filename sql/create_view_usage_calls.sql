-- usage_calls: recorded usage once per API call (or per run), dated, with its cost from model_prices (NULL = unpriced)
CREATE OR REPLACE VIEW usage_calls AS
WITH current_usage AS (
    -- rows that carry recorded usage, read from the current parts directly (not from the
    -- messages view, whose dedup window runs over every message row: ~5x the work)
    SELECT session_id, source_id, seq, api_call_id, usage_scope, model, "timestamp",
           input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens,
           reasoning_tokens, cost_usd_recorded
    FROM _messages_current
    WHERE input_tokens IS NOT NULL OR output_tokens IS NOT NULL
       OR cache_creation_tokens IS NOT NULL OR cache_read_tokens IS NOT NULL
       OR cost_usd_recorded IS NOT NULL
),
ranked AS (
    -- usage dedup rule, mirrored in create_view_messages.sql (ranked): change both together;
    -- on these rows only (same partitions, so the same survivors): usage once per API call,
    -- the row with the largest output_tokens (FORMATS.md)
    SELECT
        *,
        api_call_id IS NULL
            OR input_tokens IS NULL
            OR row_number() OVER (
                PARTITION BY session_id, api_call_id, input_tokens IS NULL
                ORDER BY output_tokens DESC NULLS LAST, seq DESC
            ) = 1 AS usage_kept
    FROM current_usage
),
usage_rows AS (
    SELECT
        session_id, source_id, seq, api_call_id, coalesce(usage_scope, 'call') AS usage_scope,
        model, "timestamp" AS recorded_at,
        CASE WHEN usage_kept THEN coalesce(input_tokens, 0) ELSE 0 END AS input_tokens,
        CASE WHEN usage_kept THEN coalesce(output_tokens, 0) ELSE 0 END AS output_tokens,
        CASE WHEN usage_kept THEN coalesce(cache_creation_tokens, 0) ELSE 0 END AS cache_write_tokens,
        CASE WHEN usage_kept THEN coalesce(cache_read_tokens, 0) ELSE 0 END AS cache_read_tokens,
        CASE WHEN usage_kept THEN coalesce(reasoning_tokens, 0) ELSE 0 END AS reasoning_tokens,
        cost_usd_recorded
    FROM ranked
    WHERE usage_kept OR cost_usd_recorded IS NOT NULL
),
undated_sessions AS (
    SELECT DISTINCT session_id FROM usage_rows WHERE recorded_at IS NULL
),
last_seen AS (
    SELECT session_id, max(recorded_at) AS last_at
    FROM usage_rows SEMI JOIN undated_sessions USING (session_id)
    GROUP BY session_id
),
dated AS (
    -- a row without its own time (run-level totals) is dated at the session's last timed usage
    SELECT usage_rows.*, coalesce(recorded_at, last_seen.last_at) AS "timestamp"
    FROM usage_rows
    LEFT JOIN last_seen USING (session_id)
),
measured AS (
    SELECT
        *,
        -- the tier is chosen by the call's total input; run totals are priced at the base tier
        CASE WHEN usage_scope = 'run' THEN 0
             ELSE input_tokens + cache_write_tokens + cache_read_tokens END AS tier_tokens,
        CAST(timezone('UTC', "timestamp") AS DATE) AS utc_day,
        CAST(timezone('UTC', "timestamp") AS TIME) AS utc_time
    FROM dated
),
regimes AS (
    -- models with conditional prices (time windows, start dates) need the choice below
    SELECT model, max(priority) > 0 AS conditional FROM model_prices GROUP BY model
),
candidates AS (
    -- the price row of each call's tier (tiers never overlap) whose condition holds;
    -- priority 0 (the first price) always qualifies, as genai-prices falls back to it
    SELECT measured.*, regimes.conditional, prices.priority, prices.priced_as,
           prices.request_usd, prices.input_usd_per_mtok, prices.cache_write_usd_per_mtok,
           prices.cache_read_usd_per_mtok, prices.output_usd_per_mtok
    FROM measured
    LEFT JOIN regimes ON regimes.model = measured.model
    LEFT JOIN model_prices AS prices
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
final AS (
    SELECT
        session_id, source_id, seq, api_call_id, usage_scope, model, "timestamp", recorded_at,
        input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, reasoning_tokens,
        input_tokens + output_tokens + cache_write_tokens + cache_read_tokens AS total_tokens,
        priced_as,
        request_usd
            + (input_tokens * input_usd_per_mtok
               + cache_write_tokens * cache_write_usd_per_mtok
               + cache_read_tokens * cache_read_usd_per_mtok
               + output_tokens * output_usd_per_mtok) * CAST(0.000001 AS DECIMAL(7, 6)) AS cost_usd,
        CAST(cost_usd_recorded AS DECIMAL(38, 12)) AS recorded_cost_usd
    FROM matched
)
SELECT * FROM final
