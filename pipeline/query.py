"""Ad-hoc SQL over the lake's views (``ctxlake sql``)."""

from __future__ import annotations

import duckdb

from pipeline.errors import UsageError
from pipeline.lake import Lake


def run_query(lake: Lake, query: str, params: list | None = None) -> tuple[list[str], list[tuple]]:
    """Run one query over the lake's views; returns (column names, rows)."""
    con = lake.connect()
    try:
        try:
            cur = con.execute(query, params or [])
        except duckdb.Error as exc:
            raise UsageError(f"query failed: {exc}",
                             hint="list the tables with: ctxlake sql \"SHOW TABLES\"") from None
        if cur.description is None:
            return [], []
        columns = [d[0] for d in cur.description]
        return columns, cur.fetchall()
    finally:
        con.close()
