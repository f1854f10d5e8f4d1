-- A part table with none of a scoped cursor's rows (no file holds its sources): a temp view of the lake-wide view's empty copy
CREATE OR REPLACE TEMP VIEW {name} AS
WITH final AS (
    SELECT * FROM {empty}
)
SELECT * FROM final
