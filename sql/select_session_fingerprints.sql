-- Each session's content fingerprint (the sources its rows come from, at their current generation and length), with those source ids
WITH session_sources AS (
    SELECT DISTINCT session_id, source_id
    FROM session_info
    WHERE session_id IS NOT NULL
),
described AS (
    SELECT
        session_sources.session_id, session_sources.source_id,
        source_state(session_sources.source_id, sources.generation, sources.lines, sources.sha256) AS part
    FROM session_sources
    JOIN sources USING (source_id)
),
final AS (
    SELECT
        session_id,
        md5(string_agg(part, ',' ORDER BY source_id)) AS fingerprint,
        list(source_id ORDER BY source_id) AS source_ids
    FROM described
    GROUP BY session_id
    ORDER BY session_id
)
SELECT * FROM final
