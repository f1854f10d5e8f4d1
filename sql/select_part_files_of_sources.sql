-- The files of one part table (its glob in the slot) holding any row of the sources in $sources: what a scoped view of that table reads
WITH parts AS (
    SELECT filename, source_id
    FROM read_parquet({glob}, filename = true, hive_partitioning = false)
),
final AS (
    SELECT DISTINCT filename FROM parts WHERE list_contains($sources, source_id)
)
SELECT * FROM final ORDER BY filename
