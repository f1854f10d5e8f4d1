-- Top-level sessions ($sessions: their ids and their sub-agents', select_session_families; or all when NULL) with their cost and their sub-agents' for the optional follow-up line of the daily log (NULL when any of their models is unpriced)
WITH summary AS (
    SELECT * FROM session_summary_of(CAST($sessions AS VARCHAR[]))
),
final AS (
    SELECT coalesce(parent_session_id, session_id) AS session_id,
           sum(cost_usd) AS cost_usd,
           bool_or(len(coalesce(unpriced_models, [])) > 0) AS unpriced
    FROM summary
    GROUP BY ALL
)
SELECT * FROM final ORDER BY session_id
