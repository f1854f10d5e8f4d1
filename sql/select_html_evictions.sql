-- HTML session pages: the evictions of $policy in the sessions in $session_ids (NULL: all), where each happens (at_seq) and what it removed (seq of the item), with reason, tokens and locator
WITH chosen AS (
    SELECT
        session_id, seq, at_seq, call_id, tool_name, action, reason, paths, tokens_before,
        tokens_after, bytes_before, bytes_after, locator, payload_sha256, step
    FROM evictions
    WHERE policy = $policy AND ($session_ids IS NULL OR list_contains($session_ids, session_id))
),
final AS (
    SELECT * FROM chosen ORDER BY session_id, at_seq, seq, call_id
)
SELECT * FROM final
