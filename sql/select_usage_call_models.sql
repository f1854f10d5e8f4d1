-- The model names of the usage call rows (to price them: one model_prices row set each)
WITH models AS (
    SELECT DISTINCT model FROM usage_call_rows_current WHERE model IS NOT NULL
),
final AS (
    SELECT model FROM models
)
SELECT * FROM final ORDER BY model
