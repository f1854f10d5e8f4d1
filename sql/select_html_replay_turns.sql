-- HTML report policies page: context tokens per turn of one session ($session_id) under each replayed policy, of one replay settings (as select_html_policy_eval)
WITH settings AS (
    -- one replay settings' rows only (rows priced two ways are never mixed): the default
    -- settings when replayed with them, else the first in order
    SELECT replay_settings
    FROM (SELECT DISTINCT replay_settings FROM policy_eval) AS present
    ORDER BY replay_settings IS DISTINCT FROM 'price_as=recorded cache_ttl=5', replay_settings
    LIMIT 1
),
chosen AS (
    SELECT policy, turn, context_tokens
    FROM replay_turns
    WHERE session_id = $session_id
      AND replay_settings IS NOT DISTINCT FROM (SELECT replay_settings FROM settings)
),
final AS (
    SELECT * FROM chosen ORDER BY policy, turn
)
SELECT * FROM final
