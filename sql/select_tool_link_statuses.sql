-- tool_links rows per pairing status, with how many of them are protected managed-memory reads, of the sessions in $session_ids (NULL: all)
WITH links AS (
    SELECT status, protected
    FROM tool_links
    WHERE $session_ids IS NULL OR list_contains($session_ids, session_id)
),
final AS (
    SELECT status, count(*) AS links, count(*) FILTER (WHERE protected) AS protected
    FROM links
    GROUP BY status
    ORDER BY status
)
SELECT * FROM final
