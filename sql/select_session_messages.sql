-- Message rows the policies read, of the sessions in $session_ids (NULL: all), in session/seq order; inline sidechain rows are dropped by the caller
WITH chosen AS (
    -- _messages_current: the messages view without its usage dedup (not needed to plan; its
    -- window over every row would double the cost of this scan)
    SELECT
        session_id, seq, role, kind, subtype, text, call_id, tool_name, "timestamp",
        is_prompt, is_meta, is_sidechain, est_tokens, char_len, text_bytes, api_call_id,
        compaction_state, source_id, line_no, json_path, block_no
    FROM _messages_current
    WHERE $session_ids IS NULL OR list_contains($session_ids, session_id)
),
final AS (
    SELECT * FROM chosen
    ORDER BY session_id, seq
)
SELECT * FROM final
