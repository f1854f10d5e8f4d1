-- usage_call_sources placeholder when refresh_usage has not stored derived/usage_call_sources yet: typed and empty (no-op otherwise)
CREATE VIEW IF NOT EXISTS usage_call_sources AS
WITH final AS (
    SELECT source_id, generation, run_id FROM sources WHERE false
)
SELECT * FROM final
