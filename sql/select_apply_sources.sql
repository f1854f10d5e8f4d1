-- Archive files apply mirrors: every readable ingested file, or only the files holding one session
WITH readable AS (
    SELECT source_id, path, root, rel_path, format, size_bytes, sha256, watermark, watermark_sha256
    FROM sources
    WHERE format IS NOT NULL AND sha256 IS NOT NULL
),
session_files AS (
    SELECT DISTINCT source_id FROM records WHERE session_id = $session_id
    UNION
    SELECT DISTINCT source_id FROM messages WHERE session_id = $session_id
),
final AS (
    SELECT readable.* FROM readable
    WHERE $session_id IS NULL OR source_id IN (SELECT source_id FROM session_files)
    ORDER BY rel_path, path
)
SELECT * FROM final
