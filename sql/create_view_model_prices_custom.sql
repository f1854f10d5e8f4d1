-- model_prices for a report: the base prices (lake or computed now), with the config file's prices replacing those of the models it names
CREATE OR REPLACE TEMP VIEW model_prices AS
WITH base AS (
    SELECT * FROM model_prices_base
    UNION ALL BY NAME
    SELECT CAST(NULL AS DECIMAL(38, 12)) AS cache_write_1h_usd_per_mtok WHERE false
),
final AS (
    SELECT * FROM base WHERE model NOT IN (SELECT model FROM price_overrides)
    UNION ALL BY NAME
    SELECT * FROM price_overrides
)
SELECT * FROM final
