-- The stored usage call rows of the sessions a partial refresh_usage does not recompute (not in $sessions), of sources still in the lake
WITH kept AS (
    SELECT * FROM usage_call_rows
    WHERE NOT list_contains(CAST($sessions AS VARCHAR[]), session_id)
      AND source_id IN (SELECT source_id FROM sources)
),
final AS (
    SELECT * FROM kept
)
SELECT * FROM final ORDER BY session_id, source_id, seq
