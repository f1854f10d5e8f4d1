-- Every session of session_info with its parent, its first-listed source's modification time (microseconds since the epoch), the fingerprint of its own sources (its session_activity row is current while it is the same) and, for a top-level session, the fingerprint of its and its sub-agents' sources (its log entry's key): read from session_info and sources only, never from messages
WITH info_rows AS (
    SELECT session_id, source_id, parent_session_id,
           coalesce(first_seen_at, 'infinity'::TIMESTAMPTZ) AS seen_order
    FROM session_info
    WHERE session_id IS NOT NULL
),
info AS (
    -- as the sessions view takes them
    SELECT
        session_id,
        arg_min(parent_session_id, seen_order) FILTER (WHERE parent_session_id IS NOT NULL) AS parent_session_id,
        min(source_id) AS source_id
    FROM info_rows
    GROUP BY session_id
),
session_sources AS (
    SELECT DISTINCT session_id, source_id, parent_session_id
    FROM info_rows
),
source_parts AS (
    -- the content of the sources, not their ids (which follow the file's path): the same
    -- bytes elsewhere give the same keys
    SELECT DISTINCT
        session_sources.session_id,
        source_state(session_sources.session_id, sources.generation, sources.lines, sources.sha256) AS part
    FROM session_sources
    JOIN sources USING (source_id)
),
own_keys AS (
    SELECT session_id, md5(string_agg(part, ',' ORDER BY part)) AS sources_key
    FROM source_parts
    GROUP BY session_id
),
family AS (
    -- every session with the top-level sessions its log entry may belong to: itself and
    -- every parent a row of it names (more than needed is safe: a key then changes more often)
    SELECT DISTINCT session_id, coalesce(parent_session_id, session_id) AS root_session_id
    FROM session_sources
),
described AS (
    SELECT DISTINCT family.root_session_id, source_parts.part
    FROM source_parts
    JOIN family USING (session_id)
),
log_keys AS (
    SELECT root_session_id AS session_id, md5(string_agg(part, ',' ORDER BY part)) AS log_key
    FROM described
    GROUP BY root_session_id
),
final AS (
    SELECT
        info.session_id, info.parent_session_id, own_keys.sources_key,
        CASE WHEN info.parent_session_id IS NULL THEN log_keys.log_key END AS log_key,
        epoch_us(files.mtime) AS source_mtime_us
    FROM info
    LEFT JOIN own_keys USING (session_id)
    LEFT JOIN log_keys USING (session_id)
    LEFT JOIN sources AS files ON files.source_id = info.source_id
)
SELECT * FROM final ORDER BY session_id
