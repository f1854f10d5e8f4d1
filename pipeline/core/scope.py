"""Cursors scoped to a few sessions: each part table read from only the files holding them.

A night with one new session runs each stage's per-session queries over the lake's views:
every such query reads the footers of all the part files of the tables it touches and plans
over their union (50-150 ms a query on a 500 MB lake, some 25 of them a night). A scoped
cursor (:func:`connect_scoped`) replaces, for that cursor only, each part table's view by a
temp view over the files holding a row of the *scope's sources*, with the same commit and
generation filter and the lake-wide view's columns. Every view built on the part tables
(``messages``, ``sessions``, ``tool_links``, the macros) then reads those files only.

The scope's sources are those of the sessions asked for and of every session linked to them
by a parent link, transitively (a sub-agent and its parent, the parent's other sub-agents):
all rows of those sources are in the scoped views, so a query whose rows for these sessions
depend only on their family's sources gives the rows it gives on the whole lake
(``tests/test_scope.py`` compares them query by query on the real samples). A query over
the whole lake (fingerprints of every session, the days of every session, lake-unique
memory ids, the usage dedup across sessions) must keep the plain :meth:`Lake.connect`.

A table whose scoped files would be more than half its files keeps the lake-wide view:
nothing to gain there, and a large scope (a first run, a changed setting) costs nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable

from pipeline.core import sqlfiles
from pipeline.core.lake import part_run_id
from pipeline.core.schema import PART_TABLES

if TYPE_CHECKING:
    import duckdb

    from pipeline.core.lake import Lake

# a scoped view is used for a table when it reads at most this share of the table's files
MAX_FILE_SHARE = 0.5
# a scoped cursor's registered copy of sources' ids and current generations
CURRENT_SOURCES = "_scope_current_sources"


def _sibling(con: "duckdb.DuckDBPyConnection") -> "duckdb.DuckDBPyConnection":
    """A new cursor of ``con``'s database with its time zone and search path."""
    zone, path = con.execute(sqlfiles.load("select_cursor_settings")).fetchall()[0]
    cursor = con.cursor()
    cursor.execute("SET TimeZone = $zone", {"zone": zone})
    cursor.execute("SET search_path = $path", {"path": path})
    return cursor


def view_name(table: str) -> str:
    """The view a part table's rows are read through (``messages`` adds its usage dedup over
    ``_messages_current``, which is what is scoped)."""
    return "_messages_current" if table == "messages" else table


def family_sources(links: Iterable[tuple[str, str | None, str]], sessions: Iterable[str]) -> set[str]:
    """The sources of ``sessions`` and of every session joined to them by parent links
    (``links``: ``(session_id, parent_session_id, source_id)`` rows), transitively."""
    neighbours: dict[str, set[str]] = {}
    sources_of: dict[str, set[str]] = {}
    for session_id, parent, source_id in links:
        sources_of.setdefault(session_id, set()).add(source_id)
        if parent is not None and parent != session_id:
            neighbours.setdefault(session_id, set()).add(parent)
            neighbours.setdefault(parent, set()).add(session_id)
    seen: set[str] = set()
    todo = [s for s in set(sessions)]
    while todo:
        session_id = todo.pop()
        if session_id in seen:
            continue
        seen.add(session_id)
        todo.extend(neighbours.get(session_id, ()))
    return {source for s in seen for source in sources_of.get(s, ())}


def _part_files(lake: "Lake", table: str) -> tuple[str, ...]:
    """The table's part files (not its typed ``_empty.parquet``, which holds no row)."""
    try:
        with os.scandir(lake.table_dir(table)) as entries:
            return tuple(sorted(e.path for e in entries if e.name.endswith(".parquet")
                                and not e.name.startswith("_") and e.is_file()))
    except FileNotFoundError:
        return ()


# What a scope needs, per lake state (the sources file's stat and every part file's name:
# parts are immutable once named, and a commit replaces sources.parquet): the files of each
# scoped table per set of sessions, and each part table's empty copy. Only the latest state
# of a lake is kept (a night's stages after ingest share one).
_PLANS: dict[tuple, dict[str, tuple[str, ...] | None]] = {}
_EMPTIES: dict[tuple, dict] = {}


def _state(lake: "Lake", files: dict[str, tuple[str, ...]]) -> tuple:
    try:
        stat = os.stat(lake.sources_path)
        sources = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    except FileNotFoundError:
        sources = None
    return (os.path.abspath(lake.root), sources, tuple(files[t] for t in PART_TABLES))


def _plan(lake: "Lake", con, wanted: frozenset[str],
          files: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...] | None]:
    """Per part table: the files a scoped view reads (None: keep the lake-wide view)."""
    links = con.execute(sqlfiles.load("select_session_source_links")).fetchall()
    sources = sorted(family_sources(links, wanted))
    listed = _listed_parts(lake, sources, files)
    plan: dict[str, tuple[str, ...] | None] = {}
    for table in PART_TABLES:
        if not files[table]:
            plan[table] = None
            continue
        held: tuple[str, ...] = ()
        if listed is not None:
            held = listed.get(table, ())
        elif sources:
            held = tuple(row[0] for row in con.execute(
                sqlfiles.render("select_part_files_of_sources",
                                glob=sqlfiles.glob_literal(lake.table_dir(table), "*.parquet")),
                {"sources": sources}).fetchall())
        plan[table] = None if len(held) > MAX_FILE_SHARE * len(files[table]) else held
    return plan


def _listed_parts(lake: "Lake", sources: list[str],
                  files: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]] | None:
    """Per part table, the files holding the current rows of ``sources``, as the lake's
    ``sources.parquet`` names them (``parts``), among the files there now; None when one of
    them has no such list (a lake made before it was kept): the files are then found by
    reading the tables' source ids."""
    if not sources:
        return {}
    table = lake.read_sources(("source_id", "parts"))
    wanted = set(sources)
    found: dict[str, set[str]] = {}
    for source_id, parts in zip(table.column(0).to_pylist(), table.column(1).to_pylist()):
        if source_id not in wanted:
            continue
        if parts is None:
            return None
        for part in parts:
            name, _, stem = part.partition("/")
            found.setdefault(name, set()).add(os.path.join(lake.table_dir(name), stem + ".parquet"))
    return {name: tuple(sorted(paths & set(files.get(name, ()))))
            for name, paths in found.items()}


def connect_scoped(lake: "Lake", sessions: Iterable[str], *,
                   within: "duckdb.DuckDBPyConnection | None" = None) -> "duckdb.DuckDBPyConnection":
    """A cursor of ``lake`` whose part-table views read only the files holding the rows of
    ``sessions``' family (see the module docstring); the other views and derived tables are
    the lake's. A table where that would not read fewer than half its files, and every table
    when no session is named, keeps the lake-wide view. The files are found once per lake
    state and set of sessions in a process (~50 ms on a 500 MB lake); a cursor then costs
    a few milliseconds.

    ``within``: a cursor of the lake already open (a stage that scopes part of its work): the
    scoped cursor is a new cursor of the same database, with its settings, and does not make
    :meth:`Lake.connect` rebind the views (which would close that cursor when a derived table
    appeared since it was opened)."""
    con = lake.connect() if within is None else _sibling(within)
    wanted = frozenset(sessions)
    if not wanted:
        return con
    files = {table: _part_files(lake, table) for table in PART_TABLES}
    state = _state(lake, files)
    plan = _PLANS.get((state, wanted))
    if plan is None:
        for key in [k for k in _PLANS if k[0][0] == state[0]]:
            del _PLANS[key]
        plan = _PLANS[(state, wanted)] = _plan(lake, con, wanted, files)
    empties = _EMPTIES.get(state)
    if empties is None:
        for key in [k for k in _EMPTIES if k[0] == state[0]]:
            del _EMPTIES[key]
        empties = _EMPTIES[state] = {}
    committed: set[str] | None = None
    for table, held in plan.items():
        if held is None:
            continue
        name = view_name(table)
        if table not in empties:
            empties[table] = con.sql(sqlfiles.render(
                "select_part_table_empty", view=sqlfiles.ident(name))).to_arrow_table()
        empty = f"_scope_empty_{table}"
        con.register(empty, empties[table])
        if held and committed is None:
            # part_rows_current's two tests, taken once per cursor instead of in every query
            # (reading sources.parquet and runs.parquet there cost ~7 ms per table a query
            # reads, ~10-80 ms a query): the run of each file, here; the current generation
            # of each source, against a registered copy of sources' ids and generations
            committed = lake.committed_run_ids()
            con.register(CURRENT_SOURCES, lake.read_sources(("source_id", "generation")))
        if held:
            held = tuple(path for path in held if part_run_id(path) in committed)
        if not held:
            con.execute(sqlfiles.render("create_view_part_table_none", name=sqlfiles.ident(name),
                                        empty=sqlfiles.ident(empty)))
            continue
        # each file as a glob literal with its glob characters escaped (DuckDB expands them)
        listed = "[" + ", ".join(sqlfiles.glob_literal(path) for path in held) + "]"
        con.execute(sqlfiles.render("create_view_part_table_scoped", name=sqlfiles.ident(name),
                                    files=listed, empty=sqlfiles.ident(empty),
                                    current=sqlfiles.ident(CURRENT_SOURCES)))
    return con
