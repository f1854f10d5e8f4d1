"""The lake: Parquet parts per table, a sources/runs commit point, DuckDB views from ``sql/``.

Layout under the lake directory (``./data/lake`` or ``$CTXLAKE_HOME``)::

    tables/<table>/<run_id>-<chunk>-<n>.parquet   rows written by ingest runs
    tables/<table>/_empty.parquet                 zero-row file fixing the schema
    sources.parquet                               one row per archive file (commit point)
    runs.parquet                                  committed runs
    ctxlake.duckdb                                the views, for external DuckDB clients
    .lock                                         one run at a time

A run writes its parts first and commits by atomically replacing ``sources.parquet`` and
``runs.parquet``; parts of a run that never committed are deleted at the next run's start.
Views keep, per source file, only the rows of its current ``generation``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import sqlfiles
from pipeline.errors import LakeLockedError, LakeNotFoundError, UnsafePathError
from pipeline.schema import PART_TABLES, RUNS, SOURCES, staged_schema

MACROS = ["create_macro_cjk_count", "create_macro_utf16_length", "create_macro_est_tokens_from",
          "create_macro_est_tokens", "create_macro_safe_timestamp"]
# SQL views created after the core views and the derived tables, in this order (one sql/
# file each). A stage that adds a view appends its file name here (one line).
EXTRA_VIEWS: list[str] = [
    "create_view_tool_paths_empty", "create_view_tool_links",  # correlate (pipeline/correlate.py)
    "create_view_model_prices_empty", "create_view_usage_calls", "create_view_daily_usage",
    "create_view_session_summary",  # summaries and usage reports (pipeline/summarize.py, usage.py)
]


# lakes whose lock this process holds (path -> depth): the lock is re-entrant in-process
_HELD: dict[str, int] = {}


def holds_lake_lock(stage):
    """Decorator: run a stage ``stage(lake, ...)`` that writes to the lake under its lock
    (re-entrant, so the nightly run holding it already is unaffected)."""
    @functools.wraps(stage)
    def locked(lake: "Lake", *args, **kwargs):
        if not lake.exists():
            raise LakeNotFoundError("no lake here yet", path=str(lake.root),
                                    hint="run `ctxlake ingest PATH` (or `ctxlake demo`) first")
        with lake.lock():
            return stage(lake, *args, **kwargs)
    return locked


# marker files: a folder holding one is ctxlake's own and is never read back as an archive
LAKE_MARKER = ".ctxlake-lake"
OUTPUT_MARKER = ".ctxlake-output"
# the lake holds raw transcripts: private whatever the umask
FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents as private folders (0700 whatever the umask);
    folders that already exist are left as they are."""
    path = Path(path)
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, DIR_MODE)


def refuse_symlinks(anchor: Path, path: Path, *, what: str) -> None:
    """Raise :class:`UnsafePathError` when ``path`` or a folder between ``anchor`` and it is a
    symlink (``anchor`` itself is the user's choice and may be one)."""
    anchor, path = Path(anchor), Path(path)
    try:
        rel = path.relative_to(anchor)
    except ValueError:
        rel = Path(path.name)
        anchor = path.parent
    current = anchor
    for part in rel.parts:
        current = current / part
        if os.path.islink(current):
            raise UnsafePathError(f"refusing a symlink in the {what}", path=str(current),
                                  hint="ctxlake never writes or deletes through a symlink; remove it")


def remove_own_file(path: Path, prefix: bytes) -> bool:
    """Delete ``path`` only when it is a regular file (not a symlink) that ctxlake wrote: its
    first bytes are ``prefix``. Returns whether it was deleted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or os.read(fd, len(prefix)) != prefix:
            return False
    finally:
        os.close(fd)
    os.unlink(path)
    return True


def write_marker(folder: Path, name: str, text: str) -> None:
    """Write a marker file naming what ``folder`` is (once; never through a symlink)."""
    target = Path(folder) / name
    if os.path.lexists(target):
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def default_lake() -> Path:
    return Path(os.environ.get("CTXLAKE_HOME") or "data/lake")


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = FILE_MODE) -> None:
    """Write ``data`` to ``path`` via a temp file, fsync and rename (never half a file);
    private (0600) by default, whatever the umask."""
    private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Parquet via a unique temp file, fsync and rename (two writers never share a temp)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def new_connection(database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection in UTC with the token macros of ``sql/`` (in memory by default)."""
    con = duckdb.connect(database)
    con.execute("SET TimeZone = 'UTC'")
    for name in MACROS:
        con.execute(sqlfiles.load(name))
    return con


def _open_lock(path: Path):
    """The lock file, opened for update without following a symlink (a planted link cannot
    make the lock truncate another file) and created private."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                     FILE_MODE)
    except OSError as exc:
        if os.path.islink(path):
            raise LakeLockedError("the lake's .lock is a symlink: refusing to follow it",
                                  path=str(path), hint="remove the link; ctxlake writes its own lock") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LakeLockedError("the lake's .lock is not a regular file", path=str(path),
                              hint="remove it; ctxlake writes its own lock")
    return os.fdopen(fd, "r+")


class Lake:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_lake()

    # -- paths ------------------------------------------------------------------------
    @property
    def tables_dir(self) -> Path:
        return self.root / "tables"

    def table_dir(self, table: str) -> Path:
        return self.tables_dir / table

    @property
    def sources_path(self) -> Path:
        return self.root / "sources.parquet"

    @property
    def runs_path(self) -> Path:
        return self.root / "runs.parquet"

    @property
    def store_dir(self) -> Path:
        return self.root / "store"

    @property
    def summaries_dir(self) -> Path:
        return self.root / "summaries"

    @property
    def derived_dir(self) -> Path:
        return self.root / "derived"

    def write_derived(self, name: str, key: str, table: pa.Table) -> Path:
        """Atomically write ``derived/<name>/<key>.parquet``; the view ``name`` covers all keys.

        Stages that compute tables after ingest (path classes, plans, evictions, calibration,
        policy_eval) store them here; writing the same key again replaces it.
        """
        target = self.derived_dir / name / f"{key}.parquet"
        write_parquet_atomic(table, target)
        return target


    def exists(self) -> bool:
        return self.sources_path.exists()

    def write_parts(self, con, batches: dict[str, pa.Table], name: str, *,
                    only: list[str] | None = None) -> None:
        """Write one Parquet part ``tables/<table>/<name>.parquet`` per table from staged
        Arrow batches, each through its ``sql/select_<table>_part.sql`` (stored columns).

        ``messages`` are registered as ``staged_messages`` and measured by the temp view
        ``messages_part``, which the tool_results part joins for its payload metrics (a view,
        not a table: tool_result rows are measured again, cheaper than a copy of every
        message). ``records`` need no derived column (their select is the identity):
        pyarrow writes their raw text faster than a COPY, with no statistics on ``raw``.
        Each file appears atomically (temp name, then rename). ``only``: these tables."""
        con.register("staged_messages", batches["messages"])
        try:
            con.execute(f"CREATE OR REPLACE TEMP VIEW messages_part AS {sqlfiles.load('select_messages_part')}")
            for table in only or PART_TABLES:
                batch = batches[table]
                target = self.table_dir(table) / f"{name}.parquet"
                private_dirs(target.parent)
                tmp = target.with_name("." + target.name + ".tmp")
                if table == "records":
                    pq.write_table(batch, tmp, compression="zstd", compression_level=1,
                                   use_dictionary=False,
                                   write_statistics=[n for n in batch.column_names if n != "raw"])
                else:
                    if table != "messages":
                        con.register("staged_batch", batch)
                    con.execute(f"COPY ({sqlfiles.load(f'select_{table}_part')}) TO "
                                f"{sqlfiles.literal_path(tmp)} (FORMAT parquet, COMPRESSION zstd, "
                                "COMPRESSION_LEVEL 1, DICTIONARY_SIZE_LIMIT 1)")
                    if table != "messages":
                        con.unregister("staged_batch")
                os.chmod(tmp, FILE_MODE)
                os.replace(tmp, target)
        finally:
            con.execute("DROP VIEW IF EXISTS messages_part")
            con.unregister("staged_messages")

    # -- lifecycle --------------------------------------------------------------------
    def init(self) -> None:
        """Create the folders (private), the lake's marker and zero-row schema files
        (idempotent)."""
        private_dirs(self.root)
        write_marker(self.root, LAKE_MARKER, "a ctxlake lake: never read as a transcript archive\n")
        missing = [t for t in PART_TABLES if not (self.table_dir(t) / "_empty.parquet").exists()]
        if missing:
            con = new_connection()
            try:
                self.write_parts(con, {t: staged_schema(t).empty_table() for t in PART_TABLES},
                                 "_empty", only=missing)
            finally:
                con.close()
        if not self.sources_path.exists():
            write_parquet_atomic(SOURCES.empty_table(), self.sources_path)
        if not self.runs_path.exists():
            write_parquet_atomic(RUNS.empty_table(), self.runs_path)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """One writing run at a time per lake; a second caller gets a clear error.

        Re-entrant within one process, so the nightly run can hold it across every stage
        while each stage also takes it when called on its own."""
        private_dirs(self.root)
        key = os.path.realpath(self.root)
        if _HELD.get(key):
            _HELD[key] += 1
            try:
                yield
            finally:
                _HELD[key] -= 1
            return
        handle = _open_lock(self.root / ".lock")
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip()
                raise LakeLockedError(
                    f"another ctxlake run is using this lake ({holder or 'pid unknown'})",
                    path=str(self.root),
                    hint="wait for it to finish; only one nightly run per lake at a time") from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()}")
            handle.flush()
            _HELD[key] = 1
            try:
                yield
            finally:
                _HELD.pop(key, None)
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

    # -- state ------------------------------------------------------------------------
    def read_sources(self) -> pa.Table:
        if not self.sources_path.exists():
            return SOURCES.empty_table()
        return pq.read_table(self.sources_path)

    def read_runs(self) -> pa.Table:
        if not self.runs_path.exists():
            return RUNS.empty_table()
        return pq.read_table(self.runs_path)

    def committed_run_ids(self) -> set[str]:
        return set(self.read_runs().column("run_id").to_pylist())

    def gc_uncommitted(self) -> int:
        """Delete parts left by runs that never committed (a killed run). Returns the count.

        Committed = named in ``sources.parquet`` (the commit point) or logged in ``runs``."""
        committed = self.committed_run_ids() | set(self.read_sources().column("run_id").to_pylist())
        removed = 0
        if not self.tables_dir.exists():
            return 0
        for table_dir in self.tables_dir.iterdir():
            for part in table_dir.iterdir():
                name = part.name
                if name == "_empty.parquet":
                    continue
                run_id = name.split("-", 1)[0].lstrip(".")
                if name.startswith(".") or run_id not in committed:
                    part.unlink()
                    removed += 1
        return removed

    # -- querying ---------------------------------------------------------------------
    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with the lake's views (created fresh, cheap)."""
        if not self.exists():
            raise LakeNotFoundError("no lake here yet", path=str(self.root),
                                    hint="run `ctxlake ingest PATH` (or `ctxlake demo`) first")
        con = new_connection()
        self.create_views(con)
        return con

    def create_views(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(sqlfiles.render("create_view_sources",
                                    glob=sqlfiles.glob_literal(self.sources_path)))
        con.execute(sqlfiles.render("create_view_runs", glob=sqlfiles.glob_literal(self.runs_path)))
        for table in PART_TABLES:
            name = "_messages_current" if table == "messages" else table
            con.execute(sqlfiles.render(
                "create_view_part_table", name=sqlfiles.ident(name),
                glob=sqlfiles.glob_literal(self.table_dir(table), "*.parquet")))
        # derived tables depend only on their Parquet files: created before the views using them
        if self.derived_dir.exists():
            for folder in sorted(self.derived_dir.iterdir()):
                if folder.is_dir() and any(folder.glob("*.parquet")):
                    con.execute(sqlfiles.render(
                        "create_view_derived", name=sqlfiles.ident(folder.name),
                        glob=sqlfiles.glob_literal(folder, "*.parquet")))
        con.execute(sqlfiles.load("create_view_messages"))
        con.execute(sqlfiles.load("create_view_session_flags_empty"))
        con.execute(sqlfiles.load("create_view_sessions"))
        for view in EXTRA_VIEWS:
            con.execute(sqlfiles.load(view))

    def _views_fingerprint(self) -> str:
        """Hash of everything the persisted views depend on: the SQL files and derived names."""
        digest = hashlib.sha256(str(self.root.resolve()).encode())
        for path in sorted(sqlfiles.sql_dir().rglob("*.sql")):
            digest.update(path.name.encode() + path.read_bytes())
        if self.derived_dir.exists():
            digest.update(",".join(sorted(p.name for p in self.derived_dir.iterdir())).encode())
        return digest.hexdigest()

    def duckdb_file_current(self) -> bool:
        stamp = self.root / ".ctxlake.duckdb.views"
        return (self.root / "ctxlake.duckdb").exists() and stamp.exists() \
            and stamp.read_text() == self._views_fingerprint()

    def write_duckdb_file(self) -> Path:
        """Persist the views into ``ctxlake.duckdb`` for external DuckDB clients."""
        target = self.root / "ctxlake.duckdb"
        tmp = self.root / ".ctxlake.duckdb.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if "?" in os.path.realpath(self.root):
            # DuckDB reads a "?" in a database path as the start of options: build the file in
            # a private temp folder, then copy it into the lake
            with tempfile.TemporaryDirectory(prefix="ctxlake-views-") as folder:
                built = Path(folder) / "ctxlake.duckdb"
                con = new_connection(str(built))
                try:
                    self.create_views(con)
                finally:
                    con.close()
                shutil.copyfile(built, tmp)
        else:
            con = new_connection(str(tmp))
            try:
                self.create_views(con)
            finally:
                con.close()
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
        atomic_write_bytes(self.root / ".ctxlake.duckdb.views", self._views_fingerprint().encode())
        return target
