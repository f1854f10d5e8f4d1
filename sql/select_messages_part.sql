-- Stored columns of a messages part: staged rows plus parsed time, lengths and est_tokens
WITH staged AS (
    SELECT * FROM staged_batch
),
measured AS (
    SELECT
        * EXCLUDE (timestamp_raw),
        try_cast(timestamp_raw AS TIMESTAMPTZ) AS "timestamp",
        length(coalesce(text, '')) AS char_len,
        strlen(coalesce(text, '')) AS text_bytes,
        cjk_count(text) AS cjk_count,
        utf16_length(text) AS utf16_len
    FROM staged
),
final AS (
    SELECT
        * EXCLUDE (utf16_len),
        est_tokens_from(cjk_count, utf16_len) AS est_tokens,
        CASE
            WHEN kind <> 'tool_result' THEN NULL
            WHEN text IN ('[Old tool result content cleared]', '[Tool result cleared by context editing]') THEN 'cleared'
            WHEN char_len < 64 AND regexp_full_match(text, 'Old environment output: \(\d+ lines omitted\)') THEN 'masked'
            WHEN contains(text, '[ctxlake compaction]') THEN 'pruned'
        END AS compaction_state
    FROM measured
)
SELECT * FROM final
