-- The recorded model names the lake's model_prices covers, with the price source they were computed from
WITH covered AS (
    SELECT DISTINCT model, price_source FROM model_prices
),
final AS (
    SELECT model, price_source FROM covered
)
SELECT * FROM final ORDER BY model, price_source
