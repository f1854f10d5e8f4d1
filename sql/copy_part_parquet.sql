-- Write one staged part to Parquet: the select slot holds a sql/select_<table>_part.sql statement, the path slot its quoted temp file
COPY ({select}) TO {path} (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 1, DICTIONARY_SIZE_LIMIT 1)
