-- The model names that carry recorded usage in the lake (to price them: one model_prices row set each)
WITH usage_rows AS (
    SELECT DISTINCT model
    FROM _messages_current
    WHERE input_tokens IS NOT NULL OR output_tokens IS NOT NULL
       OR cache_creation_tokens IS NOT NULL OR cache_read_tokens IS NOT NULL
       OR cost_usd_recorded IS NOT NULL
),
final AS (
    SELECT model FROM usage_rows WHERE model IS NOT NULL
)
SELECT * FROM final ORDER BY model
