-- Sessions with message rows from source files that one ingest run (re)read
WITH touched_sources AS (
    SELECT source_id FROM sources WHERE run_id = $1
),
final AS (
    SELECT DISTINCT session_id
    FROM session_info
    SEMI JOIN touched_sources USING (source_id)
    WHERE session_id IS NOT NULL
    ORDER BY session_id
)
SELECT * FROM final
