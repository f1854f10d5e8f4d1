-- model_prices_base for a report: empty and typed when the lake has no derived/model_prices yet
CREATE OR REPLACE TEMP VIEW model_prices_base AS
WITH final AS (
    SELECT
        CAST(NULL AS VARCHAR) AS model,
        CAST(NULL AS VARCHAR) AS provider,
        CAST(NULL AS VARCHAR) AS priced_as,
        CAST(NULL AS INTEGER) AS priority,
        CAST(NULL AS DATE) AS start_date,
        CAST(NULL AS TIME) AS time_from,
        CAST(NULL AS TIME) AS time_to,
        CAST(NULL AS BIGINT) AS input_above,
        CAST(NULL AS BIGINT) AS input_upto,
        CAST(NULL AS DECIMAL(38, 12)) AS request_usd,
        CAST(NULL AS DECIMAL(38, 12)) AS input_usd_per_mtok,
        CAST(NULL AS DECIMAL(38, 12)) AS cache_write_usd_per_mtok,
        CAST(NULL AS DECIMAL(38, 12)) AS cache_write_1h_usd_per_mtok,
        CAST(NULL AS DECIMAL(38, 12)) AS cache_read_usd_per_mtok,
        CAST(NULL AS DECIMAL(38, 12)) AS output_usd_per_mtok,
        CAST(NULL AS VARCHAR) AS price_source
    WHERE false
)
SELECT * FROM final
