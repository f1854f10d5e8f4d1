-- Tool calls whose input may name a path ($pattern: a necessary condition), of the sessions in $session_ids (NULL: all), for request-side path extraction in Python
WITH calls AS (
    SELECT session_id, call_id, seq, tool_name, input_json, cwd
    FROM tool_calls
    WHERE $session_ids IS NULL OR list_contains($session_ids, session_id)
),
final AS (
    SELECT session_id, call_id, seq, tool_name, input_json, cwd
    FROM calls
    WHERE regexp_matches(input_json, $pattern)
)
SELECT * FROM final
