-- session_flags placeholder: empty and typed until the nightly run writes derived/session_flags (no-op otherwise)
CREATE VIEW IF NOT EXISTS session_flags AS
WITH final AS (
    SELECT
        CAST(NULL AS VARCHAR) AS session_id,
        CAST(NULL AS BOOLEAN) AS ignored,
        CAST(NULL AS VARCHAR) AS ignored_by
    WHERE false
)
SELECT * FROM final
