-- usage_call_rows_live: the usage call rows of every session (sql/create_macro_usage_call_rows_of.sql)
CREATE OR REPLACE VIEW usage_call_rows_live AS
WITH final AS (
    SELECT * FROM usage_call_rows_of(NULL)
)
SELECT * FROM final
