-- Two message rows with the same (session_id, seq): the order within a session must be total
WITH keyed AS (
    SELECT session_id, seq, count(*) AS n_rows, list(DISTINCT source_id ORDER BY source_id) AS source_ids
    FROM messages
    GROUP BY session_id, seq
),
final AS (
    SELECT * FROM keyed
    WHERE n_rows > 1
    ORDER BY session_id, seq
)
SELECT * FROM final
