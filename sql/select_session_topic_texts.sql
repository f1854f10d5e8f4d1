-- The first $limit user messages of each session that a person typed (human prompts and slash commands; main thread, in order, one row per source message), for the daily-log topic
WITH wanted AS (
    SELECT DISTINCT unnest(CAST($sessions AS VARCHAR[])) AS session_id
),
user_rows AS (
    SELECT session_id, source_id, line_no, json_path, seq, "timestamp", text,
           NOT is_prompt AS is_command
    FROM messages
    SEMI JOIN wanted USING (session_id)
    WHERE (is_prompt
           OR (role = 'user' AND kind = 'meta' AND NOT coalesce(is_meta, false)
               AND regexp_matches(text, $command_pattern)))
      AND NOT coalesce(is_sidechain, false)
      AND NOT coalesce(is_demo, false)
),
per_message AS (
    SELECT
        session_id, source_id, line_no, json_path,
        min(seq) AS seq,
        min("timestamp") AS first_at,
        bool_or(is_command) AS is_command,
        string_agg(text, chr(10) ORDER BY seq) AS text
    FROM user_rows
    GROUP BY session_id, source_id, line_no, json_path
),
ranked AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY session_id ORDER BY first_at NULLS LAST, source_id, seq) AS message_no
    FROM per_message
),
final AS (
    SELECT session_id, message_no, is_command, text FROM ranked WHERE message_no <= $limit
)
SELECT * FROM final ORDER BY session_id, message_no
