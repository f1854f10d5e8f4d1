-- A part table's current rows: every part file of the table through part_rows_current (committed runs, current generations)
CREATE OR REPLACE VIEW {name} AS
WITH final AS (
    SELECT * FROM part_rows_current({glob})
)
SELECT * FROM final
