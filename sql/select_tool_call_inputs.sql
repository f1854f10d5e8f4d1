-- Tool calls whose input may name a path ($pattern: a necessary condition), for request-side path extraction in Python
WITH calls AS (
    SELECT session_id, call_id, seq, tool_name, input_json, cwd
    FROM tool_calls
),
final AS (
    SELECT session_id, call_id, seq, tool_name, input_json, cwd
    FROM calls
    WHERE regexp_matches(input_json, $pattern)
)
SELECT * FROM final
