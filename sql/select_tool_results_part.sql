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
        staged.* EXCLUDE (timestamp_raw),
        safe_timestamp(staged.timestamp_raw) AS "timestamp",
        coalesce(payloads.text_bytes, 0) AS payload_bytes,
        coalesce(payloads.char_len, 0) AS payload_chars,
        coalesce(payloads.payload_sha256, sha256('')) AS payload_sha256,
        coalesce(payloads.est_tokens, 0) AS est_tokens,
        payloads.compaction_state
    FROM staged
    LEFT JOIN payloads USING (source_id, generation, seq)
)
SELECT * FROM final
