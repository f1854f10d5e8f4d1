-- The flags stage's verdict of every flagged session (or those in $session_ids): the ignore pattern it matches, NULL when not ignored
WITH flagged AS (
    SELECT session_id, ignored_by
    FROM session_flags
    WHERE session_id IS NOT NULL AND ($session_ids IS NULL OR list_contains($session_ids, session_id))
),
final AS (
    SELECT session_id, ignored_by
    FROM flagged
    ORDER BY session_id
)
SELECT * FROM final
