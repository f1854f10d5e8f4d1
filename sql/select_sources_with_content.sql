-- Which of the source files $source_ids gave at least one real message block (text, tool call, result...; a forced --format that gave none is suspect)
WITH wanted AS (
    SELECT unnest(CAST($source_ids AS VARCHAR[])) AS source_id
),
final AS (
    SELECT DISTINCT w.source_id
    FROM wanted w
    WHERE EXISTS (SELECT 1 FROM messages m
                  WHERE m.source_id = w.source_id AND coalesce(m.kind, 'other') <> 'other')
)
SELECT * FROM final ORDER BY source_id
