-- tool_links rows per pairing status, with how many of them are protected managed-memory reads
WITH links AS (
    SELECT status, protected
    FROM tool_links
),
final AS (
    SELECT status, count(*) AS links, count(*) FILTER (WHERE protected) AS protected
    FROM links
    GROUP BY status
    ORDER BY status
)
SELECT * FROM final
