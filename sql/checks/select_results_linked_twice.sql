-- A tool result row claimed by more than one tool_links row (one result must answer at most one call)
WITH results AS (
    SELECT source_id, generation, seq, block_no, session_id, call_id
    FROM tool_results
    WHERE call_id IS NOT NULL
),
claims AS (
    SELECT r.source_id, r.seq, r.block_no, r.session_id, r.call_id, count(*) AS links
    FROM results AS r
    JOIN tool_links AS l
      ON l.session_id = r.session_id AND l.call_id = r.call_id
    GROUP BY r.source_id, r.seq, r.block_no, r.session_id, r.call_id
),
final AS (
    SELECT * FROM claims
    WHERE links > 1
    ORDER BY session_id, call_id, source_id, seq
)
SELECT * FROM final
