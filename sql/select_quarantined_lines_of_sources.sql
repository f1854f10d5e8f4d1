-- The lines the lake holds quarantined for some source files ($source_ids): a file read again whole (lost part, merged parts) reports these again, not as news
WITH wanted AS (
    SELECT DISTINCT unnest(CAST($source_ids AS VARCHAR[])) AS source_id
),
final AS (
    SELECT quarantine.source_id, quarantine.byte_offset, quarantine.reason
    FROM quarantine
    SEMI JOIN wanted USING (source_id)
)
SELECT * FROM final ORDER BY source_id, byte_offset, reason
