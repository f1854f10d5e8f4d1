-- A part table's current rows: its Parquet parts, kept only for each source's current generation
CREATE OR REPLACE VIEW {name} AS
WITH parts AS (
    SELECT * FROM read_parquet({glob}, union_by_name = true)
),
final AS (
    SELECT parts.* FROM parts
    SEMI JOIN sources ON parts.source_id = sources.source_id AND parts.generation = sources.generation
)
SELECT * FROM final
