-- HTML report overview: the latest $limit committed ingest runs with their line accounting, newest first
WITH ordered AS (
    SELECT run_id, started_at, finished_at, files, files_skipped, lines, records, quarantined,
           held_back
    FROM runs
),
final AS (
    SELECT * FROM ordered ORDER BY started_at DESC, run_id DESC LIMIT $limit
)
SELECT * FROM final
