-- A message row whose source file (at that generation) is not a current row of sources
WITH message_sources AS (
    SELECT DISTINCT source_id, generation
    FROM messages
),
final AS (
    SELECT m.source_id, m.generation
    FROM message_sources AS m
    ANTI JOIN sources AS s
      ON s.source_id = m.source_id AND s.generation = m.generation
    ORDER BY m.source_id, m.generation
)
SELECT * FROM final
