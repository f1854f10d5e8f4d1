-- Planned evictions of session $session_id (every policy, or only $policy), keyed by the evicted block, for `ctxlake show`
WITH chosen AS (
    SELECT seq, block_no, policy, step, action, reason, locator, tokens_before, tokens_after
    FROM evictions
    WHERE session_id = $session_id
      AND (CAST($policy AS VARCHAR) IS NULL OR policy = $policy)
),
final AS (
    SELECT * FROM chosen
)
SELECT * FROM final ORDER BY seq, block_no, policy, step
