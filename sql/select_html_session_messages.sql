-- HTML session pages: the message rows of the sessions in $session_ids (NULL: all) in session/seq order (inline sidechain rows included, flagged), for the transcript view and the per-turn context chart
WITH chosen AS (
    SELECT
        session_id, seq, role, kind, subtype, text, call_id, tool_name, "timestamp", model,
        is_prompt, is_meta, is_sidechain, est_tokens, api_call_id, compaction_state
    FROM _messages_current
    WHERE $session_ids IS NULL OR list_contains($session_ids, session_id)
),
final AS (
    SELECT * FROM chosen ORDER BY session_id, seq
)
SELECT * FROM final
