"""Ad-hoc SQL over the lake's views (``ctxlake sql``).

Read-only by default: the query must be SELECT statements (``SHOW``, ``DESCRIBE`` and
``SUMMARIZE`` are SELECTs too) or EXPLAIN, it may not call a table function that reads files
(``read_csv``, ``read_text``, ``glob``, ...) nor name a file as a table, and it runs in a
DuckDB sandbox: external access off, only the lake's folder readable, the configuration
locked. So no ``COPY ... TO``, ``ATTACH``, ``INSTALL``, ``SET``, nor any file read or write
outside the views. ``unsafe=True`` (``ctxlake sql --unsafe``) lifts all of it.
"""

from __future__ import annotations

import os
import re

import duckdb
import orjson

from pipeline.core.errors import UsageError
from pipeline.core.lake import Lake, new_connection

READ_ONLY_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})
# table functions that only compute or describe the catalog: every other one may touch files
SAFE_TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "json_each", "json_tree", "repeat", "repeat_row",
    "duckdb_columns", "duckdb_constraints", "duckdb_databases", "duckdb_functions",
    "duckdb_indexes", "duckdb_keywords", "duckdb_schemas", "duckdb_settings", "duckdb_tables",
    "duckdb_types", "duckdb_views", "pragma_table_info", "pragma_show", "pragma_version",
    "summary", "test_all_types",
})
_FILE_NAME = re.compile(r"[/\\]|\.(parquet|csv|tsv|json|jsonl|ndjson|txt|db|duckdb)$", re.IGNORECASE)
UNSAFE_HINT = "ctxlake sql is read-only over the lake's views; add --unsafe to lift this"


def _refusal(con: duckdb.DuckDBPyConnection, query: str) -> str | None:
    """Why ``query`` is not a read-only query over the views, or None."""
    try:
        statements = con.extract_statements(query)
    except duckdb.Error:
        return None   # a syntax error: DuckDB's own message says it best
    for statement in statements:
        if statement.type not in READ_ONLY_STATEMENTS:
            name = str(statement.type).rsplit(".", 1)[-1]
            return f"{name} statements are refused (only SELECT and EXPLAIN)"
    serialized = con.execute("SELECT json_serialize_sql(?)", [query]).fetchone()[0]
    tree = orjson.loads(serialized)
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "TABLE_FUNCTION":
                name = (node.get("function") or {}).get("function_name", "")
                if name.lower() not in SAFE_TABLE_FUNCTIONS:
                    return f"the table function {name}() may read files: refused"
            elif node.get("type") == "BASE_TABLE" and _FILE_NAME.search(node.get("table_name", "")):
                return f"reading the file {node['table_name']!r} as a table is refused"
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _sandbox(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    """From now on the connection reads only the lake's folder and cannot change that."""
    roots = {str(lake.root.absolute()).rstrip("/"), os.path.realpath(lake.root).rstrip("/")}
    # the views name their files by escaped globs (sqlfiles.glob_literal): both spellings
    roots |= {"".join(f"[{ch}]" if ch in "[*?" else ch for ch in root) for root in roots}
    folders = sorted(root + "/" for root in roots)
    con.execute("SET allowed_directories = $folders", {"folders": folders})
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def run_query(lake: Lake, query: str, params: list | None = None, *,
              unsafe: bool = False) -> tuple[list[str], list[tuple]]:
    """Run one query over the lake's views; returns (column names, rows). Read-only unless
    ``unsafe`` (see the module docstring)."""
    con = lake.connect()
    if not unsafe:
        # the sandbox is set on a database of its own: the lake's cached views connection
        # (shared by every later query of this process) stays as it is
        con.close()
        con = new_connection()
        lake.create_views(con)
    with con:
        if not unsafe:
            reason = _refusal(con, query)
            if reason is not None:
                raise UsageError(f"query refused: {reason}", hint=UNSAFE_HINT)
            _sandbox(con, lake)
        try:
            cur = con.execute(query, params or [])
        except duckdb.Error as exc:
            hint = UNSAFE_HINT if isinstance(exc, duckdb.PermissionException) else \
                "list the tables with: ctxlake sql \"SHOW TABLES\""
            raise UsageError(f"query failed: {exc}", hint=hint) from None
        if cur.description is None:
            return [], []
        columns = [d[0] for d in cur.description]
        return columns, cur.fetchall()
