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
    -- forked session's file, same message.id:requestId): its fullest row, as within a
    -- session (a response whose lines name two sessions), then, copies being equal, the
    -- session that recorded it first (its own time, then the session's first call, then the
    -- file path, as ccusage orders files); session rows and transcripts stay whole, only
    -- usage is deduplicated
    SELECT * FROM session_rows
    QUALIFY call_key IS NULL OR row_number() OVER (
        PARTITION BY call_key
        ORDER BY input_tokens + output_tokens + cache_write_tokens + cache_read_tokens DESC,
                 recorded_at NULLS LAST, session_first_at NULLS LAST, source_path, session_id, seq
    ) = 1
),
prices AS (
    -- price tables written before the 1-hour cache-write price get it as NULL (the 5-minute price)
    SELECT * FROM model_prices
    UNION ALL BY NAME
    SELECT CAST(NULL AS DECIMAL(38, 12)) AS cache_write_1h_usd_per_mtok WHERE false
),
measured AS (
    SELECT * FROM usage_rows
),
call_times AS (
    SELECT source_id, seq, model, "timestamp" FROM measured
),
regime_of_call AS (
    -- the price regime of each call (sql/create_macro_price_regimes.sql: the one price matcher)
    SELECT source_id, seq, priority FROM price_regimes(call_times, prices)
),
call_tiers AS (
    -- each call with every tier of its regime, and the share of each token kind in that tier:
    -- a kind's tokens are priced tier by tier on its OWN count, as ccusage does (Claude's and
    -- Gemini's long-context rate above 200k: the first 200k tokens of a kind at the base
    -- price, the rest at the tier's); run totals (usage_scope 'run') all at the base tier
    SELECT
        measured.source_id, measured.seq, measured.usage_scope,
        measured.input_tokens, measured.cache_write_tokens - measured.cache_write_1h_tokens AS cache_write_5m_tokens,
        measured.cache_write_1h_tokens, measured.cache_read_tokens, measured.output_tokens,
        prices.priced_as, prices.input_above, greatest(prices.input_above, 0) AS tier_from,
        prices.input_upto AS tier_upto, prices.request_usd, prices.input_usd_per_mtok,
        prices.cache_write_usd_per_mtok,
        coalesce(prices.cache_write_1h_usd_per_mtok, prices.cache_write_usd_per_mtok) AS cache_write_1h_usd_per_mtok,
        prices.cache_read_usd_per_mtok, prices.output_usd_per_mtok
    FROM measured
    JOIN regime_of_call USING (source_id, seq)
    JOIN prices ON prices.model = measured.model AND prices.priority = regime_of_call.priority
),
tiered AS (
    -- one row per call: its per-request fee (the base tier's) and the USD of its tokens
    SELECT
        source_id, seq,
        arg_min(priced_as, input_above) AS priced_as,
        sum(CASE WHEN input_above < 0 THEN request_usd ELSE 0 END) AS request_usd,
        sum((CASE WHEN usage_scope = 'run' THEN CASE WHEN input_above < 0 THEN input_tokens ELSE 0 END
                     ELSE greatest(0, least(input_tokens, coalesce(tier_upto, input_tokens)) - tier_from) END) * input_usd_per_mtok
            + (CASE WHEN usage_scope = 'run' THEN CASE WHEN input_above < 0 THEN cache_write_5m_tokens ELSE 0 END
                     ELSE greatest(0, least(cache_write_5m_tokens, coalesce(tier_upto, cache_write_5m_tokens)) - tier_from) END) * cache_write_usd_per_mtok
            + (CASE WHEN usage_scope = 'run' THEN CASE WHEN input_above < 0 THEN cache_write_1h_tokens ELSE 0 END
                     ELSE greatest(0, least(cache_write_1h_tokens, coalesce(tier_upto, cache_write_1h_tokens)) - tier_from) END) * cache_write_1h_usd_per_mtok
            + (CASE WHEN usage_scope = 'run' THEN CASE WHEN input_above < 0 THEN cache_read_tokens ELSE 0 END
                     ELSE greatest(0, least(cache_read_tokens, coalesce(tier_upto, cache_read_tokens)) - tier_from) END) * cache_read_usd_per_mtok
            + (CASE WHEN usage_scope = 'run' THEN CASE WHEN input_above < 0 THEN output_tokens ELSE 0 END
                     ELSE greatest(0, least(output_tokens, coalesce(tier_upto, output_tokens)) - tier_from) END) * output_usd_per_mtok) AS tokens_usd_per_mtok
    FROM call_tiers
    GROUP BY source_id, seq
),
costed AS (
    SELECT
        measured.*,
        tiered.priced_as,
        tiered.request_usd
            + tiered.tokens_usd_per_mtok * CAST(0.000001 AS DECIMAL(7, 6)) AS cost_usd
    FROM measured
    LEFT JOIN tiered USING (source_id, seq)
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
