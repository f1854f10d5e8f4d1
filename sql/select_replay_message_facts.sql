-- Per-message facts replay needs beyond the policy input (model, CJK count, recorded usage) for the sessions in $session_ids, outside inline sidechains; only rows that carry one of them
WITH wanted AS (
    SELECT unnest($session_ids) AS session_id
),
main_chain AS (
    SELECT DISTINCT session_id
    FROM messages
    SEMI JOIN wanted USING (session_id)
    WHERE NOT coalesce(is_sidechain, false)
),
sidechain AS (
    SELECT session_id, seq
    FROM messages
    SEMI JOIN wanted USING (session_id)
    SEMI JOIN main_chain USING (session_id)
    WHERE is_sidechain
),
rows AS (
    SELECT
        session_id, seq, model, coalesce(cjk_count, 0) AS cjk_count, input_tokens,
        cache_creation_tokens, cache_read_tokens, output_tokens, usage_scope
    FROM messages
    SEMI JOIN wanted USING (session_id)
    ANTI JOIN sidechain USING (session_id, seq)
    WHERE model IS NOT NULL
       OR coalesce(cjk_count, 0) > 0
       OR input_tokens IS NOT NULL
       OR cache_creation_tokens IS NOT NULL
       OR cache_read_tokens IS NOT NULL
),
final AS (
    SELECT * FROM rows
    ORDER BY session_id, seq
)
SELECT * FROM final
