-- runs: one row per committed ingest run, with its line accounting
CREATE OR REPLACE VIEW runs AS
WITH final AS (
    SELECT * FROM read_parquet({glob})
)
SELECT * FROM final
