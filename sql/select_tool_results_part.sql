-- Stored columns of a tool_results part: payload sizes, hash and est_tokens taken from the measured message row of the same block
WITH staged AS (
    SELECT * FROM staged_batch
),
payloads AS (
    SELECT source_id, generation, seq, char_len, text_bytes, est_tokens, compaction_state,
           text_sha256 AS payload_sha256
    FROM messages_part
    WHERE kind = 'tool_result'
),
final AS (
    SELECT
        staged.* EXCLUDE (timestamp_raw, payload_json_bytes, payload_json_sha256),
        safe_timestamp(staged.timestamp_raw) AS "timestamp",
        -- a payload with media is measured (and stored, when pruned) as its JSON
        CASE WHEN staged.payload_json_sha256 IS NULL THEN 'text' ELSE 'json' END AS payload_form,
        coalesce(staged.payload_json_bytes, payloads.text_bytes, 0) AS payload_bytes,
        coalesce(payloads.char_len, 0) AS payload_chars,
        coalesce(staged.payload_json_sha256, payloads.payload_sha256, sha256('')) AS payload_sha256,
        coalesce(payloads.est_tokens, 0) AS est_tokens,
        payloads.compaction_state
    FROM staged
    LEFT JOIN payloads USING (source_id, generation, seq)
)
SELECT * FROM final
