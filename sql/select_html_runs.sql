-- HTML report overview: the latest $limit runs (ingest or nightly) with their state, line accounting and sessions done/failed, newest first
WITH ordered AS (
    SELECT run_id, command, status, exit_code, started_at, finished_at, files, files_skipped,
           lines, records, quarantined, held_back, sessions_done, sessions_failed, warnings
    FROM runs
),
final AS (
    SELECT * FROM ordered ORDER BY started_at DESC, run_id DESC LIMIT $limit
)
SELECT * FROM final
