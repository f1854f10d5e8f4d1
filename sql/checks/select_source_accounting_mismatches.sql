-- A current source whose counts disagree with its rows: lines = records + line quarantines, records and quarantined match the tables
WITH record_counts AS (
    SELECT source_id, count(*) AS record_rows
    FROM records
    GROUP BY source_id
),
quarantine_counts AS (
    SELECT source_id, count(*) AS quarantine_rows,
           count(*) FILTER (WHERE line_no > 0) AS line_quarantines
    FROM quarantine
    GROUP BY source_id
),
accounts AS (
    SELECT s.source_id, s.path, s.lines, s.records, s.quarantined, s.held_back,
           coalesce(r.record_rows, 0) AS record_rows,
           coalesce(q.quarantine_rows, 0) AS quarantine_rows,
           coalesce(q.line_quarantines, 0) AS line_quarantines
    FROM sources AS s
    LEFT JOIN record_counts AS r USING (source_id)
    LEFT JOIN quarantine_counts AS q USING (source_id)
),
final AS (
    SELECT * FROM accounts
    WHERE lines IS DISTINCT FROM records + line_quarantines
       OR records IS DISTINCT FROM record_rows
       OR quarantined IS DISTINCT FROM quarantine_rows
    ORDER BY source_id
)
SELECT * FROM final
