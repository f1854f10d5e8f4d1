-- committed_runs: ids of the ingest runs whose parts are visible (named by sources.parquet, the commit point, or logged as committed)
CREATE OR REPLACE VIEW committed_runs AS
WITH named AS (
    SELECT run_id FROM sources
),
logged AS (
    SELECT run_id FROM runs WHERE ingest_committed
),
final AS (
    SELECT run_id FROM named UNION SELECT run_id FROM logged
)
SELECT * FROM final
