"""Infrastructure every stage stands on: the lake (``lake``: Parquet parts, DuckDB views, the
lock), SQL loading (``sqlfiles``), table schemas (``schema``), the content-addressed store
(``store``), named errors (``errors``), configuration (``config``, ``locations``), the per-stage
ledger (``ledger``), crash points for tests (``crash``) and row batching (``batching``).
Nothing here imports a stage. See docs/architecture.md.
"""
