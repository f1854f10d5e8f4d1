-- The columns of one view or table of the lake's database, in order (name and type): what a view bound on it depends on
WITH final AS (
    SELECT column_name, data_type, column_index
    FROM duckdb_columns()
    WHERE schema_name = 'main' AND table_name = $name
)
SELECT * FROM final ORDER BY column_index
