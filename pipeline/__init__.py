"""ctxlake: a batch pipeline over AI coding-agent transcripts.

The library is laid out by role (docs/architecture.md): ``pipeline.stages`` (one module per
stage: ingest, correlate, calibrate, plan, apply, summarize, usage, replay, nightly),
``pipeline.core`` (lake, SQL, schemas, store, ledger, config), ``pipeline.text`` (tokens,
paths, memory), ``pipeline.formats`` (one module per transcript format),
``pipeline.policies`` (one per compaction policy), ``pipeline.reports`` and ``pipeline.demo``.
The CLI in ``pipeline.cli`` only parses arguments, calls one library function and renders the
result.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "open_lake"]


def __getattr__(name: str):
    # open_lake imports polars and DuckDB: only when asked for, so `ctxlake --version` stays light
    if name == "open_lake":
        from pipeline.api import open_lake

        return open_lake
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
