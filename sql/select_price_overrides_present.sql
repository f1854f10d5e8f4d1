-- Whether this connection already holds the config prices table (price_overrides, a temp table)
WITH found AS (
    SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'price_overrides' AND temporary
),
final AS (
    SELECT n FROM found
)
SELECT * FROM final
