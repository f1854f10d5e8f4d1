-- Dated usage rows in time order (optionally of projects containing $project), for the 5-hour billing blocks of `ctxlake report blocks`
WITH calls AS (
    SELECT "timestamp", source_id, seq, session_id, model, usage_scope, input_tokens,
           output_tokens, cache_write_tokens, cache_read_tokens, total_tokens, cost_usd
    FROM usage_calls
    WHERE "timestamp" IS NOT NULL
      AND (CAST($project AS VARCHAR) IS NULL OR contains(project, CAST($project AS VARCHAR)))
),
final AS (
    SELECT * FROM calls
)
SELECT * FROM final ORDER BY "timestamp", source_id, seq
