-- session_summary: per session, the daily-log counts (main thread: prompts, assistant responses, est. tokens) and usage/cost: session_summary_of over every session
CREATE OR REPLACE VIEW session_summary AS
WITH final AS (
    SELECT * FROM session_summary_of(NULL)
)
SELECT * FROM final
