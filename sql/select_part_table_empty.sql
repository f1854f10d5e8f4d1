-- No row of a part table's lake-wide view (its columns and types, bound once and kept as an empty Arrow table): what a scoped view of that table is unioned with by name, so that it has every column even when its files are older parts
WITH final AS (
    SELECT * FROM {view} LIMIT 0
)
SELECT * FROM final
