-- tool_paths rows of the sessions in $session_ids (NULL: all): paths found by correlate (registered as found_paths) plus one NULL-path row per call that names none
WITH calls AS (
    SELECT DISTINCT session_id, call_id, seq
    FROM tool_calls
    WHERE $session_ids IS NULL OR list_contains($session_ids, session_id)
),
found AS (
    SELECT session_id, call_id, seq, path_no, path, memory_class
    FROM found_paths
),
pathless AS (
    SELECT calls.session_id, calls.call_id, calls.seq, CAST(NULL AS INTEGER) AS path_no,
           CAST(NULL AS VARCHAR) AS path, CAST(NULL AS VARCHAR) AS memory_class
    FROM calls
    ANTI JOIN found
      ON calls.session_id = found.session_id
     AND calls.call_id IS NOT DISTINCT FROM found.call_id
     AND calls.seq = found.seq
),
all_rows AS (
    SELECT * FROM found
    UNION
    SELECT * FROM pathless
),
final AS (
    SELECT session_id, call_id, seq, path_no, path, memory_class
    FROM all_rows
    ORDER BY session_id, seq, call_id NULLS FIRST, path_no NULLS FIRST
)
SELECT * FROM final
