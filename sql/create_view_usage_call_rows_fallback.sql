-- usage_call_rows placeholder when refresh_usage has not stored derived/usage_call_rows yet: typed and empty (no-op otherwise)
CREATE VIEW IF NOT EXISTS usage_call_rows AS
WITH final AS (
    SELECT * FROM usage_call_rows_live WHERE false
)
SELECT * FROM final
