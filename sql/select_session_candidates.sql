-- Up to $n sessions to offer when a session id is unknown: ids containing $text first, then the most recent
WITH known AS (
    SELECT session_id, max(ended_at) AS ended_at
    FROM sessions
    GROUP BY session_id
),
ranked AS (
    SELECT session_id, ended_at,
           CASE WHEN contains(lower(session_id), lower(CAST($text AS VARCHAR))) THEN 0 ELSE 1 END AS rank
    FROM known
),
final AS (
    SELECT session_id, rank FROM ranked
    ORDER BY rank, ended_at DESC NULLS LAST, session_id
    LIMIT $n
)
SELECT * FROM final
