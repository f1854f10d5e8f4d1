-- HTML report policies page: the policies of the lake's latest replay (policy_eval), the baseline none first
WITH names AS (
    SELECT DISTINCT policy FROM policy_eval
),
final AS (
    SELECT policy FROM names ORDER BY policy <> 'none', policy
)
SELECT * FROM final
