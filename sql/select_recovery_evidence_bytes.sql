-- The bytes of evidence the recovery document of each top-level session in $sessions (all when NULL) reads, its sub-agents' included: message texts (a tool result's first 2000 characters) and tool inputs, to batch documents by memory
WITH family AS (
    SELECT DISTINCT session_id, coalesce(parent_session_id, session_id) AS root_session_id
    FROM session_info
    WHERE session_id IS NOT NULL
),
wanted AS (
    SELECT session_id, root_session_id
    FROM family
    WHERE $sessions IS NULL OR list_contains(CAST($sessions AS VARCHAR[]), root_session_id)
),
texts AS (
    SELECT session_id,
           sum(CASE WHEN kind = 'tool_result' THEN least(text_bytes, 2000) ELSE text_bytes END) AS bytes
    FROM _messages_current
    WHERE session_id IN (SELECT session_id FROM wanted)
    GROUP BY session_id
),
inputs AS (
    SELECT session_id, sum(input_bytes) AS bytes
    FROM tool_calls
    WHERE session_id IN (SELECT session_id FROM wanted)
    GROUP BY session_id
),
final AS (
    SELECT wanted.root_session_id AS session_id,
           sum(coalesce(texts.bytes, 0) + coalesce(inputs.bytes, 0)) AS evidence_bytes
    FROM wanted
    LEFT JOIN texts USING (session_id)
    LEFT JOIN inputs USING (session_id)
    GROUP BY wanted.root_session_id
)
SELECT * FROM final ORDER BY session_id
