-- Facts of some sessions and their sub-agent sessions ($sessions: all their ids, select_session_families) for recovery documents (last activity, project, counts)
WITH summary AS (
    SELECT * FROM session_counts_of(CAST($sessions AS VARCHAR[]))
),
files AS (
    SELECT source_id, mtime FROM sources
),
final AS (
    SELECT
        summary.session_id, summary.parent_session_id, summary.format, summary.project,
        summary.git_branch, summary.model, summary.started_at, summary.ended_at, summary.n_user,
        summary.n_assistant, summary.n_tool_calls, files.mtime AS source_mtime
    FROM summary
    LEFT JOIN files ON files.source_id = summary.source_id
)
SELECT * FROM final ORDER BY session_id
