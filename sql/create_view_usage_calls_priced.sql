-- usage_calls read from derived/usage_calls_priced: the calls as refresh_usage deduplicated and priced them (a report's connection, when nothing changed since)
CREATE OR REPLACE VIEW usage_calls AS
WITH final AS (
    SELECT * EXCLUDE (price_source) FROM usage_calls_priced
)
SELECT * FROM final
