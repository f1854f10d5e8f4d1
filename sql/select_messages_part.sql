-- Stored columns of a messages part: staged rows plus parsed time, lengths and est_tokens (the formula in SQL; its inputs cjk_count/utf16_len measured by the engine, checked against the est_tokens macro by sql/checks; plus media_tokens)
WITH staged AS (
    SELECT * FROM staged_messages
),
measured AS (
    SELECT
        * EXCLUDE (timestamp_raw),
        safe_timestamp(timestamp_raw) AS "timestamp",
        length(coalesce(text, '')) AS char_len,
        strlen(coalesce(text, '')) AS text_bytes
    FROM staged
),
final AS (
    SELECT
        * EXCLUDE (utf16_len),
        -- a tool result's images and PDFs add their estimate (pipeline.text.media)
        est_tokens_from(cjk_count, utf16_len) + coalesce(media_tokens, 0) AS est_tokens,
        CASE
            WHEN kind <> 'tool_result' THEN NULL
            WHEN text IN ('[Old tool result content cleared]', '[Tool result cleared by context editing]') THEN 'cleared'
            WHEN char_len < 64 AND regexp_full_match(text, 'Old environment output: \(\d+ lines omitted\)') THEN 'masked'
            WHEN contains(text, '[ctxlake compaction]') THEN 'pruned'
        END AS compaction_state
    FROM measured
)
SELECT * FROM final
