-- Every session with its first real user message (what ignore_patterns are matched against)
WITH final AS (
    SELECT session_id, first_user_text
    FROM sessions
    ORDER BY session_id
)
SELECT * FROM final
