-- Every session's last activity (latest timestamp, else its file's modification time), for lake-unique recovery ids
WITH files AS (
    SELECT source_id, mtime FROM sources
),
final AS (
    SELECT s.session_id, coalesce(s.ended_at, files.mtime) AS last_activity
    FROM sessions AS s
    LEFT JOIN files ON files.source_id = s.source_id
)
SELECT * FROM final ORDER BY session_id
