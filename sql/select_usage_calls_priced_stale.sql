-- How many stored priced calls were priced from another price source than $price_source: 0 means the stored costs are current
WITH stale AS (
    SELECT count(*) AS stale FROM usage_calls_priced
    WHERE price_source IS DISTINCT FROM CAST($price_source AS VARCHAR)
),
final AS (
    SELECT stale FROM stale
)
SELECT * FROM final
