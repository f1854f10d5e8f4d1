-- How many stored usage buckets were priced from another price source than $price_source: 0 means they are current
WITH stale AS (
    SELECT count(*) AS stale FROM usage_buckets
    WHERE price_source IS DISTINCT FROM CAST($price_source AS VARCHAR)
),
final AS (
    SELECT stale FROM stale
)
SELECT * FROM final
