-- Stored columns of a quarantine part: one row per line/file that could not be read, with the reason
WITH staged AS (
    SELECT * FROM staged_batch
),
final AS (
    SELECT * EXCLUDE (detected_at), try_cast(detected_at AS TIMESTAMPTZ) AS detected_at
    FROM staged
)
SELECT * FROM final
