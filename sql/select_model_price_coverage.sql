-- The recorded model names the lake's model_prices covers, with the price source they were computed from (a priced model needs its 1-hour cache-write price)
WITH prices AS (
    SELECT * FROM model_prices
    UNION ALL BY NAME
    SELECT CAST(NULL AS DECIMAL(38, 12)) AS cache_write_1h_usd_per_mtok WHERE false
),
covered AS (
    SELECT model, price_source
    FROM prices
    GROUP BY model, price_source
    HAVING count(*) FILTER (WHERE provider IS NOT NULL AND cache_write_1h_usd_per_mtok IS NULL) = 0
),
final AS (
    SELECT model, price_source FROM covered
)
SELECT * FROM final ORDER BY model, price_source
