-- messages: current message rows; recorded usage kept once per API call (its fullest row)
CREATE OR REPLACE VIEW messages AS
WITH current_rows AS (
    SELECT * FROM _messages_current
),
ranked AS (
    -- usage dedup rule, mirrored in create_macro_usage_call_rows_of.sql (ranked): change both together
    SELECT
        *,
        api_call_id IS NULL
            OR input_tokens IS NULL
            OR row_number() OVER (
                PARTITION BY session_id, api_call_id, input_tokens IS NULL
                -- the fullest row (most tokens in all), the first of equals, as ccusage keeps
                ORDER BY coalesce(input_tokens, 0) + coalesce(output_tokens, 0)
                         + coalesce(cache_creation_tokens, 0) + coalesce(cache_read_tokens, 0) DESC,
                         seq
            ) = 1 AS usage_kept
    FROM current_rows
),
final AS (
    SELECT
        * EXCLUDE (usage_kept, input_tokens, output_tokens, cache_creation_tokens,
                   cache_read_tokens, reasoning_tokens),
        CASE WHEN usage_kept THEN input_tokens END AS input_tokens,
        CASE WHEN usage_kept THEN output_tokens END AS output_tokens,
        CASE WHEN usage_kept THEN cache_creation_tokens END AS cache_creation_tokens,
        CASE WHEN usage_kept THEN cache_read_tokens END AS cache_read_tokens,
        CASE WHEN usage_kept THEN reasoning_tokens END AS reasoning_tokens
    FROM ranked
)
SELECT * FROM final
