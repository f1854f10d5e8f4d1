-- Some sessions ($sessions) and their sub-agent sessions: the ids that session_counts_of and session_summary_of take for a family
WITH wanted AS (
    SELECT DISTINCT unnest(CAST($sessions AS VARCHAR[])) AS session_id
),
sub_agents AS (
    SELECT DISTINCT session_id
    FROM session_info
    WHERE parent_session_id IN (SELECT session_id FROM wanted)
),
final AS (
    SELECT session_id FROM wanted
    UNION
    SELECT session_id FROM sub_agents
)
SELECT * FROM final ORDER BY session_id
