-- Top-level sessions (sub-agents are folded into their parent) with the daily-log counts from session_summary
WITH top_level AS (
    SELECT session_id, started_at, n_user, n_assistant, est_tokens
    FROM session_summary
    WHERE parent_session_id IS NULL
),
final AS (
    SELECT * FROM top_level
)
SELECT * FROM final ORDER BY started_at NULLS LAST, session_id
