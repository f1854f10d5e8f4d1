-- One tier of a config-file price: USD per million tokens (and per call), from total input tokens above $input_above up to $input_upto
INSERT INTO price_overrides
SELECT $model, 'config', $model, 0, NULL, NULL, NULL, $input_above, $input_upto,
       CAST($request_usd AS DECIMAL(38, 12)), CAST($input_usd AS DECIMAL(38, 12)),
       CAST($cache_write_usd AS DECIMAL(38, 12)), CAST($cache_write_1h_usd AS DECIMAL(38, 12)),
       CAST($cache_read_usd AS DECIMAL(38, 12)), CAST($output_usd AS DECIMAL(38, 12)),
       CAST($price_source AS VARCHAR)
