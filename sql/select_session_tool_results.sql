-- Tool results of the sessions in $session_ids (NULL: all) in session/seq order: sizes, hash, shape, state (the text is in messages)
WITH chosen AS (
    SELECT
        session_id, seq, call_id, tool_name, is_error, payload_shape, coalesce(payload_form, 'text') AS payload_form, payload_bytes,
        payload_chars, est_tokens, payload_sha256, compaction_state, source_id, line_no,
        json_path, block_no
    FROM tool_results
    WHERE $session_ids IS NULL OR list_contains($session_ids, session_id)
),
final AS (
    SELECT * FROM chosen
    ORDER BY session_id, seq
)
SELECT * FROM final
