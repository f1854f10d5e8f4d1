-- Request-side paths and memory classes of the read-family calls of the sessions in $session_ids (NULL: all), as correlate classified them (tool_paths); a call correlate has not seen yet has known = false
WITH reads AS (
    SELECT session_id, seq, call_id, tool_name, input_json, cwd
    FROM tool_calls
    WHERE tool_family = 'read'
      AND ($session_ids IS NULL OR list_contains($session_ids, session_id))
),
classified AS (
    SELECT session_id, seq, call_id, path_no, path, memory_class
    FROM tool_paths
    WHERE $session_ids IS NULL OR list_contains($session_ids, session_id)
),
final AS (
    SELECT
        reads.session_id, reads.seq, reads.call_id, reads.tool_name, reads.input_json, reads.cwd,
        classified.path_no, classified.path, classified.memory_class,
        classified.session_id IS NOT NULL AS known
    FROM reads
    LEFT JOIN classified
      ON classified.session_id = reads.session_id
     AND classified.seq = reads.seq
     AND classified.call_id IS NOT DISTINCT FROM reads.call_id
    ORDER BY reads.session_id, reads.seq, reads.call_id NULLS FIRST, classified.path_no NULLS FIRST
)
SELECT * FROM final
