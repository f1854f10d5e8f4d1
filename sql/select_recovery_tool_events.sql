-- Tool calls of some sessions ($sessions) with their result (error flag, first 2000 characters), in transcript order, for recovery documents
WITH wanted AS (
    SELECT DISTINCT unnest(CAST($sessions AS VARCHAR[])) AS session_id
),
calls AS (
    SELECT session_id, source_id, seq, "timestamp", tool_name, tool_family, input_json, cwd, call_id
    FROM tool_calls
    SEMI JOIN wanted USING (session_id)
),
results AS (
    SELECT session_id, call_id, source_id, seq, is_error, "timestamp"
    FROM tool_results
    SEMI JOIN wanted USING (session_id)
),
texts AS (
    SELECT source_id, seq, is_sidechain, left(text, 2000) AS text
    FROM messages
    SEMI JOIN wanted USING (session_id)
    WHERE kind IN ('tool_use', 'tool_result')
),
after_call AS (
    -- a call's result: the first one with its id at or after the call in the call's file
    -- (an ASOF join: linear even where a hostile file repeats one call id thousands of times)
    SELECT calls.source_id, calls.seq, calls.call_id, results.source_id AS result_source_id,
           results.seq AS result_seq, results.is_error, results."timestamp" AS result_at
    FROM calls
    ASOF JOIN results
        ON results.session_id = calls.session_id AND results.call_id = calls.call_id
       AND results.source_id = calls.source_id AND calls.seq <= results.seq
),
first_result AS (
    -- otherwise the first result with its id in the session (by file, then position)
    SELECT session_id, call_id, source_id AS result_source_id, seq AS result_seq, is_error,
           "timestamp" AS result_at
    FROM results
    QUALIFY row_number() OVER (PARTITION BY session_id, call_id ORDER BY source_id, seq) = 1
),
paired AS (
    SELECT
        calls.*,
        CASE WHEN after_call.result_seq IS NOT NULL THEN after_call.is_error
             ELSE first_result.is_error END AS is_error,
        coalesce(after_call.result_source_id, first_result.result_source_id) AS result_source_id,
        coalesce(after_call.result_seq, first_result.result_seq) AS result_seq,
        CASE WHEN after_call.result_seq IS NOT NULL THEN after_call.result_at
             ELSE first_result.result_at END AS result_at
    FROM calls
    LEFT JOIN after_call
        ON after_call.source_id = calls.source_id AND after_call.seq = calls.seq
       AND after_call.call_id = calls.call_id
    LEFT JOIN first_result
        ON first_result.session_id = calls.session_id AND first_result.call_id = calls.call_id
),
final AS (
    SELECT
        paired.session_id, paired.source_id, paired.seq, paired."timestamp", paired.tool_name,
        paired.tool_family, paired.input_json, paired.cwd, paired.call_id,
        coalesce(call_text.is_sidechain, false) AS is_sidechain,
        paired.is_error, paired.result_at, result_text.text AS result_text,
        paired.result_seq IS NOT NULL AS has_result
    FROM paired
    LEFT JOIN texts AS call_text
        ON call_text.source_id = paired.source_id AND call_text.seq = paired.seq
    LEFT JOIN texts AS result_text
        ON result_text.source_id = paired.result_source_id AND result_text.seq = paired.result_seq
)
SELECT * FROM final ORDER BY session_id, "timestamp" NULLS LAST, source_id, seq
