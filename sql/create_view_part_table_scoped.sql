-- A part table's current rows in the listed files only (a scoped cursor's temp view): the columns of the lake-wide view (its empty copy), the rows through part_rows_current
CREATE OR REPLACE TEMP VIEW {name} AS
WITH final AS (
    SELECT * FROM {empty} UNION ALL BY NAME SELECT * FROM part_rows_current({files})
)
SELECT * FROM final
