-- usage_report_rows read from derived/usage_buckets: the stored 15-minute sums (a report's connection, when nothing changed since refresh_usage)
CREATE OR REPLACE TEMP VIEW usage_report_rows AS
WITH final AS (
    SELECT * EXCLUDE (price_source) FROM usage_buckets
)
SELECT * FROM final
