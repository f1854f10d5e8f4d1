-- The price regime of each replayed call (replay_calls: call_no, model, timestamp) among its model's prices (replay_prices), by the usage reports' rule
WITH matched AS (
    SELECT call_no, priority
    FROM price_regimes(replay_calls, replay_prices)
),
final AS (
    SELECT call_no, priority
    FROM matched
    ORDER BY call_no
)
SELECT * FROM final
