-- Whether the lake has a view named $name (a derived table appears after its stage first ran)
WITH found AS (
    SELECT view_name FROM duckdb_views() WHERE view_name = $name
),
final AS (
    SELECT count(*) > 0 AS present FROM found
)
SELECT * FROM final
