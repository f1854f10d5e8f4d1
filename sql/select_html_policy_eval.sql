-- HTML report policies page: the per-session rows of the lake's latest replay that its charts need (policy, session, turns, evictions, savings)
WITH rows AS (
    SELECT policy, session_id, turns, evictions, tokens_saved_pct
    FROM policy_eval
),
final AS (
    SELECT * FROM rows ORDER BY policy, session_id
)
SELECT * FROM final
