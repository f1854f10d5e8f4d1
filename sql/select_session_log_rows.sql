-- Top-level sessions ($sessions, or all when NULL; sub-agents are folded into their parent) with the daily-log figures: end time, counts, the estimate of the main thread's user/assistant text joined, and the project for the optional follow-up line (its cost: select_session_log_costs)
WITH summary AS (
    SELECT * FROM session_counts_of(CAST($sessions AS VARCHAR[]))
),
top_level AS (
    SELECT session_id, started_at, ended_at, n_user, n_assistant, project
    FROM summary
    WHERE parent_session_id IS NULL
),
text_rows AS (
    -- the specification's estimateTokens(messages' text contents joined with ""): the
    -- estimate of a concatenation is ceil(1.5 * all CJK) + ceil(all other UTF-16 units / 4)
    SELECT m.session_id, sum(m.cjk_count) AS cjk, sum(utf16_length(m.text)) AS utf16
    FROM messages AS m
    SEMI JOIN top_level USING (session_id)
    WHERE ($sessions IS NULL OR list_contains(CAST($sessions AS VARCHAR[]), m.session_id))
      AND m.role IN ('user', 'assistant')
      AND m.kind = 'text'
      AND NOT coalesce(m.is_sidechain, false)
      AND NOT coalesce(m.is_demo, false)
    GROUP BY m.session_id
),
final AS (
    SELECT
        top_level.session_id, top_level.started_at, top_level.ended_at,
        top_level.n_user, top_level.n_assistant, top_level.project,
        coalesce(est_tokens_from(text_rows.cjk, text_rows.utf16), 0) AS est_tokens
    FROM top_level
    LEFT JOIN text_rows USING (session_id)
)
SELECT * FROM final ORDER BY coalesce(ended_at, started_at) NULLS LAST, session_id
