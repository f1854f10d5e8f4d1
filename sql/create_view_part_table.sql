-- A part table's current rows: parts of committed ingest runs only, kept for each source's current generation
CREATE OR REPLACE VIEW {name} AS
WITH parts AS (
    SELECT * FROM read_parquet({glob}, union_by_name = true, filename = true, hive_partitioning = false)
),
final AS (
    -- a part is named <run id>-<chunk>-<n>.parquet: a run that never committed (killed before
    -- sources.parquet named it) stays invisible, even for a file that only grew
    SELECT parts.* EXCLUDE (filename) FROM parts
    SEMI JOIN sources ON parts.source_id = sources.source_id AND parts.generation = sources.generation
    WHERE split_part(parse_filename(parts.filename), '-', 1) IN (SELECT run_id FROM committed_runs)
)
SELECT * FROM final
