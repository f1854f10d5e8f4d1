-- Every (session, parent session, source) of the lake's current session_info rows: what a scoped connection follows from a few sessions to the sources holding their family's rows
WITH links AS (
    SELECT DISTINCT session_id, parent_session_id, source_id
    FROM session_info
    WHERE session_id IS NOT NULL
),
final AS (
    SELECT session_id, parent_session_id, source_id FROM links
)
SELECT * FROM final ORDER BY session_id, source_id
