-- Per session ($sessions; NULL: every one): its first and last message time (microseconds since the epoch) and the models of its rows that carry recorded usage (what derived/session_activity keeps, so that summarize reads the messages of changed sessions only)
WITH times AS (
    SELECT session_id, epoch_us(min("timestamp")) AS started_us, epoch_us(max("timestamp")) AS ended_us
    FROM messages
    WHERE $sessions IS NULL OR list_contains(CAST($sessions AS VARCHAR[]), session_id)
    GROUP BY session_id
),
usage_models AS (
    -- the rows a model is priced for (model_prices: one row set per model)
    SELECT session_id, list(DISTINCT model ORDER BY model) AS usage_models
    FROM _messages_current
    WHERE ($sessions IS NULL OR list_contains(CAST($sessions AS VARCHAR[]), session_id))
      AND model IS NOT NULL
      AND (input_tokens IS NOT NULL OR output_tokens IS NOT NULL
           OR cache_creation_tokens IS NOT NULL OR cache_read_tokens IS NOT NULL
           OR cost_usd_recorded IS NOT NULL)
    GROUP BY session_id
),
final AS (
    SELECT
        coalesce(times.session_id, usage_models.session_id) AS session_id,
        times.started_us, times.ended_us, usage_models.usage_models
    FROM times
    FULL JOIN usage_models USING (session_id)
)
SELECT * FROM final ORDER BY session_id
