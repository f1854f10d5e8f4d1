-- Stored columns of a records part: one row per source line/object with its raw JSON text
WITH staged AS (
    SELECT * FROM staged_batch
),
final AS (
    SELECT * FROM staged
)
SELECT * FROM final
