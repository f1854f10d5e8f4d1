-- The top-level session of each of some sessions ($sessions): itself, or its parent for a sub-agent session
WITH wanted AS (
    SELECT DISTINCT unnest(CAST($sessions AS VARCHAR[])) AS session_id
),
known AS (
    SELECT session_id, any_value(parent_session_id) FILTER (WHERE parent_session_id IS NOT NULL) AS parent_session_id
    FROM session_info
    SEMI JOIN wanted USING (session_id)
    GROUP BY session_id
),
final AS (
    SELECT session_id, coalesce(parent_session_id, session_id) AS root_session_id FROM known
)
SELECT * FROM final ORDER BY session_id
