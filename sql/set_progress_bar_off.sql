-- Turn off DuckDB's own progress bar on this connection (it draws on stderr even when stderr is not a terminal; ctxlake draws its own)
SET enable_progress_bar = false
