-- model_prices_base for this connection only: the lake's derived/model_prices files
CREATE OR REPLACE TEMP VIEW model_prices_base AS
WITH final AS (
    SELECT * FROM read_parquet({glob}, union_by_name = true, hive_partitioning = false)
)
SELECT * FROM final
