-- The transcript of session $session_id as `ctxlake show` prints it: every block in order, with its tool result's status
WITH chosen AS (
    SELECT
        m.seq, m.block_no, m.role, m.kind, m.subtype, m."timestamp", m.model, m.text,
        m.call_id, m.tool_name, m.is_sidechain, m.is_meta, m.est_tokens, m.compaction_state,
        m.source_id, m.line_no
    FROM messages m
    WHERE m.session_id = $session_id
),
results AS (
    SELECT seq, block_no, is_error, payload_bytes
    FROM tool_results
    WHERE session_id = $session_id
),
final AS (
    SELECT c.*, r.is_error, r.payload_bytes, s.path AS source_path
    FROM chosen c
    LEFT JOIN results r ON r.seq = c.seq AND r.block_no = c.block_no
    LEFT JOIN sources s ON s.source_id = c.source_id
)
SELECT * FROM final ORDER BY seq, block_no
