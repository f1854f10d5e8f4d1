-- price_regimes(calls, prices): every row of calls (with model and "timestamp") and the priority of the price regime it is priced by (calls of a model without price rows left out): THE rule of the usage reports and of replay
CREATE OR REPLACE MACRO price_regimes(calls, prices) AS TABLE
WITH regimes AS (
    -- the conditional prices of each model (one row per priority, whatever its tiers)
    SELECT DISTINCT model, priority, start_date, time_from, time_to FROM query_table(prices)
),
measured AS (
    SELECT
        *,
        row_number() OVER () AS regime_call_no,
        CAST(timezone('UTC', "timestamp") AS DATE) AS regime_utc_day,
        CAST(timezone('UTC', "timestamp") AS TIME) AS regime_utc_time
    FROM query_table(calls)
),
matched AS (
    -- priority 0 (the first price) always qualifies, as genai-prices falls back to it; a
    -- conditional price when its start date and UTC time window hold; the last active one wins
    SELECT measured.regime_call_no, regimes.priority
    FROM measured
    JOIN regimes
        ON regimes.model = measured.model
       AND (regimes.priority = 0 OR (
                (regimes.start_date IS NULL OR measured.regime_utc_day >= regimes.start_date)
            AND (regimes.time_from IS NULL OR CASE
                    WHEN regimes.time_to < regimes.time_from
                        THEN measured.regime_utc_time >= regimes.time_from OR measured.regime_utc_time < regimes.time_to
                    ELSE measured.regime_utc_time >= regimes.time_from AND measured.regime_utc_time < regimes.time_to
                 END)))
    QUALIFY row_number() OVER (PARTITION BY measured.regime_call_no ORDER BY regimes.priority DESC) = 1
),
final AS (
    SELECT measured.* EXCLUDE (regime_call_no, regime_utc_day, regime_utc_time), matched.priority
    FROM measured
    JOIN matched USING (regime_call_no)
)
SELECT * FROM final
