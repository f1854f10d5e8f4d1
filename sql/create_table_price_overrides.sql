-- price_overrides: the config file's custom prices (one row per model and tier), for this connection only
CREATE OR REPLACE TEMP TABLE price_overrides (
    model VARCHAR,
    provider VARCHAR,
    priced_as VARCHAR,
    priority INTEGER,
    start_date DATE,
    time_from TIME,
    time_to TIME,
    input_above BIGINT,
    input_upto BIGINT,
    request_usd DECIMAL(38, 12),
    input_usd_per_mtok DECIMAL(38, 12),
    cache_write_usd_per_mtok DECIMAL(38, 12),
    cache_write_1h_usd_per_mtok DECIMAL(38, 12),
    cache_read_usd_per_mtok DECIMAL(38, 12),
    output_usd_per_mtok DECIMAL(38, 12),
    price_source VARCHAR
)
