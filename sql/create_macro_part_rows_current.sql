-- part_rows_current(files): a part table's current rows in the listed Parquet files (a glob or a list): parts of committed ingest runs only, kept for each source's current generation
CREATE OR REPLACE MACRO part_rows_current(files) AS TABLE
WITH parts AS (
    SELECT * FROM read_parquet(files, union_by_name = true, filename = true, hive_partitioning = false)
),
final AS (
    -- a part is named <run id>-<chunk>-<n>.parquet: a run that never committed (killed before
    -- sources.parquet named it) stays invisible, even for a file that only grew
    SELECT parts.* EXCLUDE (filename) FROM parts
    SEMI JOIN sources ON parts.source_id = sources.source_id AND parts.generation = sources.generation
    WHERE split_part(parse_filename(parts.filename), '-', 1) IN (SELECT run_id FROM committed_runs)
)
SELECT * FROM final
