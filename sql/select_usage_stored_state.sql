-- The stored usage's state in one read: sources changed since refresh_usage (new, re-read, appended, gone), and stored rows priced from another source than $price_source; 0 and 0 mean current
WITH now_state AS (
    SELECT source_id, generation, run_id FROM read_parquet({sources}, hive_partitioning = false)
),
then_state AS (
    SELECT source_id, generation, run_id
    FROM read_parquet({covered}, union_by_name = true, hive_partitioning = false)
),
changed AS (
    SELECT count(*) AS n
    FROM now_state
    FULL OUTER JOIN then_state ON now_state.source_id = then_state.source_id
    WHERE now_state.generation IS DISTINCT FROM then_state.generation
       OR now_state.run_id IS DISTINCT FROM then_state.run_id
       OR now_state.source_id IS NULL OR then_state.source_id IS NULL
),
stale AS (
    SELECT count(*) FILTER (WHERE price_source IS DISTINCT FROM CAST($price_source AS VARCHAR)) AS n
    FROM read_parquet({stored}, union_by_name = true, hive_partitioning = false)
),
final AS (
    SELECT changed.n AS changed, stale.n AS stale FROM changed, stale
)
SELECT * FROM final
