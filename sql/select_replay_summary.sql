-- Replay comparison table: one row per policy in $policies (in that order), policy_eval figures over sessions as totals and medians; {source} is policy_eval or one run's rows; $settings (NULL: any) keeps one replay settings' rows
WITH evals AS (
    SELECT *
    FROM {source}
    WHERE list_contains($policies, policy)
      AND (CAST($settings AS VARCHAR) IS NULL OR replay_settings = $settings)
),
per_policy AS (
    SELECT
        policy,
        count(*) AS sessions,
        sum(turns) AS turns,
        sum(total_input_tokens) AS total_input_tokens,
        sum(baseline_input_tokens) AS baseline_input_tokens,
        median(tokens_saved_pct) AS median_tokens_saved_pct,
        median(peak_context_tokens) AS median_peak_context_tokens,
        max(peak_context_tokens) AS max_peak_context_tokens,
        sum(cache_read_tokens) AS cache_read_tokens,
        sum(cache_write_tokens) AS cache_write_tokens,
        sum(output_tokens) AS output_tokens,
        count(cost_usd) AS priced_sessions,
        sum(cost_usd) AS cost_usd,
        sum(baseline_cost_usd) FILTER (WHERE cost_usd IS NOT NULL) AS baseline_cost_usd,
        sum(cost_uncached_usd) AS cost_uncached_usd,
        sum(baseline_cost_uncached_usd) FILTER (WHERE cost_uncached_usd IS NOT NULL)
            AS baseline_cost_uncached_usd,
        median(cost_saved_pct) AS median_cost_saved_pct,
        median(cost_usd) AS median_cost_usd,
        sum(plans) AS plans,
        sum(evictions) AS evictions,
        sum(evicted_tokens) AS evicted_tokens,
        sum(at_risk_evictions) AS at_risk_evictions,
        sum(protected_violations) AS protected_violations,
        count(estimate_error_pct) AS sessions_with_usage,
        median(estimate_error_pct) AS median_estimate_error_pct,
        median(heuristic_error_pct) AS median_heuristic_error_pct
    FROM evals
    GROUP BY policy
),
final AS (
    SELECT
        policy,
        sessions,
        CAST(turns AS BIGINT) AS turns,
        CAST(total_input_tokens AS BIGINT) AS total_input_tokens,
        CAST(baseline_input_tokens - total_input_tokens AS BIGINT) AS tokens_saved,
        round(100.0 * (baseline_input_tokens - total_input_tokens)
              / nullif(baseline_input_tokens, 0), 2) AS tokens_saved_pct,
        round(median_tokens_saved_pct, 2) AS median_tokens_saved_pct,
        CAST(median_peak_context_tokens AS DOUBLE) AS median_peak_context_tokens,
        CAST(max_peak_context_tokens AS BIGINT) AS max_peak_context_tokens,
        CAST(cache_read_tokens AS BIGINT) AS cache_read_tokens,
        CAST(cache_write_tokens AS BIGINT) AS cache_write_tokens,
        CAST(output_tokens AS BIGINT) AS output_tokens,
        priced_sessions,
        round(cost_usd, 6) AS cost_usd,
        round(baseline_cost_usd - cost_usd, 6) AS cost_saved_usd,
        round(100.0 * (baseline_cost_usd - cost_usd) / nullif(baseline_cost_usd, 0), 2)
            AS cost_saved_pct,
        round(median_cost_saved_pct, 2) AS median_cost_saved_pct,
        round(median_cost_usd, 6) AS median_cost_usd,
        round(cost_uncached_usd, 6) AS cost_uncached_usd,
        round(100.0 * (baseline_cost_uncached_usd - cost_uncached_usd)
              / nullif(baseline_cost_uncached_usd, 0), 2) AS cost_uncached_saved_pct,
        CAST(plans AS BIGINT) AS plans,
        CAST(evictions AS BIGINT) AS evictions,
        CAST(evicted_tokens AS BIGINT) AS evicted_tokens,
        CAST(at_risk_evictions AS BIGINT) AS at_risk_evictions,
        CAST(protected_violations AS BIGINT) AS protected_violations,
        sessions_with_usage,
        round(median_estimate_error_pct, 2) AS median_estimate_error_pct,
        round(median_heuristic_error_pct, 2) AS median_heuristic_error_pct
    FROM per_policy
    ORDER BY list_position($policies, policy)
)
SELECT * FROM final
