-- sources: one row per archive file ever seen, with its watermark and current generation
CREATE OR REPLACE VIEW sources AS
WITH final AS (
    SELECT * FROM read_parquet({glob}, hive_partitioning = false)
)
SELECT * FROM final
