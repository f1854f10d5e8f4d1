"""Infrastructure every stage stands on: the lake (``lake``: Parquet parts, DuckDB views, the
lock), SQL loading (``sqlfiles``), table schemas (``schema``), the content-addressed store
(``store``), named errors (``errors``), configuration (``config``, ``locations``), the per-stage
ledger (``ledger``), crash points for tests (``crash``), row batching (``batching``) and the
local/Ray execution engine (``engine``). See docs/architecture.md.
"""
