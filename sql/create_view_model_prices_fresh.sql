-- model_prices_base for this connection only: prices computed now (registered Arrow table model_prices_fresh)
CREATE OR REPLACE TEMP VIEW model_prices_base AS
WITH final AS (
    SELECT * FROM model_prices_fresh
)
SELECT * FROM final
