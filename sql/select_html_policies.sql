-- HTML report policies page: the policies of the lake's replay (policy_eval) under one replay settings (as select_html_policy_eval), the baseline none first
WITH settings AS (
    -- one replay settings' rows only (rows priced two ways are never mixed): the default
    -- settings when replayed with them, else the first in order
    SELECT replay_settings
    FROM (SELECT DISTINCT replay_settings FROM policy_eval) AS present
    ORDER BY replay_settings IS DISTINCT FROM 'price_as=recorded cache_ttl=5', replay_settings
    LIMIT 1
),
names AS (
    SELECT DISTINCT policy FROM policy_eval
    WHERE replay_settings IS NOT DISTINCT FROM (SELECT replay_settings FROM settings)
),
final AS (
    SELECT policy, (SELECT replay_settings FROM settings) AS replay_settings
    FROM names ORDER BY policy <> 'none', policy
)
SELECT * FROM final
