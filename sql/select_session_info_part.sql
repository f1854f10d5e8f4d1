-- Stored columns of a session_info part: staged rows plus the parsed first-seen time
WITH staged AS (
    SELECT * FROM staged_batch
),
final AS (
    SELECT * EXCLUDE (timestamp_raw), safe_timestamp(timestamp_raw) AS first_seen_at
    FROM staged
)
SELECT * FROM final
