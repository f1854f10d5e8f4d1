-- The id of every source in the lake (a partial refresh_usage drops stored rows of sources gone)
WITH final AS (
    SELECT source_id FROM sources
)
SELECT * FROM final ORDER BY source_id
