-- HTML report policies page: context tokens per turn of one session ($session_id) under each replayed policy
WITH chosen AS (
    SELECT policy, turn, context_tokens
    FROM replay_turns
    WHERE session_id = $session_id
),
final AS (
    SELECT * FROM chosen ORDER BY policy, turn
)
SELECT * FROM final
