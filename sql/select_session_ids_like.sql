-- Session ids equal to, or starting with, $prefix (for commands that take a session id or a unique prefix)
WITH known AS (
    SELECT DISTINCT session_id FROM session_info
),
final AS (
    SELECT session_id FROM known WHERE starts_with(session_id, CAST($prefix AS VARCHAR))
)
SELECT * FROM final ORDER BY session_id
