"""The lake: Parquet parts per table, a sources/runs commit point, DuckDB views from ``sql/``.

Layout under the lake directory (:func:`default_lake`: ``$CTXLAKE_HOME``, else the config's
``lake``, else the per-user data folder ``$XDG_DATA_HOME/ctxlake`` or
``~/.local/share/ctxlake``; always held as an absolute path)::

    tables/<table>/<run_id>-<chunk>-<n>.parquet   rows written by ingest runs
    tables/<table>/_empty.parquet                 zero-row file fixing the schema
    sources.parquet                               one row per archive file (commit point)
    runs.parquet                                  committed runs
    ctxlake.duckdb                                the views, for external DuckDB clients and
                                                  the next processes (Lake.connect)
    .lock                                         one run at a time

A run writes its parts first and commits by atomically replacing ``sources.parquet`` and
``runs.parquet``; parts of a run that never committed are deleted at the next run's start.
Views keep, per source file, only the rows of its current ``generation``.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core import sqlfiles
from pipeline.core.errors import (CorruptPartError, LakeAccessError, LakeDamagedError, LakeLockedError,
                                   LakeNotFoundError, UnsafePathError, UsageError)
from pipeline.core.locations import default_lake, is_url, user_data_dir  # noqa: F401 (re-exported)
from pipeline.core.schema import PART_TABLES, RUNS, SOURCES, staged_schema
from pipeline.core.store import fsync as flush_to_disk

MACROS = ["create_macro_cjk_count", "create_macro_utf16_length", "create_macro_est_tokens_from",
          "create_macro_est_tokens", "create_macro_safe_timestamp", "create_macro_part_rows_current",
          "create_macro_source_state"]
# SQL views created after the core views and the derived tables, in this order (one sql/
# file each). A stage that adds a view appends its file name here (one line).
EXTRA_VIEWS: list[str] = [
    "create_view_tool_paths_empty", "create_view_tool_links",  # correlate (pipeline/stages/correlate.py)
    "create_view_model_prices_empty", "create_macro_usage_call_rows_of",
    "create_view_usage_call_rows_live",
    "create_view_usage_call_rows_fallback", "create_view_usage_call_sources_empty",
    "create_view_usage_call_rows_current", "create_macro_price_regimes", "create_view_usage_calls", "create_view_daily_usage",
    "create_macro_session_counts_of", "create_macro_session_summary_of", "create_view_session_summary",  # summaries and usage reports (pipeline/stages/summarize.py, usage.py)
]


def failed_on_a_file(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from or during) may be one of reading a
    file: an OS error, an Arrow error, a damaged part of the lake, or any DuckDB error (a file
    gone is an ``IOException``; a derived part replaced between DuckDB reading its footer and
    its pages, which it opens again by name, is a bare ``duckdb.Error``: "TProtocolException:
    Invalid data", "don't know what type")."""
    duckdb = sys.modules.get("duckdb")
    kinds: tuple = (OSError, pa.ArrowException, CorruptPartError, LakeDamagedError)
    if duckdb is not None:
        kinds += (duckdb.Error,)
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, kinds):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


class _Views(NamedTuple):
    """A lake's views in this process: what they were made for (:meth:`Lake._views_key`), the
    in-memory database holding them, and whether they are the persisted ``ctxlake.duckdb``
    attached read-only rather than made in memory."""
    key: tuple
    con: "duckdb.DuckDBPyConnection"
    attached: bool


# per lake root
_VIEWS: dict[str, _Views] = {}
_INHERITED: list[_Views] = []    # a forked process's inherited views (forget_inherited_connections)
# per lake root: its layout stamp when this process first queried it (Lake.changed_since_read)
_READ_STAMPS: dict[str, tuple] = {}
# the catalog name of the attached ``ctxlake.duckdb`` (searched after the in-memory one)
PERSISTED_CATALOG = "ctxlake_views"
# the stamp of ``ctxlake.duckdb``: the fingerprint of its views, the DuckDB version and the
# derived tables it has a view of (a JSON list; absent from a stamp of an older version)
VIEWS_STAMP = ".ctxlake.duckdb.views"
# lakes whose lock this process holds (path -> depth): the lock is re-entrant in-process
_HELD: dict[str, int] = {}
# the open lock files behind _HELD (a forked worker lets go of its copies)
_HANDLES: dict[str, object] = {}
# the lock file's last words when its holder finished without an exception (a killed or
# failed holder leaves "pid N" only): the next holder then knows no temporary file was left
CLEAN_EXIT = "finished"
_LEFT_CLEAN: dict[str, bool] = {}
# derived tables written per session are split into this many files by session id
DERIVED_BUCKETS = 16
TEMP_NAME = re.compile(r"^\..+\.tmp$")
# objects told when a process first takes a lake's lock (``acquired(lake)``) and finally lets
# it go (``released(lake, finished)``): an object-store lake's lease and push
# (pipeline/core/remote.py)
LOCK_HOOKS: list = []


def detach_forked_worker(*, under_parent_lock: bool = False) -> None:
    """Initializer of a forked worker process: let go of the lake locks inherited from the
    parent and die with it.

    A forked child shares the parent's lock file description, so a worker outliving a killed
    parent would hold the lake's lock for ever (or for the moment it takes to die: long
    enough for the next run to find the lake busy). Its copies are pointed at /dev/null (the
    lock stays the parent's alone), and on Linux the kernel kills the worker when the parent
    dies. ``under_parent_lock``: the process works under its parent's lock (the nightly
    side lane), so its stages' re-entrant ``Lake.lock()`` still passes."""
    for handle in _HANDLES.values():
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, handle.fileno())
            os.close(null)
    if not under_parent_lock:
        _HELD.clear()
        _HANDLES.clear()
    die_with_parent()


def forget_inherited_connections() -> None:
    """In a forked process that goes on to use DuckDB: set aside the lake views' connections
    it inherited (its own are made anew). They are kept referenced, never used or closed:
    closing one, or letting it be collected, waits for ever on the parent's DuckDB threads,
    which a fork does not copy."""
    _INHERITED.extend(_VIEWS.values())
    _VIEWS.clear()


def die_with_parent() -> None:
    """In a forked process: have the kernel kill it when its parent dies (Linux), and exit
    at once if the parent already has."""
    parent = os.getppid()
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    if os.getppid() != parent:          # the parent died before the prctl took effect
        os._exit(1)


def session_bucket(session_id: str | None) -> int:
    """The derived-table file (0..DERIVED_BUCKETS-1) that holds a session's rows."""
    digest = hashlib.blake2b((session_id or "").encode("utf-8", "surrogatepass"), digest_size=4)
    return int.from_bytes(digest.digest(), "big") % DERIVED_BUCKETS


def part_run_id(path: str | Path) -> str:
    """The ingest run that wrote a part file (``<run id>-<chunk>-<n>.parquet``), as
    ``part_rows_current`` reads it from the file name."""
    return os.path.basename(path).split("-", 1)[0]


def bucket_file(folder: Path, key: str, bucket: int) -> Path:
    """The file of a derived table stored per session bucket (:meth:`Lake.write_session_rows`)
    that holds the rows of bucket ``bucket`` (:func:`session_bucket`) under ``key``."""
    return folder / f"{key}.b{bucket:02d}.parquet"


def holds_lake_lock(stage):
    """Decorator: run a stage ``stage(lake, ...)`` that writes to the lake under its lock
    (re-entrant, so the nightly run holding it already is unaffected)."""
    @functools.wraps(stage)
    def locked(lake: "Lake", *args, **kwargs):
        lake.require()
        with lake.lock():
            return stage(lake, *args, **kwargs)
    return locked


def notebook_lake(start: str | Path | None = None) -> Path:
    """The lake a notebook reads: ``$CTXLAKE_HOME``; else the ``make demo`` lake
    (``data/lake`` of the checkout holding ``start``, default the current folder, found by
    walking up, as Jupyter starts in ``notebooks/``); else :func:`default_lake`."""
    if os.environ.get("CTXLAKE_HOME"):
        return default_lake()
    here = Path(os.path.abspath(start or os.getcwd()))
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "data" / "lake" / "sources.parquet").is_file():
            return folder / "data" / "lake"
    return default_lake()


# marker files: a folder holding one is ctxlake's own and is never read back as an archive
LAKE_MARKER = ".ctxlake-lake"
OUTPUT_MARKER = ".ctxlake-output"
HTML_MARKER = ".ctxlake-html"
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


def path_within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or below it (resolved paths, compared as text)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_output_folder(lake_root: Path, out: Path, target: Path, *,
                        archives: Iterable[str | Path] = (), sources: Iterable[str] = ()) -> None:
    """Refuse an output folder ``out`` (its policy's folder: ``target``) that ctxlake must not
    write or delete in. :class:`UnsafePathError`: ``out``, or a folder from it down to
    ``target``, is a symlink. :class:`UsageError`: it would mix the outputs with what ctxlake
    reads or keeps: a folder of the lake other than ``<lake>/out`` (its tables would be taken
    for outputs), a target holding the lake, a target inside or holding a folder of an archive
    being read (``archives``: the paths given to ``run``, a file's folder counting; URLs
    skipped; not checked under ``<lake>/out``, the lake's own), or a target holding a known
    source file (``sources``: real paths). Paths are compared resolved."""
    out = Path(out)
    if out.is_symlink():
        raise UnsafePathError("the output folder is a symlink", path=str(out),
                              hint="give --out a real folder (ctxlake never writes or deletes through a symlink)")
    refuse_symlinks(out, target, what="output folder")
    real_out, real_target = os.path.realpath(out), os.path.realpath(target)
    real_lake = os.path.realpath(lake_root)
    own = path_within(real_out, os.path.join(real_lake, "out"))
    if (path_within(real_out, real_lake) and not own) or path_within(real_lake, real_target):
        raise UsageError("the output folder overlaps the lake", path=str(out),
                         hint=f"give --out a folder outside {lake_root} (default: {Path(lake_root) / 'out'})")
    for archive in () if own else archives:
        if is_url(archive) or not os.path.lexists(archive):   # a missing one: ingest says so
            continue
        folder = Path(archive) if Path(archive).is_dir() else Path(archive).parent
        real = os.path.realpath(folder)
        if path_within(real_target, real) or path_within(real, real_target):
            raise UsageError("the output folder overlaps the archive being read", path=str(out),
                             hint=f"give --out a folder outside {archive}: ctxlake never writes "
                                  "among the transcripts it reads")
    for source in sources:
        if path_within(source, real_target):
            raise UsageError("the output folder holds a source transcript of the lake", path=str(out),
                             hint=f"{source} would be overwritten; give --out another folder")


def claim_folder(folder: Path, marker: str, *, what: str, owned: Iterable[str] = ()) -> None:
    """Refuse (:class:`UsageError`) to take over ``folder`` for ``what`` when it already holds
    files and is not ctxlake's: it has no ``marker`` and lacks one of the files ``owned`` (the
    files every earlier version wrote there). ctxlake replaces and removes files in its folders,
    so a folder of the user's is never one of them. An empty or new folder is taken."""
    folder = Path(folder)
    if not folder.is_dir() or os.path.lexists(folder / marker):
        return
    with os.scandir(folder) as entries:
        names = {entry.name for entry in entries}
    owned = set(owned)
    if names and not (owned and owned <= names):
        raise UsageError(f"the {what} folder already holds files that ctxlake did not write",
                         path=str(folder),
                         hint="give a new or empty folder: ctxlake replaces and removes files in it")


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


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = FILE_MODE, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` via a temp file, fsync and rename (never half a file);
    private (0600) by default, whatever the umask.

    ``fsync=False``: the caller flushes the filesystem once for a whole batch of files
    (:func:`pipeline.core.store.sync_files`) before it records them as done."""
    private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if fsync:
                flush_to_disk(handle.fileno())
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


_READ_CACHE: dict[tuple, tuple[tuple[int, int, int], pa.Table]] = {}


def read_parquet_cached(path: Path, empty: pa.Schema, *,
                        columns: tuple[str, ...] | None = None) -> pa.Table:
    """A small Parquet file of the lake's own bookkeeping (``columns`` of it, default all),
    read once per version of the file (its inode, size and mtime): the nightly job's stages
    ask for it many times. Columns of a version already read whole are taken from it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return empty.empty_table() if columns is None else empty.empty_table().select(list(columns))
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _READ_CACHE.get((str(path), columns))
    if cached is not None and cached[0] == key:
        return cached[1]
    whole = _READ_CACHE.get((str(path), None))
    if columns is not None and whole is not None and whole[0] == key:
        table = whole[1]     # this version is read whole already
    else:
        # ParquetFile, not read_table: the dataset layer read_table goes through costs a
        # night with nothing new ~70 ms of imports, for one file
        with pq.ParquetFile(path) as handle:
            table = handle.read(columns=None if columns is None else list(columns))
    if columns is not None:
        # in the order asked (callers take them by position), and a column the file lacks
        # is a KeyError naming it (ParquetFile.read leaves it out without a word)
        table = table.select(list(columns))
    _READ_CACHE[(str(path), columns)] = (key, table)
    return table


# lakes (root, sources.parquet's inode, size and mtime) found intact in this process
_INTACT: set[tuple] = set()


def _whole_parquet(path: Path) -> bool:
    """Whether ``path`` has Parquet's magic at both ends and a footer that fits in it."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
            size = handle.seek(0, os.SEEK_END)
            if size < 12:
                return False
            handle.seek(size - 8)
            tail = handle.read(8)
    except OSError:
        return False
    footer = int.from_bytes(tail[:4], "little")
    return head == b"PAR1" and tail[4:] == b"PAR1" and footer + 12 <= size


def _damaged_part(path: Path, reason: str) -> CorruptPartError:
    """The error of a derived part that cannot be read, naming it and what repairs it."""
    return CorruptPartError(f"cannot read this part of a derived table: {reason}", path=str(path),
                            hint="the next `ctxlake run` removes it and recomputes the derived tables")


def read_parquet(path: Path, *, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file (``columns`` of it, in that order; a column it lacks is a KeyError)
    through ``ParquetFile``, not ``pq.read_table``: the dataset layer costs a small file
    about twice its read (a night reads some 80 derived parts)."""
    with pq.ParquetFile(path) as handle:
        table = handle.read(columns=columns)
    return table if columns is None else table.select(list(columns))


def read_derived_part(path: Path, *, columns: list[str] | None = None) -> pa.Table:
    """One Parquet part of a derived table (``columns`` of it: a column a later version added
    may be absent from an older part). A part that cannot be read is a
    :class:`CorruptPartError` naming it."""
    try:
        if columns is None:
            return read_parquet(path)
        with pq.ParquetFile(path) as stored:
            return stored.read(columns=[c for c in columns if c in stored.schema_arrow.names])
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as error:
        raise _damaged_part(path, str(error)) from None


def glob_escape(text: str) -> str:
    """``text`` with the glob characters of pathlib's patterns taken literally."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A stored table in ``schema``'s column order and types (a Parquet round trip renames
    list items; a column a later version added is NULL in older files)."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            column = table.column(field.name)
            # a cast only where needed (casting imports pyarrow.compute, ~50 ms); compared as
            # text, which names a list's item field (type equality does not): a type that
            # differs only in such names is the same memory, viewed as the schema's type
            if str(column.type) != str(field.type):
                column = pa.chunked_array([chunk.view(field.type) for chunk in column.chunks],
                                          field.type) if column.type == field.type \
                    else column.cast(field.type)
            columns.append(column)
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def rows_of_sessions(table: pa.Table, sessions: Iterable[str], *, keep: bool = True) -> pa.Table:
    """The rows of ``table`` whose ``session_id`` is in ``sessions`` (``keep=False``: the
    others, rows without a session included)."""
    import pyarrow.compute as pc   # imported on use: a night with nothing new never needs it

    mask = pc.is_in(table.column("session_id"), value_set=pa.array(sorted(sessions), pa.string()))
    return table.filter(mask if keep else pc.fill_null(pc.invert(mask), True))


def _rows_not_of(table: pa.Table, sessions: set[str], schema: pa.Schema) -> pa.Table:
    return rows_of_sessions(conform_table(table, schema), sessions, keep=False)


@functools.lru_cache(maxsize=1)
def _sql_digest() -> bytes:
    """sha256 of every file of ``sql/`` (name and bytes): part of what the persisted views of
    a lake depend on (read once per process)."""
    digest = hashlib.sha256()
    for path in sorted(sqlfiles.sql_dir().rglob("*.sql")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.digest()


def new_connection(database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection in UTC with the token macros of ``sql/`` (in memory by default)."""
    import duckdb   # imported on first use: a run with nothing to do never needs it

    con = duckdb.connect(database)
    con.execute("SET TimeZone = 'UTC'")
    # jemalloc (DuckDB's allocator on Linux) keeps freed pages until a foreground purge:
    # a night's big queries (calibrate's window over every message) left ~0.7 GB held into
    # the next stage. Its background threads purge them as they go, at no measured cost.
    con.execute("SET allocator_background_threads = true")
    for name in MACROS:
        con.execute(sqlfiles.load(name))
    return con


def _not_writable(root: Path, error: OSError) -> LakeAccessError:
    return LakeAccessError(f"the lake cannot be written by this user: {error.strerror or error}",
                           path=str(root),
                           hint="run as the user who owns it (see `ls -ld` of the folder), or "
                                "choose another lake with --lake; reading commands still work")


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
        raise _not_writable(path.parent, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LakeLockedError("the lake's .lock is not a regular file", path=str(path),
                              hint="remove it; ctxlake writes its own lock")
    return os.fdopen(fd, "r+")


class Lake:
    def __init__(self, root: str | Path | None = None):
        # absolute: the views persisted in ctxlake.duckdb name their Parquet globs by it, so
        # any DuckDB client opens them from any folder
        self.root = Path(os.path.abspath(os.path.expanduser(str(root)))) if root is not None \
            else default_lake()

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
        for bucket in target.parent.glob(f"{glob_escape(key)}.b[0-9][0-9].parquet"):
            bucket.unlink()
        return target

    def write_session_rows(self, name: str, key: str, table: pa.Table,
                           sessions: Iterable[str] | None, *, sort_by: list[str]) -> int:
        """Replace the rows of ``sessions`` (None: of every session) in the derived table
        ``name``, stored per session bucket as ``derived/<name>/<key>.b<NN>.parquet``.

        ``table`` holds the new rows of exactly those sessions (a session with no rows now
        loses its old ones). Only the buckets those sessions fall in are rewritten, each
        atomically and sorted by ``sort_by``, so one changed session rewrites 1/16 of the
        table and the bytes do not depend on the order work was done in. Returns the number
        of files written."""
        import pyarrow.compute as pc

        folder = self.derived_dir / name
        private_dirs(folder)
        legacy = folder / f"{key}.parquet"
        if sessions is None:
            buckets = set(range(DERIVED_BUCKETS))
            wanted = None
        else:
            wanted = set(sessions)
            buckets = {session_bucket(s) for s in wanted}
            if legacy.exists():          # a whole-table file: every bucket is rewritten from it
                table = pa.concat_tables([_rows_not_of(read_derived_part(legacy), wanted,
                                                       table.schema), table])
                buckets = set(range(DERIVED_BUCKETS))
                wanted = None
        of_row = [session_bucket(s) for s in table.column("session_id").to_pylist()]
        by_bucket = pa.array(of_row, pa.int32())
        for bucket in sorted(buckets):
            path = bucket_file(folder, key, bucket)
            new = table.filter(pc.equal(by_bucket, bucket))
            if wanted is not None and path.exists():
                new = pa.concat_tables([_rows_not_of(read_derived_part(path), wanted, table.schema),
                                        new])
            write_parquet_atomic(new.sort_by([(c, "ascending") for c in sort_by])
                                 .combine_chunks(), path)
        with contextlib.suppress(FileNotFoundError):
            legacy.unlink()
        return len(buckets)

    def read_session_rows(self, name: str, key: str, schema: pa.Schema,
                          sessions: Iterable[str]) -> pa.Table:
        """The rows of ``sessions`` in the derived table ``name`` stored per session bucket
        (:meth:`write_session_rows`): only the files of their buckets are read (one changed
        session: 1/16 of the table), rows in file order."""
        wanted = set(sessions)
        tables = [conform_table(read_derived_part(p), schema)
                  for p in self._derived_files(name, key, wanted)]
        return rows_of_sessions(pa.concat_tables(tables) if tables else schema.empty_table(), wanted)

    def _derived_files(self, name: str, key: str, sessions: set[str] | None = None) -> list[Path]:
        """The files holding derived table ``name`` under ``key``: a whole-table file when
        there is one (a lake written before the table was kept per bucket), else its bucket
        files (of ``sessions``' buckets only, when given), in bucket order."""
        folder = self.derived_dir / name
        whole = folder / f"{key}.parquet"
        if whole.exists():
            return [whole]
        if sessions is None:
            return sorted(folder.glob(f"{glob_escape(key)}.b[0-9][0-9].parquet"))
        paths = [bucket_file(folder, key, b) for b in sorted({session_bucket(s) for s in sessions})]
        return [path for path in paths if path.exists()]

    def broken_derived_parts(self) -> list[Path]:
        """The Parquet files of derived tables that are not whole Parquet files (cut short,
        overwritten: no ``PAR1`` at both ends, or a footer longer than the file), by a few
        bytes read from each (~10 ms for a few hundred parts): ctxlake writes every part
        atomically, so one of these was damaged after it was written."""
        broken = []
        if not self.derived_dir.is_dir():
            return broken
        for folder in sorted(self.derived_dir.iterdir()):
            if folder.is_symlink() or not folder.is_dir():
                continue
            for path in sorted(folder.glob("*.parquet")):
                if not path.is_symlink() and path.is_file() and not _whole_parquet(path):
                    broken.append(path)
        return broken

    def remove_derived_part(self, path: str | Path) -> bool:
        """Delete ``path`` when it is a regular file (not a symlink) of a derived table's
        folder of this lake (nothing else is ever removed this way). Whether it was."""
        path = Path(path)
        derived = os.path.realpath(self.derived_dir)
        if path.is_symlink() or not path.is_file() or path.suffix != ".parquet" \
                or os.path.dirname(os.path.dirname(os.path.realpath(path))) != derived:
            return False
        path.unlink()
        return True

    def read_derived(self, name: str, key: str, schema: pa.Schema | None, *,
                     columns: list[str] | None = None) -> pa.Table:
        """Every row of derived table ``name`` under ``key`` (whole file or buckets);
        ``columns``: only these of ``schema``. ``schema`` None: the files' own columns (a
        table whose schema the caller does not hold; no file: a table of no columns)."""
        paths = self._derived_files(name, key)
        if schema is None:
            tables = [read_derived_part(p, columns=columns) for p in paths]
            return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
        if columns is not None:
            schema = pa.schema([schema.field(column) for column in columns])
        tables = [conform_table(read_derived_part(p, columns=columns), schema) for p in paths]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def exists(self) -> bool:
        """Whether the lake has been made (its ``sources.parquet``); a folder that holds table
        parts without it is a damaged lake, not a new one (:class:`LakeDamagedError`)."""
        if self.sources_path.exists():
            return True
        if self._table_parts():
            raise self._damaged(["sources.parquet is missing, but tables/ holds parts of "
                                 "ingested files"])
        return False

    def require(self) -> None:
        """Raise :class:`LakeNotFoundError` (or :class:`LakeDamagedError`) unless the lake exists."""
        if not self.exists():
            raise LakeNotFoundError("no lake here yet", path=str(self.root),
                                    hint="run `ctxlake run PATH` (or `ctxlake demo`) first")

    def _table_parts(self) -> list[Path]:
        """The part files of the tables read from the archive (not their ``_empty`` files)."""
        return sorted(self.part_files().values())

    def part_files(self) -> dict[str, Path]:
        """Each part file of the tables by its name in ``sources.parts``
        (``<table>/<part>``): one listing per table folder."""
        found = {}
        for table in PART_TABLES:
            try:
                with os.scandir(self.table_dir(table)) as entries:
                    found.update((f"{table}/{e.name[:-len('.parquet')]}", Path(e.path))
                                 for e in entries if e.name.endswith(".parquet")
                                 and not e.name.startswith(("_", ".")))
            except (FileNotFoundError, NotADirectoryError):
                continue
        return found

    def part_set_bytes(self) -> dict[str, int]:
        """The size of each part set: the files one chunk of a run wrote, one per table, all
        named ``<run id>-<chunk>-<n>``, their bytes summed over the tables (a stat per part)."""
        sizes: dict[str, int] = {}
        for name, path in self.part_files().items():
            with contextlib.suppress(FileNotFoundError):
                part = name.partition("/")[2]
                sizes[part] = sizes.get(part, 0) + os.stat(path).st_size
        return sizes

    def damage(self) -> list[str]:
        """What makes this lake unreadable, in words (empty when intact): its bookkeeping
        files or a part of its tables missing their Parquet magic or footer (a few bytes read
        from each, ~10 ms for a few hundred parts). A part deleted outright is not seen here:
        ingest reads its files again (``sources.parts``, :meth:`lost_parts`)."""
        found = []
        if not self.sources_path.exists():
            return ["sources.parquet is missing, but tables/ holds parts of ingested files"] \
                if self._table_parts() else []
        for path in [self.sources_path, self.runs_path, *self._table_parts()]:
            if path.exists() and not _whole_parquet(path):
                found.append(f"{path.relative_to(self.root)} is not a whole Parquet file "
                             "(cut short or overwritten)")
        return found

    def lost_parts(self) -> set[str]:
        """The part files (``<table>/<part name>``) that ``sources.parts`` names and
        ``tables/`` no longer holds (deleted by hand, lost with a disk): their rows are missing
        from the views until the next ingest reads their files again."""
        named = self._named_parts()
        if not named:
            return set()
        lost = named - set(self.part_files())
        if lost:   # a name in the file's dictionary that no row points at is not lost
            column = self.read_sources(("parts",)).column(0)
            lost &= {name for parts in column.to_pylist() if parts for name in parts}
        return lost

    def _named_parts(self) -> set[str]:
        """Every part name ``sources.parts`` lists, read as the column's dictionary (a few
        hundred names, not one string per file and part: ~1 ms on a 1 GB archive's lake, not
        ~10; not pyarrow.compute, ~0.1 s to import on a night with nothing new)."""
        if not self.sources_path.exists():
            return set()
        try:
            with pq.ParquetFile(self.sources_path, read_dictionary=["parts.list.element"]) as handle:
                column = handle.read(columns=["parts"]).column(0)
        except KeyError:     # a lake made before sources listed their parts
            return set()
        except (OSError, pa.ArrowException) as error:
            raise self._unreadable("sources.parquet", error) from None
        return {name for chunk in column.chunks
                for name in chunk.values.dictionary.to_pylist()} - {None}

    def check_intact(self) -> None:
        """Raise :class:`LakeDamagedError` when :meth:`damage` finds something (checked once
        per state of the lake's sources file in a process)."""
        try:
            st = os.stat(self.sources_path)
            key = (str(self.root), st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            key = None
        if key is not None and key in _INTACT:
            return
        problems = self.damage()
        if problems:
            raise self._damaged(problems)
        if key is not None:
            _INTACT.add(key)

    def _unreadable(self, name: str, error: Exception) -> "LakeDamagedError":
        """The error of a bookkeeping file (``name``) that cannot be read: the damage found,
        else the reader's own words."""
        return self._damaged(self.damage() or [f"{name} cannot be read ({error})"])

    def _damaged(self, problems: list[str]) -> "LakeDamagedError":
        return LakeDamagedError(
            "the lake is damaged: " + "; ".join(problems[:3])
            + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""),
            path=str(self.root),
            hint="restore the lake from a backup, or rebuild it: move the folder aside and run "
                 "`ctxlake run` again (the archive is never modified; outputs are made anew)")

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
            con.execute(sqlfiles.render("create_view_messages_part",
                                        select=sqlfiles.load("select_messages_part")))
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
                    con.execute(sqlfiles.render("copy_part_parquet", path=sqlfiles.literal_path(tmp),
                                                select=sqlfiles.load(f"select_{table}_part")))
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
        (idempotent). A damaged lake is refused (:meth:`check_intact`), never made anew over
        its own rows."""
        self.exists()
        self.check_intact()
        private_dirs(self.root)
        write_marker(self.root, LAKE_MARKER, "a ctxlake lake: never read as a transcript archive\n")
        missing = [t for t in PART_TABLES if not (self.table_dir(t) / "_empty.parquet").exists()]
        if missing:
            with new_connection() as con:
                self.write_parts(con, {t: staged_schema(t).empty_table() for t in PART_TABLES},
                                 "_empty", only=missing)
        if not self.sources_path.exists():
            write_parquet_atomic(SOURCES.empty_table(), self.sources_path)
        if not self.runs_path.exists():
            write_parquet_atomic(RUNS.empty_table(), self.runs_path)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """One writing run at a time per lake; a second caller gets a clear error.

        Re-entrant within one process, so the nightly run can hold it across every stage
        while each stage also takes it when called on its own."""
        try:
            private_dirs(self.root)
        except PermissionError as error:
            raise _not_writable(self.root, error) from None
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
            _LEFT_CLEAN[key] = handle.read().rstrip().endswith(CLEAN_EXIT)
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()}")
            handle.flush()
            _HELD[key] = 1
            _HANDLES[key] = handle
            finished = False
            hooked = []
            try:
                for hook in list(LOCK_HOOKS):
                    hook.acquired(self)
                    hooked.append(hook)
                yield
                finished = True
            finally:
                _HELD.pop(key, None)
                _HANDLES.pop(key, None)
                try:
                    for hook in reversed(hooked):
                        hook.released(self, finished)
                except BaseException:
                    finished = False
                    raise
                finally:
                    if finished:   # no exception, not killed: it left no temporary file behind
                        with contextlib.suppress(OSError):
                            handle.seek(0)
                            handle.truncate()
                            handle.write(f"pid {os.getpid()} {CLEAN_EXIT}")
                            handle.flush()
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

    # -- state ------------------------------------------------------------------------
    def read_sources(self, columns: tuple[str, ...] | None = None) -> pa.Table:
        """``sources.parquet`` (``columns`` of it, default all; read again only when the file
        changed: every stage asks). A night with nothing new reads the few columns it
        compares, not the readers' states and digests (most of the file's bytes)."""
        names = list(columns or SOURCES.names)
        try:
            try:
                table = read_parquet_cached(self.sources_path, SOURCES, columns=columns)
            except KeyError:
                table = read_parquet_cached(self.sources_path, SOURCES)
            if table.column_names != names:   # a lake made before a column was kept: nulls
                table = pa.table({name: table.column(name) if name in table.column_names
                                  else pa.nulls(table.num_rows, SOURCES.field(name).type)
                                  for name in names})
            return table
        except (OSError, pa.ArrowException) as error:
            raise self._unreadable("sources.parquet", error) from None

    def read_runs(self) -> pa.Table:
        """The run log (an older lake's rows, which were all committed ingest runs, get the
        columns added since)."""
        if not self.runs_path.exists():
            return RUNS.empty_table()
        try:
            table = read_parquet_cached(self.runs_path, RUNS)
        except (OSError, pa.ArrowException) as error:
            raise self._unreadable("runs.parquet", error) from None
        if "ingest_committed" in table.column_names:
            return conform_table(table, RUNS)
        n = table.num_rows
        table = conform_table(table, RUNS)
        for name, value, kind in (("command", "ingest", pa.string()), ("status", "ok", pa.string()),
                                  ("ingest_committed", True, pa.bool_())):
            table = table.set_column(table.schema.get_field_index(name), name,
                                     pa.array([value] * n, kind))
        return table

    def record_run(self, run: dict) -> None:
        """Insert or update (by ``run_id``) one row of the run log, atomically."""
        log = self.read_runs().to_pylist()
        rows = [r for r in log if r["run_id"] != run["run_id"]]
        previous = next((r for r in log if r["run_id"] == run["run_id"]), {})
        rows.append({**previous, **run})
        rows.sort(key=lambda r: (r["started_at"] is None, r["started_at"], r["run_id"]))
        write_parquet_atomic(pa.Table.from_pylist(rows, schema=RUNS), self.runs_path)

    def mark_interrupted(self) -> list[str]:
        """Runs logged as running when nobody holds the lock were killed: log them as
        interrupted (called under the lock). Returns their ids."""
        runs = self.read_runs()
        stale = [r for r in runs.to_pylist() if r["status"] == "running"]
        for run in stale:
            self.record_run({**run, "status": "interrupted"})
        return [r["run_id"] for r in stale]

    def committed_run_ids(self) -> set[str]:
        """The ingest runs whose parts the views show: named in ``sources.parquet`` (the
        commit point) or logged in ``runs`` as committed (``sql/create_view_committed_runs.sql``
        in Python; a part's run is :func:`part_run_id`)."""
        runs = self.read_runs()
        logged = {run_id for run_id, committed in zip(runs.column("run_id").to_pylist(),
                                                      runs.column("ingest_committed").to_pylist())
                  if committed}
        return logged | set(self.read_sources(("run_id",)).column(0).to_pylist())

    def gc_uncommitted(self) -> int:
        """Delete parts left by runs that never committed (a killed run). Returns the count.

        Committed: :meth:`committed_run_ids`."""
        committed = self.committed_run_ids()
        removed = 0
        removed += self.remove_temps()
        if not self.tables_dir.exists():
            return removed
        for table_dir in self.tables_dir.iterdir():
            for part in table_dir.iterdir():
                name = part.name
                if name == "_empty.parquet":
                    continue
                if name.startswith(".") or part_run_id(name) not in committed:
                    part.unlink()
                    removed += 1
        return removed

    def collect_dead_parts(self) -> int:
        """Delete the committed parts that hold no current row any more (every source whose
        rows they hold was read again under a new generation, or left the lake): the views
        never show their rows, yet every query over a table read their footers, and a lake
        read every night would keep one more set of them each night. Returns the count.

        A part is a candidate when no source's ``parts`` names it (one listing per table
        folder: a night with nothing superseded stops there), and is deleted only when
        reading its ``source_id`` and ``generation`` finds no row of a current source
        generation, the test the views apply (``part_rows_current``): a part the bookkeeping
        forgot to name is kept. A lake with a source whose parts are unknown (made before
        ``parts`` was kept) is left as it is. Called by every ingest (a nightly run's
        included) under the lake's lock, after :meth:`gc_uncommitted` (an uncommitted part
        is never a candidate here)."""
        named = self._named_parts()
        if not named:
            return 0
        candidates = [path for name, path in sorted(self.part_files().items()) if name not in named]
        if not candidates:
            return 0
        sources = self.read_sources(("source_id", "generation", "parts"))
        if sources.column("parts").null_count:
            return 0
        current = set(zip(sources.column("source_id").to_pylist(),
                          sources.column("generation").to_pylist()))
        removed = 0
        for path in candidates:
            try:
                held = read_parquet(path, columns=["source_id", "generation"]) \
                    .group_by(["source_id", "generation"]).aggregate([])
            except (OSError, pa.ArrowException, KeyError):
                continue          # not ours to judge: damage() and verify say what it is
            if any(key in current for key in zip(held.column("source_id").to_pylist(),
                                                 held.column("generation").to_pylist())):
                continue
            with contextlib.suppress(FileNotFoundError):
                if path.is_file() and not path.is_symlink():
                    path.unlink()
                    removed += 1
        return removed

    def left_clean(self) -> bool:
        """Whether the lock's previous holder finished without an exception (called under
        the lock). A lake made before this was recorded counts as not clean."""
        return _LEFT_CLEAN.get(os.path.realpath(self.root), False)

    def remove_temps(self) -> int:
        """Delete the temporary files (``.<name>.<random>.tmp``) a killed run left anywhere in
        the lake (the payload store and output folders collect their own). Returns the count.

        When the lock's previous holder finished cleanly, only the folders other processes
        write into (tables, derived: a Ray task retried after a kill) are looked at, not the
        thousands of summaries: a night with nothing new does not walk the whole lake."""
        removed = 0
        skip = {self.store_dir, self.root / "out"}
        if self.left_clean():
            skip |= {self.summaries_dir}
        for dirpath, dirnames, names in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if Path(dirpath, d) not in skip]
            for name in names:
                if TEMP_NAME.match(name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(dirpath, name))
                        removed += 1
        return removed

    # -- querying ---------------------------------------------------------------------
    def connect(self, *, scope: Iterable[str] | None = None,
                within: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with the lake's views: a cursor of one in-memory database per
        lake and process. Its views are, when ``ctxlake.duckdb`` is current (the last run
        wrote it for these SQL files and derived tables), that file's, attached read-only
        (opening it binds nothing: ~0.05 s); else made in memory once (binding them reads
        every part's schema: ~0.5 s on a large lake), extended when a derived table appears.
        Names resolve in memory first (temp, then ``memory.main``), then in the attached
        file; a view of the file resolves the names it uses in the file, except temp views,
        which override them as they do in memory. Temp views, temp tables and registered
        Arrow tables stay the cursor's own.

        ``scope`` (session ids; None: the whole lake): the part tables read only the files
        holding these sessions' family (:mod:`pipeline.core.scope`), for queries of these
        sessions alone, never for one over the whole lake; ``within``: a cursor of this lake
        already open, whose database the scoped cursor shares."""
        if scope is not None:
            from pipeline.core.scope import connect_scoped
            return connect_scoped(self, scope, within=within)
        self.require()
        self.begin_reading()
        self.check_intact()
        self._migrate_runs()
        key = self._views_key()
        cached = _VIEWS.get(str(self.root))
        if cached is not None and cached.key != key and not cached.attached \
                and self._add_derived_views(cached.con, cached.key, key):
            _VIEWS[str(self.root)] = cached = cached._replace(key=key)
        if cached is None or cached.key != key:
            base = self._attach_persisted_views(key)
            attached = base is not None
            if base is None:
                base = new_connection()
                self.create_views(base)
            if cached is not None:
                cached.con.close()
            _VIEWS[str(self.root)] = cached = _Views(key, base, attached)
        con = cached.con.cursor()
        con.execute("SET TimeZone = 'UTC'")
        if cached.attached:
            con.execute(f"SET search_path = 'memory.main,{PERSISTED_CATALOG}.main'")
        return con

    def layout_stamp(self) -> tuple:
        """What changes whenever a run adds, replaces or deletes a file the views read: the
        modification times of ``sources.parquet``, ``ctxlake.duckdb`` and of every folder of
        ``tables/`` and ``derived/`` (a rename or unlink in a folder changes its time).
        About 20 ``stat`` calls."""
        stamp = []
        for path in (self.sources_path, self.root / "ctxlake.duckdb"):
            with contextlib.suppress(OSError):
                stamp.append((path.name, path.stat().st_mtime_ns))
        for folder in (self.tables_dir, self.derived_dir):
            with contextlib.suppress(OSError):
                for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
                    with contextlib.suppress(OSError):
                        stamp.append((entry.path, entry.stat(follow_symlinks=False).st_mtime_ns))
        return tuple(stamp)

    def begin_reading(self) -> None:
        """Note the lake's layout (:meth:`layout_stamp`) the first time this process queries
        it (:meth:`connect`, which every query of the views goes through)."""
        if str(self.root) not in _READ_STAMPS:
            _READ_STAMPS[str(self.root)] = self.layout_stamp()

    def changed_since_read(self) -> bool:
        """Whether a run changed the files the views read since this process began reading
        the lake (:meth:`begin_reading`): a query of a reader that failed on a part then may have
        met a part the run deleted or replaced between listing and reading it, and is right
        to try again (:meth:`forget_reads` first). False when it never queried the lake."""
        stamp = _READ_STAMPS.get(str(self.root))
        return stamp is not None and stamp != self.layout_stamp()

    def forget_reads(self) -> None:
        """Drop what this process kept of its queries of the lake (the views' database, the
        stamp of :meth:`changed_since_read`): the next :meth:`connect` starts afresh."""
        _READ_STAMPS.pop(str(self.root), None)
        views = _VIEWS.pop(str(self.root), None)
        if views is not None:
            with contextlib.suppress(Exception):
                views.con.close()

    def _attach_persisted_views(self, key: tuple) -> "duckdb.DuckDBPyConnection | None":
        """An in-memory database with ``ctxlake.duckdb`` attached read-only when that file
        holds the views of ``key`` (None otherwise, or when it cannot be opened: the views
        are then made in memory)."""
        import duckdb

        path = self.root / "ctxlake.duckdb"
        if "?" in os.path.realpath(path) or not self.duckdb_file_current(key[1]):
            return None
        con = new_connection()
        try:
            con.execute(f"ATTACH {sqlfiles.literal_path(path)} AS {PERSISTED_CATALOG} (READ_ONLY)")
        except duckdb.Error:
            con.close()
            return None
        return con

    def _migrate_runs(self) -> None:
        """A lake made before the run log had its state columns: rewrite ``runs.parquet`` in
        today's layout (its rows were all committed ingest runs) so the views can read it."""
        try:
            names = pq.read_schema(self.runs_path).names
        except (FileNotFoundError, OSError, pa.ArrowInvalid):
            return
        if "ingest_committed" not in names:
            write_parquet_atomic(self.read_runs(), self.runs_path)

    def _views_key(self) -> tuple:
        """What the set of views depends on: the derived tables present (a view over a glob
        finds new files by itself at each query)."""
        return (os.getpid(), self._derived_names())

    def _derived_names(self) -> tuple[str, ...]:
        """The derived tables that have a view: folders of ``derived/`` holding Parquet."""
        if not self.derived_dir.exists():
            return ()
        return tuple(sorted(p.name for p in self.derived_dir.iterdir()
                            if p.is_dir() and any(p.glob("*.parquet"))))

    def _add_derived_views(self, con: duckdb.DuckDBPyConnection, old: tuple, new: tuple) -> bool:
        """Extend views made for key ``old`` to key ``new`` when ``new`` only adds derived
        tables: a view over each new table's files, replacing its typed placeholder, and
        nothing else. The views above it find it by name at each query, so they are not
        bound again (binding them is most of :meth:`create_views`, ~0.3 s, paid once per
        stage of a first run otherwise). False (make them all again) when the key changed
        otherwise or a new table's columns differ from its placeholder's."""
        if old[0] != new[0] or not set(old[1]) <= set(new[1]):
            return False
        return self._replace_placeholders(con, set(new[1]) - set(old[1]))

    def _replace_placeholders(self, con: duckdb.DuckDBPyConnection, names: Iterable[str]) -> bool:
        """In ``con``, the view of each derived table of ``names`` over its files, in place of
        its typed placeholder; False as soon as one's columns differ from its placeholder's
        (the views above, bound on the placeholder, are then made again)."""
        columns = sqlfiles.load("select_view_columns")
        for name in sorted(names):
            before = con.execute(columns, {"name": name}).fetchall()
            self._create_derived_view(con, name)
            if before and con.execute(columns, {"name": name}).fetchall() != before:
                return False
        return True

    def _create_derived_view(self, con: duckdb.DuckDBPyConnection, name: str) -> None:
        """The view ``name`` over every Parquet file of ``derived/<name>/`` (a part DuckDB
        cannot read is a :class:`CorruptPartError` naming it)."""
        import duckdb

        try:
            con.execute(sqlfiles.render("create_view_derived", name=sqlfiles.ident(name),
                                        glob=sqlfiles.glob_literal(self.derived_dir / name,
                                                                   "*.parquet")))
        except duckdb.Error as error:
            for path in sorted((self.derived_dir / name).glob("*.parquet")):
                try:
                    pq.read_metadata(path)
                except (OSError, pa.ArrowException):
                    raise _damaged_part(path, (str(error).splitlines() or [""])[0]) from None
            raise

    def create_views(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(sqlfiles.render("create_view_sources",
                                    glob=sqlfiles.glob_literal(self.sources_path)))
        con.execute(sqlfiles.render("create_view_runs", glob=sqlfiles.glob_literal(self.runs_path)))
        con.execute(sqlfiles.load("create_view_committed_runs"))
        for table in PART_TABLES:
            name = "_messages_current" if table == "messages" else table
            con.execute(sqlfiles.render(
                "create_view_part_table", name=sqlfiles.ident(name),
                glob=sqlfiles.glob_literal(self.table_dir(table), "*.parquet")))
        # derived tables depend only on their Parquet files: created before the views using them
        for name in self._derived_names():
            self._create_derived_view(con, name)
        con.execute(sqlfiles.load("create_view_messages"))
        con.execute(sqlfiles.load("create_view_session_flags_empty"))
        con.execute(sqlfiles.load("create_view_sessions"))
        for view in EXTRA_VIEWS:
            con.execute(sqlfiles.load(view))

    def _views_fingerprint(self, derived: tuple[str, ...] | None = None) -> str:
        """Hash of what the persisted views depend on: the lake's place, the SQL files and
        the derived tables with a view (``derived``: those, already listed)."""
        digest = hashlib.sha256(str(self.root.resolve()).encode())
        digest.update(_sql_digest())
        names = self._derived_names() if derived is None else derived
        digest.update(",".join(names).encode())
        return digest.hexdigest()

    def _views_stamp(self) -> tuple[str, str, tuple[str, ...] | None] | None:
        """The stamp of ``ctxlake.duckdb``: its views' fingerprint, the DuckDB version that
        wrote it and the derived tables it has a view of (None when an older version wrote
        the stamp); None without a readable stamp."""
        try:
            lines = (self.root / VIEWS_STAMP).read_text().split("\n")
            names = tuple(json.loads(lines[2])) if len(lines) > 2 else None
        except (FileNotFoundError, OSError, UnicodeDecodeError, ValueError, TypeError):
            return None
        return (lines[0], lines[1], names) if len(lines) > 1 else None

    def _write_views_stamp(self, names: tuple[str, ...]) -> None:
        import duckdb

        atomic_write_bytes(self.root / VIEWS_STAMP, "\n".join(
            [self._views_fingerprint(names), duckdb.__version__, json.dumps(list(names))]).encode())

    def duckdb_file_current(self, derived: tuple[str, ...] | None = None) -> bool:
        """Whether ``ctxlake.duckdb`` holds today's views: its stamp names this fingerprint
        and, when this process has imported DuckDB, its version (a run that never needs
        DuckDB does not import it for this; the next run that does rewrites the file after a
        DuckDB upgrade)."""
        stamp = self._views_stamp()
        if stamp is None:
            return False
        duckdb = sys.modules.get("duckdb")
        if duckdb is not None and stamp[1] != duckdb.__version__:
            return False
        return stamp[0] == self._views_fingerprint(derived) \
            and (self.root / "ctxlake.duckdb").exists()

    def extend_duckdb_file(self) -> bool:
        """Bring ``ctxlake.duckdb`` up to the derived tables present when it holds the views
        of some of them, for this lake, these SQL
        files and this DuckDB: a copy of it gets a view over each new table's files, replacing
        its typed placeholder, and replaces it (the stamp goes first and comes back last).
        The views above find a table by name at each query, so they are not bound again:
        ~50 ms, where :meth:`write_duckdb_file` binds them all (~0.35 s): the end of a first
        run, whose stages added every derived table to the file ingest wrote, extends it.
        (A run's own stages keep extending their views in memory, ~5 ms a table: extending
        the file at each stage and attaching it again cost more.) False, with the file as
        it was, when it cannot be extended so: another stamp, a table it has that is gone, a
        new table's columns other than its placeholder's."""
        import duckdb

        names = self._derived_names()
        stamp = self._views_stamp()
        target = self.root / "ctxlake.duckdb"
        if stamp is None or stamp[2] is None or stamp[1] != duckdb.__version__ \
                or not set(stamp[2]) <= set(names) or stamp[0] != self._views_fingerprint(stamp[2]) \
                or "?" in os.path.realpath(self.root) or not target.exists():
            return False
        tmp = self.root / ".ctxlake.duckdb.tmp"
        try:
            shutil.copyfile(target, tmp)
            with new_connection(str(tmp)) as con:
                if not self._replace_placeholders(con, set(names) - set(stamp[2])):
                    return False
            os.chmod(tmp, FILE_MODE)
            with contextlib.suppress(FileNotFoundError):
                (self.root / VIEWS_STAMP).unlink()
            os.replace(tmp, target)
        except (OSError, duckdb.Error):
            return False
        finally:
            for left in (tmp, tmp.with_name(tmp.name + ".wal")):
                with contextlib.suppress(FileNotFoundError):
                    left.unlink()
        self._write_views_stamp(names)
        return True

    def refresh_duckdb_file(self) -> str | None:
        """Rewrite ``ctxlake.duckdb`` when it is not current (a stage made a new derived
        table, or the SQL changed), so that the next commands attach it instead of binding
        every view in memory (~0.5 s each on a 500 MB lake). A warning when it could not be
        written (the lake's data is unaffected: views are then made in memory), else None."""
        if self.duckdb_file_current():
            return None
        import duckdb   # only now: a night with nothing new never imports it

        try:
            self.update_duckdb_file()
        except (OSError, duckdb.Error) as error:
            return f"ctxlake.duckdb not refreshed: {error}"
        return None

    def update_duckdb_file(self) -> None:
        """``ctxlake.duckdb`` made current (the caller found it is not): extended when only
        derived tables were added since it was written (:meth:`extend_duckdb_file`), else written whole."""
        if not self.extend_duckdb_file():
            self.write_duckdb_file()

    def write_duckdb_file(self) -> Path:
        """Persist the views into ``ctxlake.duckdb`` for external DuckDB clients and for the
        next processes' :meth:`connect` (its stamp ``.ctxlake.duckdb.views`` goes first and
        comes back last: a run killed in between leaves no stamp, so no file is trusted)."""
        target = self.root / "ctxlake.duckdb"
        tmp = self.root / ".ctxlake.duckdb.tmp"
        stamp = self.root / VIEWS_STAMP
        names = self._derived_names()
        for stale in (tmp, stamp):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        if "?" in os.path.realpath(self.root):
            # DuckDB reads a "?" in a database path as the start of options: build the file in
            # a private temp folder, then copy it into the lake
            with tempfile.TemporaryDirectory(prefix="ctxlake-views-") as folder:
                built = Path(folder) / "ctxlake.duckdb"
                with new_connection(str(built)) as con:
                    self.create_views(con)
                shutil.copyfile(built, tmp)
        else:
            with new_connection(str(tmp)) as con:
                self.create_views(con)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
        self._write_views_stamp(names)
        return target
