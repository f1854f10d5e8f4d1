-- runs: one row per ingest or nightly run: line accounting, state, per-stage figures
CREATE OR REPLACE VIEW runs AS
WITH final AS (
    SELECT * FROM read_parquet({glob}, union_by_name = true, hive_partitioning = false)
)
SELECT * FROM final
