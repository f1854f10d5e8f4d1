-- The usage call rows of $sessions computed from the messages (a partial refresh_usage: the other sessions' stored rows are kept)
WITH fresh AS (
    SELECT * FROM usage_call_rows_of(CAST($sessions AS VARCHAR[]))
),
final AS (
    SELECT * FROM fresh
)
SELECT * FROM final ORDER BY session_id, source_id, seq
