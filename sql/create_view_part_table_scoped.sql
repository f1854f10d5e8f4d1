-- A part table's current rows in the listed files only (a scoped cursor's temp view): the columns of the lake-wide view (its empty copy), the same commit and generation filter
CREATE OR REPLACE TEMP VIEW {name} AS
WITH parts AS (
    SELECT * FROM read_parquet({files}, union_by_name = true, filename = true, hive_partitioning = false)
),
current_rows AS (
    SELECT parts.* EXCLUDE (filename) FROM parts
    SEMI JOIN sources ON parts.source_id = sources.source_id AND parts.generation = sources.generation
    WHERE split_part(parse_filename(parts.filename), '-', 1) IN (SELECT run_id FROM committed_runs)
),
final AS (
    SELECT * FROM {empty} UNION ALL BY NAME SELECT * FROM current_rows
)
SELECT * FROM final
