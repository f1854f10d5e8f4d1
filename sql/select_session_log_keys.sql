-- Top-level sessions (sub-agents are folded into their parent) with their start and end, to place each on its day, and the fingerprint of the sources of it and its sub-agents: a stored log entry of the same key is current
WITH top_level AS (
    SELECT session_id, started_at, ended_at
    FROM sessions
    WHERE parent_session_id IS NULL
),
session_sources AS (
    SELECT DISTINCT session_id, source_id, parent_session_id
    FROM session_info
    WHERE session_id IS NOT NULL
),
family AS (
    -- every session with the top-level sessions its log entry may belong to: itself and
    -- every parent a row of it names (more than needed is safe: a key then changes more often)
    SELECT DISTINCT session_id, coalesce(parent_session_id, session_id) AS root_session_id
    FROM session_sources
),
described AS (
    SELECT DISTINCT
        family.root_session_id,
        -- the content of the sources, not their ids (which follow the file's path): the same
        -- bytes elsewhere give the same key
        session_sources.session_id || ':' || CAST(sources.generation AS VARCHAR) || ':'
            || CAST(coalesce(sources.lines, 0) AS VARCHAR) || ':' || coalesce(sources.sha256, '') AS part
    FROM session_sources
    JOIN family USING (session_id)
    JOIN sources USING (source_id)
),
keys AS (
    SELECT root_session_id AS session_id, md5(string_agg(part, ',' ORDER BY part)) AS log_key
    FROM described
    GROUP BY root_session_id
),
final AS (
    SELECT top_level.session_id, top_level.started_at, top_level.ended_at, keys.log_key
    FROM top_level
    LEFT JOIN keys USING (session_id)
)
SELECT * FROM final ORDER BY coalesce(ended_at, started_at) NULLS LAST, session_id
