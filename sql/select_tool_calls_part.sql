-- Stored columns of a tool_calls part: staged rows plus parsed time and the input's est_tokens
WITH staged AS (
    SELECT * FROM staged_batch
),
final AS (
    SELECT
        * EXCLUDE (timestamp_raw),
        safe_timestamp(timestamp_raw) AS "timestamp",
        strlen(coalesce(input_json, '')) AS input_bytes,
        est_tokens(input_json) AS est_tokens
    FROM staged
)
SELECT * FROM final
