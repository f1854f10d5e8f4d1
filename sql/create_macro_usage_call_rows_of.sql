-- usage_call_rows_of(sessions): recorded usage once per API call within each of sessions (a VARCHAR[]; NULL = all), before the cross-lake dedup, dated, with its session's facts; what refresh_usage materialises
CREATE OR REPLACE MACRO usage_call_rows_of(sessions) AS TABLE
WITH message_rows AS (
    -- lakes written before the 1-hour cache-write column get it as NULL
    SELECT * FROM _messages_current
    UNION ALL BY NAME
    SELECT CAST(NULL AS BIGINT) AS cache_write_1h_tokens WHERE false
),
current_usage AS (
    -- rows that carry recorded usage, read from the current parts directly (not from the
    -- messages view, whose dedup window runs over every message row: ~5x the work)
    SELECT session_id, source_id, seq, api_call_id, uuid, usage_scope, model, "timestamp",
           is_sidechain, input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens,
           cache_write_1h_tokens, reasoning_tokens, cost_usd_recorded
    FROM message_rows
    WHERE (input_tokens IS NOT NULL OR output_tokens IS NOT NULL
           OR cache_creation_tokens IS NOT NULL OR cache_read_tokens IS NOT NULL
           OR cost_usd_recorded IS NOT NULL)
      -- the session filter before the window (partitioned by session: the same survivors),
      -- so a night's few sessions do not rank every call of the lake
      AND (sessions IS NULL OR list_contains(sessions, session_id))
),
ranked AS (
    -- usage dedup rule, mirrored in create_view_messages.sql (ranked): change both together;
    -- on these rows only (same partitions, so the same survivors): usage once per API call,
    -- its fullest row (docs/formats.md)
    SELECT
        *,
        api_call_id IS NULL
            OR input_tokens IS NULL
            OR row_number() OVER (
                PARTITION BY session_id, api_call_id, input_tokens IS NULL
                -- the fullest row (most tokens in all), the first of equals, as ccusage keeps
                ORDER BY coalesce(input_tokens, 0) + coalesce(output_tokens, 0)
                         + coalesce(cache_creation_tokens, 0) + coalesce(cache_read_tokens, 0) DESC,
                         seq
            ) = 1 AS usage_kept
    FROM current_usage
),
usage_rows AS (
    SELECT
        session_id, source_id, seq, api_call_id, uuid, coalesce(usage_scope, 'call') AS usage_scope,
        model, "timestamp" AS recorded_at, coalesce(is_sidechain, false) AS is_sidechain,
        CASE WHEN usage_kept THEN coalesce(input_tokens, 0) ELSE 0 END AS input_tokens,
        CASE WHEN usage_kept THEN coalesce(output_tokens, 0) ELSE 0 END AS output_tokens,
        CASE WHEN usage_kept THEN coalesce(cache_creation_tokens, 0) ELSE 0 END AS cache_write_tokens,
        -- the 1-hour part of the cache writes (Claude's usage.cache_creation), never more than all writes
        CASE WHEN usage_kept THEN least(coalesce(cache_write_1h_tokens, 0), coalesce(cache_creation_tokens, 0))
             ELSE 0 END AS cache_write_1h_tokens,
        CASE WHEN usage_kept THEN coalesce(cache_read_tokens, 0) ELSE 0 END AS cache_read_tokens,
        CASE WHEN usage_kept THEN coalesce(reasoning_tokens, 0) ELSE 0 END AS reasoning_tokens,
        cost_usd_recorded
    FROM ranked
    -- a split call's other lines repeat its usage (and a recorded costUSD): counted once
    WHERE usage_kept
),
last_seen AS (
    SELECT session_id, max(recorded_at) AS last_at
    FROM usage_rows
    GROUP BY session_id
),
session_facts AS (
    SELECT
        session_id,
        arg_min(project, coalesce(first_seen_at, TIMESTAMPTZ 'infinity')) FILTER (WHERE project IS NOT NULL) AS project,
        arg_min(format, coalesce(first_seen_at, TIMESTAMPTZ 'infinity')) AS format,
        arg_min(parent_session_id, coalesce(first_seen_at, TIMESTAMPTZ 'infinity'))
            FILTER (WHERE parent_session_id IS NOT NULL) AS parent_session_id,
        min(first_seen_at) AS started_at
    FROM session_info
    WHERE sessions IS NULL OR list_contains(sessions, session_id)
    GROUP BY session_id
),
task_calls AS (
    -- Claude's Task tool: the sub-agent type it started, and the prompt it gave
    SELECT session_id, seq,
           json_extract_string(input_json, '$.subagent_type') AS agent_type,
           json_extract_string(input_json, '$.prompt') AS prompt
    FROM tool_calls
    WHERE tool_name IN ('Task', 'Agent') AND json_extract_string(input_json, '$.subagent_type') IS NOT NULL
),
sub_agent_prompts AS (
    -- a sub-agent session's first user text: the prompt its parent's Task call gave
    SELECT m.session_id, arg_min(m.text, m.seq) AS prompt
    FROM _messages_current AS m
    SEMI JOIN (SELECT session_id FROM session_facts WHERE parent_session_id IS NOT NULL) AS subs
        ON subs.session_id = m.session_id
    WHERE m.role = 'user' AND m.kind = 'text'
      AND (sessions IS NULL OR list_contains(sessions, m.session_id))
    GROUP BY m.session_id
),
sub_agent_types AS (
    SELECT p.session_id, min(t.agent_type) AS agent_type
    FROM sub_agent_prompts AS p
    JOIN session_facts AS f ON f.session_id = p.session_id
    JOIN task_calls AS t ON t.session_id = f.parent_session_id AND t.prompt = p.prompt
    GROUP BY p.session_id
),
dated AS (
    -- a row without its own time (run-level totals) is dated at the session's last timed
    -- usage; a call whose own time the reader could not take (docs/formats.md), as ccusage
    -- dates it: a Claude Code call or a Codex token_count not at all (a "(no date)" row), a
    -- Gemini call at its session's start
    SELECT usage_rows.*,
           CASE WHEN usage_rows.recorded_at IS NOT NULL THEN usage_rows.recorded_at
                WHEN f.format IN ('claude_code', 'codex_cli') THEN NULL
                WHEN f.format = 'gemini_cli' THEN f.started_at
                ELSE last_seen.last_at
           END AS "timestamp"
    FROM usage_rows
    LEFT JOIN last_seen USING (session_id)
    LEFT JOIN session_facts AS f USING (session_id)
),
inline_types AS (
    -- an inline (1.0.x) sidechain row belongs to the latest Task call before it in its session
    SELECT dated.source_id, dated.seq, task_calls.agent_type
    FROM dated
    ASOF JOIN task_calls ON task_calls.session_id = dated.session_id AND dated.seq >= task_calls.seq
    WHERE dated.is_sidechain
),
final AS (
    SELECT
        dated.session_id, dated.source_id, dated.seq, dated.api_call_id,
        -- the key that identifies one API call across the whole lake (copies in resumed or
        -- forked sessions): Claude's message.id:requestId, Gemini's message id (a UUID),
        -- Codex's token_count fingerprint (its uuid: lineage root and running total)
        CASE WHEN f.format = 'claude_code' AND dated.api_call_id IS NOT NULL AND dated.usage_scope = 'call'
                 THEN 'claude:' || dated.api_call_id
             WHEN f.format = 'gemini_cli' AND dated.api_call_id IS NOT NULL AND dated.usage_scope = 'call'
                 THEN 'gemini:' || dated.api_call_id
             WHEN f.format = 'codex_cli' AND dated.uuid IS NOT NULL AND dated.usage_scope = 'call'
                 THEN 'codex:' || dated.uuid
        END AS call_key,
        dated.usage_scope, dated.model, dated.recorded_at, dated."timestamp",
        dated.input_tokens, dated.output_tokens, dated.cache_write_tokens,
        dated.cache_write_1h_tokens, dated.cache_read_tokens, dated.reasoning_tokens,
        CAST(dated.cost_usd_recorded AS DOUBLE) AS cost_usd_recorded,
        f.project, f.format, f.parent_session_id,
        CASE WHEN f.parent_session_id IS NOT NULL THEN coalesce(sub_agent_types.agent_type, 'sub-agent')
             WHEN dated.is_sidechain THEN coalesce(inline_types.agent_type, 'sub-agent')
             ELSE 'main' END AS agent,
        sources.path AS source_path
    FROM dated
    LEFT JOIN session_facts AS f USING (session_id)
    LEFT JOIN sub_agent_types USING (session_id)
    LEFT JOIN inline_types ON inline_types.source_id = dated.source_id AND inline_types.seq = dated.seq
    LEFT JOIN sources ON sources.source_id = dated.source_id
)
SELECT * FROM final
