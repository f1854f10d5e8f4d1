-- A part table's current rows in the listed files only (a scoped cursor's temp view): the columns of the lake-wide view (its empty copy), the rows of their source's current generation (the cursor's registered copy of sources' ids and generations); the caller lists only the files of committed runs, chosen by part_rows_current's rule
CREATE OR REPLACE TEMP VIEW {name} AS
WITH parts AS (
    SELECT * FROM read_parquet({files}, union_by_name = true, hive_partitioning = false)
),
current_rows AS (
    SELECT parts.* FROM parts
    SEMI JOIN {current} AS current_sources
        ON parts.source_id = current_sources.source_id
       AND parts.generation = current_sources.generation
),
final AS (
    SELECT * FROM {empty} UNION ALL BY NAME SELECT * FROM current_rows
)
SELECT * FROM final
