-- How many sources changed (new, re-read, appended, gone) since the usage rows were materialised: 0 means they are current
WITH now_state AS (
    SELECT source_id, generation, run_id FROM sources
),
then_state AS (
    SELECT source_id, generation, run_id FROM usage_call_sources
),
final AS (
    SELECT count(*) AS changed
    FROM now_state
    FULL OUTER JOIN then_state ON now_state.source_id = then_state.source_id
    WHERE now_state.generation IS DISTINCT FROM then_state.generation
       OR now_state.run_id IS DISTINCT FROM then_state.run_id
       OR now_state.source_id IS NULL OR then_state.source_id IS NULL
)
SELECT * FROM final
