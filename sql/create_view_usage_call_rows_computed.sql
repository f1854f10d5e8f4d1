-- usage_call_rows computed from the messages, replacing materialised rows that are not current (a report's connection only)
CREATE OR REPLACE VIEW usage_call_rows AS
WITH final AS (
    SELECT * FROM usage_call_rows_live
)
SELECT * FROM final
