-- Stored columns of a tool_results part: payload sizes, hash and est_tokens; the text itself stays in messages
WITH staged AS (
    SELECT * FROM staged_batch
),
final AS (
    SELECT
        * EXCLUDE (timestamp_raw, payload_text),
        try_cast(timestamp_raw AS TIMESTAMPTZ) AS "timestamp",
        strlen(coalesce(payload_text, '')) AS payload_bytes,
        length(coalesce(payload_text, '')) AS payload_chars,
        sha256(coalesce(payload_text, '')) AS payload_sha256,
        est_tokens(payload_text) AS est_tokens,
        CASE
            WHEN payload_text = '[Old tool result content cleared]' THEN 'cleared'
            WHEN contains(payload_text, '[ctxlake compaction]') THEN 'pruned'
        END AS compaction_state
    FROM staged
)
SELECT * FROM final
