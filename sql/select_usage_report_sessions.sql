-- Distinct sessions of some periods of a report ($periods; same $period, $tz, $since, $until, $project, $undated_formats as select_usage_report): the total of the rows --limit keeps
WITH calls AS (
    SELECT session_id, format, bucket, CAST(timezone(CAST($tz AS VARCHAR), bucket) AS DATE) AS local_day
    FROM usage_report_rows
    WHERE CAST($project AS VARCHAR) IS NULL OR contains(project, CAST($project AS VARCHAR))
),
in_range AS (
    SELECT
        session_id,
        CASE CAST($period AS VARCHAR)
            WHEN 'day' THEN strftime(local_day, '%Y-%m-%d')
            WHEN 'week' THEN strftime(local_day - CAST((isodow(local_day) - CAST($week_start AS INTEGER) + 7) % 7 AS INTEGER), '%Y-%m-%d')
            WHEN 'month' THEN strftime(local_day, '%Y-%m')
            ELSE CASE WHEN bucket IS NOT NULL OR NOT list_contains(CAST($undated_formats AS VARCHAR[]), format) THEN session_id END
        END AS period
    FROM calls
    WHERE (CAST($since AS DATE) IS NULL OR local_day >= CAST($since AS DATE))
      AND (CAST($until AS DATE) IS NULL OR local_day <= CAST($until AS DATE))
),
final AS (
    SELECT count(DISTINCT session_id) AS sessions
    FROM in_range
    WHERE list_contains(CAST($periods AS VARCHAR[]), coalesce(period, '(no date)'))
)
SELECT * FROM final
