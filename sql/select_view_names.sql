-- Names of the views and tables this connection has (to tell whether an optional derived table such as evictions exists yet)
WITH names AS (
    SELECT table_name AS name FROM information_schema.tables
),
final AS (
    SELECT DISTINCT name FROM names ORDER BY name
)
SELECT * FROM final
