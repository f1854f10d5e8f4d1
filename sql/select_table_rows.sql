-- Every row of one view or table of the lake ({table}: a quoted identifier), for pipeline.api scans
WITH rows_of AS (
    SELECT * FROM {table}
),
final AS (
    SELECT * FROM rows_of
)
SELECT * FROM final
