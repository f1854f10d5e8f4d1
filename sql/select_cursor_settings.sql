-- The time zone and search path of a cursor: what a sibling cursor of the same database is given
WITH final AS (
    SELECT current_setting('TimeZone') AS time_zone, current_setting('search_path') AS search_path
)
SELECT * FROM final
