-- tool_paths placeholder: an empty, typed view when correlate has not written derived/tool_paths yet (no-op otherwise)
CREATE VIEW IF NOT EXISTS tool_paths AS
WITH final AS (
    SELECT
        CAST(NULL AS VARCHAR) AS session_id,
        CAST(NULL AS VARCHAR) AS call_id,
        CAST(NULL AS BIGINT) AS seq,
        CAST(NULL AS INTEGER) AS path_no,
        CAST(NULL AS VARCHAR) AS path,
        CAST(NULL AS VARCHAR) AS memory_class
    WHERE false
)
SELECT * FROM final
