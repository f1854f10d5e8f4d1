-- The header of `ctxlake show`: one session's format, project, branch, times, model and counts
WITH chosen AS (
    SELECT session_id, format, project, git_branch, started_at, ended_at, parent_session_id,
           model, n_user, n_assistant, n_tool_calls, est_tokens
    FROM sessions
    WHERE session_id = $session_id
),
final AS (
    SELECT * FROM chosen
)
SELECT * FROM final
