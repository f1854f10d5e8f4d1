"""The public Python API for analysts and notebooks, in the polars vocabulary (docs/api.md).

    from pipeline import open_lake

    lake = open_lake()                        # $CTXLAKE_HOME, the make demo lake, or the user lake
    lake.scan("messages")                     # polars.LazyFrame over the lake's view
    lake.read_sessions()                      # polars.DataFrame, eager
    lake.sql("SELECT ... WHERE x = $x", x=1)  # polars.DataFrame; values bound, never formatted

A frame reads the lake's DuckDB views (``sql/``), the same rows the CLI and every stage see:
only parts of committed ingest runs (``committed_runs``), each source's current generation,
recorded usage kept once per API call. Each scan has a cursor of its own, so frames can be
collected in any order and joined with each other.
"""

from __future__ import annotations

import os

from pathlib import Path

import polars as pl

from pipeline.core import sqlfiles
from pipeline.core.errors import UsageError
from pipeline.core.lake import Lake, notebook_lake

__all__ = ["LakeFrames", "open_lake"]


class LakeFrames:
    """A lake read as polars frames: :meth:`scan` (lazy), ``read_*`` (eager), :meth:`sql`."""

    def __init__(self, lake: Lake):
        self.lake = lake

    @property
    def root(self) -> Path:
        return self.lake.root

    def tables(self) -> list[str]:
        """The names :meth:`scan` accepts: every view and table of the lake (sorted)."""
        with self.lake.connect() as con:
            rows = con.execute(sqlfiles.load("select_view_names")).fetchall()
        return [name for (name,) in rows if not name.startswith("_")]

    def scan(self, name: str) -> pl.LazyFrame:
        """The view or table ``name`` as a :class:`polars.LazyFrame` (filters and column
        selections are pushed down to DuckDB when the frame is collected)."""
        known = self.tables()
        if name not in known:
            raise UsageError(f"the lake has no table {name!r}", path=str(self.root),
                             hint="one of: " + ", ".join(known))
        con = self.lake.connect()
        return con.sql(sqlfiles.render("select_table_rows", table=sqlfiles.ident(name))).pl(lazy=True)

    def read(self, name: str) -> pl.DataFrame:
        """The view or table ``name`` as a :class:`polars.DataFrame`."""
        return self.scan(name).collect()

    def read_sessions(self) -> pl.DataFrame:
        return self.read("sessions")

    def read_messages(self) -> pl.DataFrame:
        return self.read("messages")

    def read_tool_calls(self) -> pl.DataFrame:
        return self.read("tool_calls")

    def read_tool_results(self) -> pl.DataFrame:
        return self.read("tool_results")

    def read_usage_calls(self) -> pl.DataFrame:
        return self.read("usage_calls")

    def read_policy_eval(self) -> pl.DataFrame:
        return self.read("policy_eval")

    def sql(self, query: str, /, **params) -> pl.DataFrame:
        """Run ``query`` over the lake's views; ``$name`` placeholders are bound from ``params``."""
        with self.lake.connect() as con:
            return con.sql(query, params=params or None).pl()


def open_lake(path: str | Path | None = None, *, mirror: str | Path | None = None) -> LakeFrames:
    """Open the lake at ``path`` for reading; default: ``$CTXLAKE_HOME``, else the ``make demo``
    lake of the checkout holding the current folder, else the per-user lake. An ``s3://`` or
    ``gs://`` URL is pulled into its local mirror first (``mirror``: its folder; default
    ``$CTXLAKE_MIRROR``, else one per URL under the user's cache folder)."""
    from pipeline.core import remote

    path = path if path is not None else os.environ.get("CTXLAKE_HOME") or notebook_lake()
    if remote.is_url(path):
        path = remote.pull_mirror(path, mirror).lake_root
    lake = Lake(path)
    with lake.connect():            # a clear LakeNotFoundError where there is no lake
        pass
    return LakeFrames(lake)
