-- How many plan rows one policy has (0: the policy was never planned)
WITH chosen AS (
    SELECT plan_id FROM plans WHERE policy = $policy
),
final AS (
    SELECT count(*) AS plans FROM chosen
)
SELECT * FROM final
