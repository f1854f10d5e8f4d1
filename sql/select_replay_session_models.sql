-- The model recorded for each session in $session_ids (the price fallback for turns whose rows name none)
WITH wanted AS (
    SELECT unnest($session_ids) AS session_id
),
final AS (
    SELECT session_id, model
    FROM sessions
    SEMI JOIN wanted USING (session_id)
    WHERE model IS NOT NULL
    ORDER BY session_id
)
SELECT * FROM final
