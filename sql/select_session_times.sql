-- Top-level sessions (sub-agents are folded into their parent) with their start and end, to place each on its day before the log figures of a few are read
WITH top_level AS (
    SELECT session_id, started_at, ended_at
    FROM sessions
    WHERE parent_session_id IS NULL
),
final AS (
    SELECT * FROM top_level
)
SELECT * FROM final ORDER BY coalesce(ended_at, started_at) NULLS LAST, session_id
