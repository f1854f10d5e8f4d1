-- A derived table (plans, evictions, path classes, ...): all its Parquet files, one view
CREATE OR REPLACE VIEW {name} AS
WITH final AS (
    SELECT * FROM read_parquet({glob}, union_by_name = true, hive_partitioning = false)
)
SELECT * FROM final
