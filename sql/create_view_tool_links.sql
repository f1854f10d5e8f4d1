-- tool_links: one row per (session, call id): pairing status, request-side paths and their memory classes, sizes, and the next reference to the same path
CREATE OR REPLACE VIEW tool_links AS
WITH calls AS (
    SELECT session_id, call_id, seq, tool_name, tool_family, "timestamp", est_tokens, input_bytes
    FROM tool_calls
    WHERE call_id IS NOT NULL
),
call_ids AS (
    SELECT
        session_id, call_id,
        count(*) AS n_calls,
        min(seq) AS call_seq,
        arg_min(tool_name, seq) AS tool_name,
        arg_min(tool_family, seq) AS tool_family,
        arg_min("timestamp", seq) AS call_time,
        sum(est_tokens) AS input_est_tokens,
        sum(input_bytes) AS input_bytes
    FROM calls
    GROUP BY session_id, call_id
),
results AS (
    SELECT session_id, call_id, seq, tool_name, is_error, "timestamp", est_tokens, payload_bytes
    FROM tool_results
    WHERE call_id IS NOT NULL
),
result_ids AS (
    SELECT
        session_id, call_id,
        count(*) AS n_results,
        min(seq) AS result_seq,
        arg_min(tool_name, seq) AS tool_name,
        arg_min("timestamp", seq) AS result_time,
        coalesce(bool_or(is_error), false) AS is_error,
        sum(est_tokens) AS result_est_tokens,
        sum(payload_bytes) AS payload_bytes
    FROM results
    GROUP BY session_id, call_id
),
families AS (
    -- the family a tool name has in the calls: for results whose call is missing
    SELECT tool_name, mode(tool_family) AS tool_family
    FROM calls
    GROUP BY tool_name
),
ids AS (
    SELECT
        coalesce(c.session_id, r.session_id) AS session_id,
        coalesce(c.call_id, r.call_id) AS call_id,
        coalesce(c.tool_name, r.tool_name) AS tool_name,
        c.tool_family,
        coalesce(c.n_calls, 0) AS n_calls,
        coalesce(r.n_results, 0) AS n_results,
        c.call_seq, r.result_seq, c.call_time, r.result_time,
        coalesce(r.is_error, false) AS is_error,
        coalesce(c.input_est_tokens, 0) AS input_est_tokens,
        coalesce(c.input_bytes, 0) AS input_bytes,
        coalesce(r.result_est_tokens, 0) AS result_est_tokens,
        coalesce(r.payload_bytes, 0) AS payload_bytes
    FROM call_ids AS c
    FULL OUTER JOIN result_ids AS r
      ON c.session_id = r.session_id AND c.call_id = r.call_id
),
path_rows AS (
    -- rows of the last correlate run that still match a current call (stale rows drop out)
    SELECT p.session_id, p.call_id, p.seq, p.path_no, p.path, p.memory_class
    FROM tool_paths AS p
    SEMI JOIN calls AS c
      ON c.session_id = p.session_id AND c.call_id = p.call_id AND c.seq = p.seq
),
known AS (
    SELECT DISTINCT session_id, call_id
    FROM path_rows
),
id_paths AS (
    SELECT
        session_id, call_id, path,
        min(seq) AS first_seq,
        arg_min(path_no, seq) AS first_no,
        arg_min(memory_class, seq) AS memory_class
    FROM path_rows
    WHERE path IS NOT NULL
    GROUP BY session_id, call_id, path
),
path_lists AS (
    SELECT
        session_id, call_id,
        list(path ORDER BY first_seq, first_no) AS paths,
        list(memory_class ORDER BY first_seq, first_no) AS memory_classes,
        bool_and(memory_class IN ('project', 'user', 'team')) AS all_memory
    FROM id_paths
    GROUP BY session_id, call_id
),
refs AS (
    -- every naming of a path by a call: where a later reference can come from
    SELECT p.session_id, p.path, p.seq, c."timestamp"
    FROM path_rows AS p
    JOIN calls AS c
      ON c.session_id = p.session_id AND c.call_id = p.call_id AND c.seq = p.seq
    WHERE p.path IS NOT NULL
),
anchors AS (
    -- a result is referenced again after it arrived; a call without result, after it was made
    SELECT
        i.session_id, i.call_id, ip.path,
        coalesce(i.result_seq, i.call_seq) AS ref_seq,
        coalesce(i.result_time, i.call_time) AS ref_time
    FROM ids AS i
    JOIN id_paths AS ip
      ON ip.session_id = i.session_id AND ip.call_id = i.call_id
),
next_refs AS (
    SELECT a.session_id, a.call_id, a.ref_time, r.seq AS later_seq, r."timestamp" AS later_time
    FROM anchors AS a
    ASOF JOIN refs AS r
      ON a.session_id = r.session_id AND a.path = r.path AND a.ref_seq < r.seq
),
later AS (
    SELECT
        session_id, call_id,
        min(later_seq) AS later_ref_seq,
        arg_min(later_time, later_seq) AS later_ref_time,
        arg_min(ref_time, later_seq) AS ref_time
    FROM next_refs
    GROUP BY session_id, call_id
),
final AS (
    SELECT
        i.session_id,
        i.call_id,
        i.tool_name,
        coalesce(i.tool_family, f.tool_family, 'other') AS tool_family,
        i.call_seq,
        i.result_seq,
        i.call_time,
        i.result_time,
        CASE
            WHEN i.n_calls > 1 THEN 'ambiguous'
            WHEN i.n_calls = 1 AND i.n_results > 0 THEN 'paired'
            WHEN i.n_calls = 1 THEN 'orphan_call'
            ELSE 'orphan_result'
        END AS status,
        i.n_calls,
        i.n_results,
        i.is_error,
        coalesce(pl.paths, []::VARCHAR[]) AS paths,
        coalesce(pl.memory_classes, []::VARCHAR[]) AS memory_classes,
        (i.n_calls = 1 AND coalesce(pl.all_memory, false)) AS protected,
        k.call_id IS NOT NULL AS paths_known,
        i.input_est_tokens,
        i.input_bytes,
        i.result_est_tokens,
        i.payload_bytes,
        l.later_ref_seq,
        l.later_ref_time,
        epoch(l.later_ref_time) - epoch(l.ref_time) AS later_ref_gap_s
    FROM ids AS i
    LEFT JOIN families AS f ON f.tool_name = i.tool_name
    LEFT JOIN path_lists AS pl ON pl.session_id = i.session_id AND pl.call_id = i.call_id
    LEFT JOIN known AS k ON k.session_id = i.session_id AND k.call_id = i.call_id
    LEFT JOIN later AS l ON l.session_id = i.session_id AND l.call_id = i.call_id
)
SELECT * FROM final
