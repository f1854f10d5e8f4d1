-- Evictions of one policy (optionally one session) that apply rewrites, in a stable order
WITH chosen AS (
    SELECT
        plan_id, policy, session_id, call_id, tool_name, action, locator, payload_sha256,
        replacement, source_id, line_no, json_path, seq, block_no, at_seq
    FROM {evictions}
    WHERE policy = $policy
      AND ($session_id IS NULL OR session_id = $session_id)
),
final AS (
    SELECT * FROM chosen
    ORDER BY source_id, line_no, json_path NULLS FIRST, seq, block_no, call_id, at_seq, action,
             replacement, plan_id
)
SELECT * FROM final
