-- The sources' state a usage refresh covered (to tell later whether the materialised usage rows are current)
WITH covered AS (
    SELECT source_id, generation, run_id FROM sources
),
final AS (
    SELECT * FROM covered
)
SELECT * FROM final ORDER BY source_id
