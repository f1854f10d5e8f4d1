-- Every call of usage_calls with the price source it was priced from, to store as derived/usage_calls_priced
WITH calls AS (
    SELECT * FROM usage_calls
),
final AS (
    SELECT *, CAST($price_source AS VARCHAR) AS price_source FROM calls
)
SELECT * FROM final ORDER BY session_id, source_id, seq
