-- Sessions to plan (facts, start, message count, text size), optionally one session, those in $session_ids and/or started since a time
WITH info AS (
    SELECT
        session_id,
        arg_min(format, coalesce(first_seen_at, 'infinity'::TIMESTAMPTZ)) AS format,
        arg_min(project, coalesce(first_seen_at, 'infinity'::TIMESTAMPTZ)) FILTER (WHERE project IS NOT NULL) AS project,
        arg_min(git_branch, coalesce(first_seen_at, 'infinity'::TIMESTAMPTZ)) FILTER (WHERE git_branch IS NOT NULL AND git_branch <> '') AS git_branch,
        arg_min(parent_session_id, coalesce(first_seen_at, 'infinity'::TIMESTAMPTZ)) FILTER (WHERE parent_session_id IS NOT NULL) AS parent_session_id
    FROM session_info
    WHERE ($session_id IS NULL OR session_id = $session_id)
      AND ($session_ids IS NULL OR list_contains($session_ids, session_id))
    GROUP BY session_id
),
stats AS (
    -- _messages_current: the messages view without its usage dedup (not needed here)
    SELECT
        session_id,
        min("timestamp") AS started_at,
        sum(coalesce(text_bytes, 0)) AS text_bytes,
        count(*) AS n_messages
    FROM _messages_current
    WHERE ($session_id IS NULL OR session_id = $session_id)
      AND ($session_ids IS NULL OR list_contains($session_ids, session_id))
    GROUP BY session_id
),
final AS (
    SELECT
        stats.session_id, info.format, info.project, info.git_branch, info.parent_session_id,
        stats.started_at, stats.text_bytes, stats.n_messages
    FROM stats
    LEFT JOIN info USING (session_id)
    WHERE $since IS NULL OR stats.started_at >= $since
    ORDER BY stats.session_id
)
SELECT * FROM final
