-- usage_call_rows when refresh_usage has not materialised derived/usage_call_rows yet: computed from the messages (no-op otherwise)
CREATE VIEW IF NOT EXISTS usage_call_rows AS
WITH final AS (
    SELECT * FROM usage_call_rows_live
)
SELECT * FROM final
