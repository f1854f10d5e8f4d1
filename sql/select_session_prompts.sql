-- The first $limit human prompts of each session (main thread, in order, one row per source message), for topics, objectives and ignore_patterns
WITH wanted AS (
    SELECT DISTINCT unnest(CAST($sessions AS VARCHAR[])) AS session_id
),
prompt_rows AS (
    SELECT session_id, source_id, line_no, json_path, seq, "timestamp", text
    FROM messages
    SEMI JOIN wanted USING (session_id)
    WHERE is_prompt
      AND NOT coalesce(is_sidechain, false)
      AND NOT coalesce(is_demo, false)
),
prompts AS (
    SELECT
        session_id, source_id, line_no, json_path,
        min(seq) AS seq,
        min("timestamp") AS first_at,
        string_agg(text, chr(10) ORDER BY seq) AS text
    FROM prompt_rows
    GROUP BY session_id, source_id, line_no, json_path
),
ranked AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY session_id ORDER BY first_at NULLS LAST, source_id, seq) AS prompt_no
    FROM prompts
),
final AS (
    SELECT session_id, prompt_no, text FROM ranked WHERE prompt_no <= $limit
)
SELECT * FROM final ORDER BY session_id, prompt_no
