-- The per-session usage call rows after a refresh: kept rows of other sessions plus the rows of $sessions recomputed (all when $sessions is NULL)
WITH kept AS (
    SELECT * FROM usage_call_rows_current
    WHERE CAST($sessions AS VARCHAR[]) IS NOT NULL
      AND NOT list_contains(CAST($sessions AS VARCHAR[]), session_id)
),
fresh AS (
    SELECT * FROM usage_call_rows_of(CAST($sessions AS VARCHAR[]))
),
final AS (
    SELECT * FROM kept
    UNION ALL BY NAME
    SELECT * FROM fresh
)
SELECT * FROM final ORDER BY session_id, source_id, seq
