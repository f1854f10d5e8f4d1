-- Tool usage per day (UTC), project, tool family and tool: calls, results, tokens and bytes they put in the context ($since/$until: inclusive dates or NULL)
WITH links AS (
    SELECT
        l.*,
        CAST(coalesce(l.call_time, l.result_time) AS DATE) AS day,
        s.project
    FROM tool_links AS l
    LEFT JOIN sessions AS s USING (session_id)
),
bounded AS (
    SELECT * FROM links
    WHERE ($since IS NULL OR day >= CAST($since AS DATE))
      AND ($until IS NULL OR day <= CAST($until AS DATE))
),
final AS (
    SELECT
        day,
        project,
        tool_family,
        coalesce(tool_name, '?') AS tool_name,
        CAST(sum(n_calls) AS BIGINT) AS calls,
        CAST(sum(n_results) AS BIGINT) AS results,
        CAST(sum(input_est_tokens) AS BIGINT) AS input_est_tokens,
        CAST(sum(result_est_tokens) AS BIGINT) AS result_est_tokens,
        CAST(sum(input_est_tokens + result_est_tokens) AS BIGINT) AS est_tokens,
        CAST(sum(payload_bytes) AS BIGINT) AS payload_bytes,
        count(*) FILTER (WHERE is_error) AS errors
    FROM bounded
    GROUP BY ALL
    ORDER BY day NULLS LAST, project NULLS LAST, est_tokens DESC, tool_family, tool_name
)
SELECT * FROM final
