-- usage_call_rows_current in a report's own connection, once the stored rows are known to be current: the stored rows themselves
CREATE OR REPLACE VIEW usage_call_rows_current AS
WITH final AS (
    SELECT * FROM usage_call_rows
)
SELECT * FROM final
