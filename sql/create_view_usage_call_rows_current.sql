-- usage_call_rows_current: the stored call rows while they cover the lake's current sources, else the rows computed from the messages (never stale usage)
CREATE OR REPLACE VIEW usage_call_rows_current AS
WITH changed AS (
    -- sources new, re-read, appended or gone since refresh_usage stored the rows
    SELECT count(*) AS n
    FROM sources AS now_state
    FULL OUTER JOIN usage_call_sources AS then_state ON now_state.source_id = then_state.source_id
    WHERE now_state.generation IS DISTINCT FROM then_state.generation
       OR now_state.run_id IS DISTINCT FROM then_state.run_id
       OR now_state.source_id IS NULL OR then_state.source_id IS NULL
),
final AS (
    SELECT * FROM usage_call_rows WHERE (SELECT n FROM changed) = 0
    UNION ALL BY NAME
    SELECT * FROM usage_call_rows_live WHERE (SELECT n FROM changed) > 0
)
SELECT * FROM final
