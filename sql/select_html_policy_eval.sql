-- HTML report policies page: the per-session rows of the lake's replay that its charts need (policy, session, turns, evictions, savings), of one replay settings (the default price model and cache TTL when present)
WITH settings AS (
    -- one replay settings' rows only (rows priced two ways are never mixed): the default
    -- settings when replayed with them, else the first in order
    SELECT replay_settings
    FROM (SELECT DISTINCT replay_settings FROM policy_eval) AS present
    ORDER BY replay_settings IS DISTINCT FROM 'price_as=recorded cache_ttl=5', replay_settings
    LIMIT 1
),
rows AS (
    SELECT policy, session_id, turns, evictions, tokens_saved_pct
    FROM policy_eval
    WHERE replay_settings IS NOT DISTINCT FROM (SELECT replay_settings FROM settings)
),
final AS (
    SELECT * FROM rows ORDER BY policy, session_id
)
SELECT * FROM final
