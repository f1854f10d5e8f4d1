-- Messages of some sessions ($sessions) that recovery documents quote: prompts, assistant text, slash commands, boundaries, interruptions
WITH wanted AS (
    SELECT DISTINCT unnest(CAST($sessions AS VARCHAR[])) AS session_id
),
picked AS (
    SELECT session_id, source_id, seq, "timestamp", role, kind, is_prompt,
           coalesce(is_sidechain, false) AS is_sidechain, text
    FROM messages
    SEMI JOIN wanted USING (session_id)
    WHERE NOT coalesce(is_demo, false)
      AND (is_prompt
           OR (role = 'assistant' AND kind = 'text')
           OR (role = 'user' AND kind = 'meta' AND contains(text, '<command-name>'))
           OR kind = 'boundary'
           OR (role = 'user' AND contains(text, '[Request interrupted')))
),
final AS (
    SELECT * FROM picked
)
SELECT * FROM final ORDER BY session_id, "timestamp" NULLS LAST, source_id, seq
