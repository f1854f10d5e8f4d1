-- Every session (or those in $session_ids) with its first real user message (what ignore_patterns are matched against; as sessions.first_user_text)
WITH prompts AS (
    -- _messages_current: the messages view without its usage dedup (texts are the same)
    SELECT session_id, seq, text
    FROM _messages_current
    WHERE is_prompt AND ($session_ids IS NULL OR list_contains($session_ids, session_id))
),
known AS (
    SELECT DISTINCT session_id
    FROM session_info
    WHERE session_id IS NOT NULL AND ($session_ids IS NULL OR list_contains($session_ids, session_id))
),
final AS (
    SELECT known.session_id, arg_min(prompts.text, prompts.seq) AS first_user_text
    FROM known
    LEFT JOIN prompts USING (session_id)
    GROUP BY known.session_id
    ORDER BY known.session_id
)
SELECT * FROM final
