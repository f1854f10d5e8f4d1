-- Tool calls of the sessions in $session_ids (NULL: all) in session/seq order; id_calls counts the session's calls (inline sidechains included) with the same call id
WITH chosen AS (
    SELECT
        session_id, seq, call_id, tool_name, tool_family, input_json, cwd, est_tokens,
        source_id, line_no, json_path, block_no,
        count(*) OVER (PARTITION BY session_id, call_id) AS id_calls
    FROM tool_calls
    WHERE $session_ids IS NULL OR list_contains($session_ids, session_id)
),
final AS (
    SELECT * FROM chosen
    ORDER BY session_id, seq
)
SELECT * FROM final
