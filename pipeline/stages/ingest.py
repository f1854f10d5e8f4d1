"""Ingest: archive files -> Parquet parts of the lake, streaming, parallel and incremental.

Contract:
- Memory is bounded by a batch (``batch_bytes`` of rows per worker), never by the archive.
- Files are processed in parallel over all cores, grouped into chunks of ~``chunk_bytes``.
- Incremental: a file whose (size, mtime) are unchanged is skipped without being read; a file
  whose first ``watermark`` bytes still hash to ``watermark_sha256`` and that only grew is
  read from its last complete line (append-safe formats); anything else is re-read whole
  under a new ``generation`` (views keep only the current one).
- A last line without a newline is a file still being written: held back for the next run.
  Unless the file has settled: not modified for ``quiet_minutes`` (60; ``--quiet-minutes``,
  the config's ``quiet_minutes``) before the run started AND the last line is complete JSON
  (an object): then it is read like any line (a file untouched for days would otherwise keep
  its last record out of the lake, and its payload unpruned, forever). A fresh file or an
  incomplete line is still held back; a file held back earlier is read again once it has
  settled (not again when it had settled already at that read: the answer is the same).
- Every line ends up exactly once in ``records`` or ``quarantine`` (or held back):
  ``records + quarantined + held_back == lines``, per file and per run.
- A bad line becomes a quarantine row (file, line, byte offset, a reason a person
  understands); nothing here raises for bad data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import hashlib
from array import array
import multiprocessing
import os
import stat
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

import orjson
import pyarrow as pa

from pipeline.core import sqlfiles
from pipeline.core.batching import contiguous_runs
from pipeline.core.errors import RecordError, UsageError
from pipeline.formats import (CANDIDATE_SUFFIXES, COMPANION_FILES, READERS, UNREAD_TRANSCRIPT, detect,
                               reader_class)
from pipeline.formats.base import Emitter, SourceContext, json_type_name, loads_json
from pipeline.reports.render import first_few
from pipeline.core.lake import (LAKE_MARKER, OUTPUT_MARKER, Lake, detach_forked_worker, new_connection,
                           write_parquet_atomic)
from pipeline.text.tokens import text_counts
from pipeline.core.schema import PART_TABLES, SOURCES, staged_schema
from pipeline.core.crash import crash_point

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
BOM = b"\xef\xbb\xbf"
WHITESPACE = frozenset(b" \t\r\n\x0b\x0c")
HASH_BLOCK = 8 * 1024 * 1024
READ_BLOCK = 4 * 1024 * 1024   # JSONL is read in blocks of this size and split into lines in place
CR = ord("\r")
READ_BUFFER = 1024 * 1024   # one buffered read serves both the sniffing and the first lines
SNIFF_BYTES = 65536
# a first line longer than SNIFF_BYTES: read up to this much of it to sniff its format
LONG_HEAD_BYTES = 16 * 1024 * 1024
GC_THRESHOLD_0 = 20_000


def standard_locations() -> list[Path]:
    """The transcript folders that exist (``pipeline.core.locations``: what ccusage discovers)."""
    from pipeline.core.locations import found_locations
    return found_locations()


def source_id_for(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8")).hexdigest()[:16]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


# ---------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class FileTask:
    path: str
    root: str
    rel_path: str
    format: str | None
    size: int
    mtime_ns: int
    prev: dict | None = None
    problem: str | None = None
    ctime_ns: int | None = None
    inode: int | None = None

    def same_file_as(self, prev: dict) -> bool:
        """Same size, mtime and format as ``prev`` and, when the lake knows them (lakes made
        before they were kept do not), the same inode and ctime: a file replaced with the
        same size and mtime (a copy, ``touch -r``) has a new inode or ctime."""
        return prev["size_bytes"] == self.size and prev["mtime_ns"] == self.mtime_ns \
            and prev.get("format") == self.format \
            and prev.get("ctime_ns") in (None, self.ctime_ns) \
            and prev.get("inode") in (None, self.inode)


def stat_signature(st: os.stat_result) -> tuple[int, int, int, int]:
    """(size, mtime, ctime, inode) of a file: what a night with nothing new compares
    (:attr:`KnownSources.unchanged_signatures`)."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, inode_of(st)


def inode_of(st: os.stat_result) -> int:
    """``st_ino`` as a signed 64-bit value (the ``sources.inode`` column)."""
    return st.st_ino - 2**64 if st.st_ino >= 2**63 else st.st_ino


@dataclasses.dataclass
class Discovery:
    tasks: list[FileTask]
    superseded: list[str]
    unrecognized: list[str] = dataclasses.field(default_factory=list)  # named, wrong suffix
    named: set[str] = dataclasses.field(default_factory=set)           # files named as PATHs
    own_folders: list[str] = dataclasses.field(default_factory=list)
    unread: list[str] = dataclasses.field(default_factory=list)    # see UNREAD_TRANSCRIPT
    unchanged: list[str] = dataclasses.field(default_factory=list)  # held as they are now


def superseded_by(path: str, fmt: str | None) -> str | None:
    """A legacy Gemini ``session-X.json`` is migrated whole into ``session-X.jsonl`` when the
    session is resumed; reading both would count the session twice, so the .jsonl wins."""
    if fmt == "gemini_cli" and path.endswith(".json") and os.path.exists(path + "l"):
        return path + "l"
    return None


def own_folder(path: Path, names: set[str] | None = None) -> str | None:
    """What ctxlake wrote at folder ``path`` ("lake" or "output" folder), or None: a folder
    holding one of ctxlake's marker files, or a lake made before the markers (its
    ``sources.parquet`` beside ``tables/``). ``names``: the folder's listing, when known
    (nothing is looked up for a name it does not hold)."""
    for marker, kind in ((LAKE_MARKER, "lake"), (OUTPUT_MARKER, "output")):
        if (names is None or marker in names) and os.path.lexists(path / marker):
            return kind
    if (names is None or {"sources.parquet", "tables"} <= names) \
            and os.path.isfile(path / "sources.parquet") and os.path.isdir(path / "tables"):
        return "lake"
    return None


def _walk(root: Path) -> Iterable[tuple[str, bool, str | None, os.stat_result | None]]:
    """(path, is_symlink, problem, stat) for every regular file or symlink below ``root``
    (links not followed; ``stat``: the file's own, read with the folder listing, or None);
    a folder that cannot be listed comes as (folder, False, why, None); a lake or output
    folder of ctxlake as (folder, False, "own:<kind>", None) and is not entered. Folders are
    visited depth first in name order, each folder's files before its sub-folders (as
    ``os.walk`` would, with one ``scandir`` per folder and no stat a listing already gives)."""
    if root.is_file() or root.is_symlink() and not root.is_dir():
        yield str(root), root.is_symlink(), None, None
        return
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as err:
            yield os.fspath(err.filename or folder), False, \
                f"cannot read folder: {err.strerror or err}: its files are not read", None
            continue
        kind = own_folder(Path(folder), {entry.name for entry in entries})
        if kind is not None:
            yield folder, False, f"own:{kind}", None
            continue
        files, folders = [], []
        for entry in entries:
            try:
                is_dir = entry.is_dir()     # follows a symlink, as os.walk sorts them
            except OSError:
                is_dir = False
            (folders if is_dir else files).append(entry)
        for entry in sorted(files, key=lambda e: e.name):
            link = entry.is_symlink()
            st = None
            if not link:
                try:        # not contextlib.suppress: this runs once per file of the archive
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    pass
            yield entry.path, link, None, st
        folders.sort(key=lambda e: e.name)
        for entry in folders:
            if entry.is_symlink():
                yield entry.path, True, None, None
        stack.extend(entry.path for entry in reversed(folders) if not entry.is_symlink())


def _file_kind(mode: int) -> str | None:
    """What a non-regular file is (None for a regular file)."""
    if stat.S_ISREG(mode):   # nearly every file: one test, not six
        return None
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def shown_path(path: str) -> str:
    """``path`` as valid UTF-8 text: bytes of a name that are not UTF-8 as ``\\xNN``."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def require_paths(paths: Iterable[str | Path]) -> None:
    """Raise :class:`UsageError` for the first path that does not exist (before any lake is
    made for it: a mistyped archive leaves nothing behind)."""
    for root in paths:
        if not os.path.lexists(root):
            raise UsageError(f"no such file or folder: {root}",
                             hint="check the path, or run without PATH to read the standard locations")


def discover(paths: list[Path], *, format: str | None, known: "KnownSources") -> Discovery:
    """The files below ``paths``: a task for each file to look at, except a file the lake
    holds exactly as it is now (same size, mtime, ctime, inode and format, nothing held
    back), which is only listed in ``unchanged`` (a night with nothing new makes no task
    per file: it compares one tuple per file)."""
    unchanged_sig = known.unchanged_signatures
    tasks: list[FileTask] = []
    unchanged: list[str] = []
    superseded: list[str] = []
    unrecognized: list[str] = []
    named: set[str] = set()
    own: list[str] = []
    unread: list[str] = []
    seen: set[str] = set()
    for root in paths:      # each exists (require_paths, before the lake was locked)
        root_abs = Path(os.path.abspath(root))
        if not root_abs.is_dir():
            named.add(str(root_abs))
        root_real = Path(os.path.realpath(root))
        base_dir = root_abs if root_abs.is_dir() else root_abs.parent
        prefix = os.path.join(str(base_dir), "")
        for abspath, is_link, problem, listed in _walk(root_abs):
            if abspath in seen:
                continue
            seen.add(abspath)
            known_as = unchanged_sig.get(abspath) if listed is not None else None
            if known_as is not None and stat.S_ISREG(listed.st_mode) \
                    and known_as[0] == stat_signature(listed) \
                    and (format is None or format == known_as[1]) \
                    and not superseded_by(abspath, format or known_as[1]):
                unchanged.append(abspath)
                continue
            rel = abspath[len(prefix):] if abspath.startswith(prefix) \
                else os.path.relpath(abspath, base_dir)
            if problem is not None and problem.startswith("own:"):
                own.append(f"{shown_path(abspath)} (a ctxlake {problem[4:]} folder: not read)")
                continue
            shown = abspath if abspath.isascii() else shown_path(abspath)
            if problem is not None or shown != abspath:
                if problem is None:
                    if not abspath.endswith(CANDIDATE_SUFFIXES):
                        continue
                    problem = ("file name is not valid UTF-8 (shown with \\x escapes): not read;"
                               " rename it to read it")
                tasks.append(FileTask(shown, str(root_abs), shown_path(rel), None, 0, 0,
                                      known.compared_of(shown), problem=problem))
                continue
            if is_link:
                target = Path(os.path.realpath(abspath))
                if target == root_real or root_real in target.parents:
                    if target.is_dir():
                        continue  # its files are read where they are, inside the archive
                else:
                    st = os.lstat(abspath)
                    tasks.append(FileTask(abspath, str(root_abs), rel, None, st.st_size,
                                          st.st_mtime_ns, known.compared_of(abspath),
                                          problem=f"symlink leads outside the archive root "
                                                  f"(to {target}): not followed"))
                    continue
            if not abspath.endswith(CANDIDATE_SUFFIXES):
                if UNREAD_TRANSCRIPT.search(abspath):
                    unread.append(abspath)
                elif abspath in named:   # named on the command line: said, not skipped silently
                    unrecognized.append(abspath)
                continue
            try:
                st = listed or os.stat(abspath)
            except OSError as exc:
                tasks.append(FileTask(abspath, str(root_abs), rel, None, 0, 0,
                                      known.compared_of(abspath),
                                      problem=f"cannot stat file: {exc.strerror or exc}"))
                continue
            kind = _file_kind(st.st_mode)
            if kind is not None:
                tasks.append(FileTask(abspath, str(root_abs), rel, None, 0, 0,
                                      known.compared_of(abspath),
                                      problem=f"{kind}, not a regular file: skipped, never opened"))
                continue
            prev = known.compared_of(abspath)
            fmt = format
            task = FileTask(abspath, str(root_abs), rel, fmt, st.st_size, st.st_mtime_ns, prev,
                            ctime_ns=st.st_ctime_ns, inode=inode_of(st))
            if fmt is None and prev is not None and prev.get("format"):
                task.format = prev["format"]
                if not task.same_file_as(prev):
                    task.format = None
            if task.format is not None and superseded_by(abspath, task.format):
                superseded.append(abspath)
                continue
            # format None: the worker sniffs the file (in parallel), see detect_task_format
            tasks.append(task)
    return Discovery(tasks, superseded, unrecognized, named, own, sorted(unread), unchanged)


# ---------------------------------------------------------------------------------------
# Reading one file (in a worker process)
# ---------------------------------------------------------------------------------------
def explain_json_error(content: bytes, exc: Exception) -> str:
    """A sentence a person understands for a line orjson refused."""
    nul = content.find(b"\x00")
    if nul >= 0:
        return f"line contains NUL bytes (first at byte {nul}): binary data, not JSON"
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"invalid UTF-8 at byte {err.start} of the line"
    message = str(exc)
    if "recursion" in message.lower() or "depth limit" in message.lower():
        return NESTING_REASON
    return f"invalid JSON: {message}"


NESTING_LIMIT = 254   # orjson writes at most 255 levels: the deepest value the lake can re-encode
NESTING_REASON = (f"JSON nested too deeply (over {NESTING_LIMIT} levels, the nesting limit): "
                  "refused as a recursion bomb")


def too_deep(text: bytes | bytearray, obj, start: int = 0, end: int | None = None) -> bool:
    """Whether a parsed value (``text[start:end]``) nests deeper than ``NESTING_LIMIT``; walked
    only when the text holds that many brackets at all, so an ordinary line costs two counts."""
    end = len(text) if end is None else end
    if text.count(b"[", start, end) + text.count(b"{", start, end) < NESTING_LIMIT:
        return False
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > NESTING_LIMIT:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))
    return False


def reader_failure(exc: Exception) -> str:
    """The quarantine reason for an unexpected error of a reader on one line."""
    if isinstance(exc, (orjson.JSONEncodeError, RecursionError)) and "recursion" in str(exc).lower():
        return NESTING_REASON
    return f"reader failed: {type(exc).__name__}: {exc}"


def _record_check(rtype, session) -> str | None:
    """Why a line's record row cannot be stored (the reader's record type or session id is not
    a string), or None."""
    for name, value in (("record type", rtype), ("session id", session)):
        if value is not None and type(value) is not str:
            return (f"a value of the wrong type or range: the {name} is {json_type_name(value)}, "
                    "expected a string")
    return None


def excerpt(content: bytes | memoryview, limit: int = 160) -> str:
    text = bytes(content[:limit]).decode("utf-8", errors="replace")
    return text.replace("\x00", "\\x00") + ("…" if len(content) > limit else "")


class PartWriter:
    """Buffers the staged rows of one chunk and writes them as Parquet parts (``Lake.write_parts``)
    whenever they reach ``batch_bytes`` of input, and at the end."""

    def __init__(self, lake: Lake, run_id: str, chunk_no: int, batch_bytes: int):
        self.lake = lake
        self.run_id = run_id
        self.chunk_no = chunk_no
        self.batch_bytes = batch_bytes
        self.pending: dict[str, list[dict] | RecordColumns] = _empty_pending()
        self.pending_bytes = 0
        self.part_no = 0
        self.source_id: str | None = None          # the file whose rows come now
        self.pending_sources: dict[str, set[str]] = {}   # source -> tables with rows pending
        self.parts_of: dict[str, list[str]] = {}   # source -> "<table>/<name>" written

    def begin(self, source_id: str) -> None:
        """The rows added from now on are those of the file ``source_id``."""
        self.source_id = source_id

    def add(self, rows: dict[str, list[dict]], nbytes: int) -> None:
        for table, table_rows in rows.items():
            if table_rows:
                self.pending[table].extend(table_rows)
                self.pending_sources.setdefault(self.source_id, set()).add(table)
        self.pending_bytes += nbytes
        if self.pending_bytes >= self.batch_bytes:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows as one part per table (``Lake.write_parts``)."""
        if not any(self.pending.values()):
            return
        tables = [t for t in PART_TABLES if self.pending[t]]
        # messages are always registered: the tool_results part reads their measurements
        batches = {t: _arrow_batch(t, self.pending[t]) for t in {*tables, "messages"}}
        name = f"{self.run_id}-{self.chunk_no:05d}-{self.part_no:03d}"
        self.lake.write_parts(_worker_connection(), batches, name, only=tables)
        for source_id, written in self.pending_sources.items():
            self.parts_of.setdefault(source_id, []).extend(
                f"{table}/{name}" for table in PART_TABLES if table in written)
        self.part_no += 1
        self.pending = _empty_pending()
        self.pending_sources = {}
        self.pending_bytes = 0

    def record_parts(self, results: list["FileResult"], tasks: list["FileTask"]) -> None:
        """Name in each result's source row the parts holding its current generation's rows:
        those it had (the same generation, read on from its watermark) and those written now
        (after :meth:`close`). A file the lake held without knowing its parts stays unknown."""
        for res, task in zip(results, tasks):
            source_id = res.source.get("source_id")
            if source_id is None:
                continue
            new = self.parts_of.get(source_id, [])
            prev = task.prev or {}
            if prev and prev.get("generation") == res.source.get("generation"):
                old = prev.get("parts")
                res.source["parts"] = None if old is None else [*old, *new]
            else:
                res.source["parts"] = new

    def close(self) -> None:
        self.flush()


_WORKER_CON: tuple[int, object] | None = None


def _worker_connection():
    """One single-threaded DuckDB connection per process, reused by every chunk it writes
    (a new connection with its macros costs ~20 ms). Keyed by pid: a forked worker never
    touches a connection it inherited from its parent."""
    global _WORKER_CON
    if _WORKER_CON is None or _WORKER_CON[0] != os.getpid():
        con = new_connection()
        con.execute("SET threads = 1")
        _WORKER_CON = (os.getpid(), con)
    return _WORKER_CON[1]


def _arrow_batch(table: str, rows: list[dict] | "RecordColumns") -> pa.Table:
    """Staged rows -> Arrow with the staged schema of ``table``. Messages get here the inputs
    of their token estimate (CJK count, UTF-16 length) and, for tool results, the payload
    hash; records arrive as columns (:meth:`RecordColumns.to_arrow`)."""
    schema = staged_schema(table)
    if table == "messages":
        results = []
        for i, row in enumerate(rows):
            row["cjk_count"], row["utf16_len"] = text_counts(row.get("text"))
            if row.get("kind") == "tool_result":
                results.append(i)
        batch = _from_rows(rows, schema)
        if not results:
            return batch
        # the payload hash from the UTF-8 bytes Arrow already holds (no second encoding)
        text = batch.column("text").combine_chunks()
        _, offsets, data = text.buffers()
        ends = memoryview(offsets).cast("i")[text.offset:text.offset + len(text) + 1]
        body = memoryview(data) if data is not None else memoryview(b"")
        hashes: list[str | None] = [None] * len(rows)
        for i in results:
            hashes[i] = hashlib.sha256(body[ends[i]:ends[i + 1]]).hexdigest()
        column = schema.get_field_index("text_sha256")
        return batch.set_column(column, schema.field(column), pa.array(hashes, pa.string()))
    if table == "records":
        return rows.to_arrow() if rows else schema.empty_table()
    return _from_rows(rows, schema)


def _from_rows(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Row dicts -> Arrow with exactly ``schema``'s columns (a type mismatch raises).

    Not polars, though it builds this about twice as fast: workers are forked, and a forked
    child of a parent whose polars thread pool is running deadlocks on its first polars call."""
    return pa.Table.from_struct_array(pa.array(rows, type=_struct_type(schema)))


@functools.cache
def _struct_type(schema: pa.Schema) -> pa.StructType:
    """The row type of ``schema``: converting dicts as one struct array runs the per-row
    work in C++ (~12% faster than ``Table.from_pylist``, which gathers each column in Python)."""
    return pa.struct(list(schema))


@dataclasses.dataclass(frozen=True)
class IngestProblem:
    """A quarantined line (or a file that could not be read), as its ``quarantine`` row
    names it."""

    path: str
    line_no: int | None            # None (or 0): the file as a whole
    byte_offset: int | None
    severity: str                  # error | warning
    reason: str

    @property
    def where(self) -> str:
        """``path:line`` (the path alone for the file as a whole)."""
        return f"{self.path}:{self.line_no}" if self.line_no else self.path


@dataclasses.dataclass
class FileResult:
    path: str
    source: dict              # the new sources row
    mode: str                 # new | appended | reingested | unchanged | problem |
    #                           unrecognized | superseded | skipped
    lines: int = 0
    records: int = 0
    quarantined: int = 0
    held_back: int = 0
    bytes_read: int = 0
    problems: list[IngestProblem] = dataclasses.field(default_factory=list)


def _problem(row: dict) -> IngestProblem:
    return IngestProblem(row["path"], row["line_no"], row["byte_offset"], row["severity"],
                         row["reason"])


def _quarantine_row(ctx: SourceContext, line_no: int, offset: int, length: int, reason: str,
                    content: bytes = b"", severity: str = "error") -> dict:
    return dict(source_id=ctx.source_id, generation=ctx.generation, path=ctx.path,
                line_no=line_no, byte_offset=offset, byte_len=length, severity=severity,
                reason=reason, excerpt=excerpt(content) if content else None,
                detected_at=now_iso())


def _hash_prefix(handle, length: int) -> tuple[str, "hashlib._Hash"]:
    hasher = hashlib.sha256()
    remaining = length
    while remaining > 0:
        block = handle.read(min(HASH_BLOCK, remaining))
        if not block:
            break
        hasher.update(block)
        remaining -= len(block)
    return hasher.hexdigest(), hasher


def detect_task_format(task: FileTask, head: bytes,
                       longer: Callable[[int], bytes] | None = None) -> str | None:
    """Sniff a file's format from ``head``, its first 64 KiB (read through the same buffered
    handle that then reads the file, so the head costs no second read). None when no reader
    knows it.

    A first line longer than the head (a message log whose first request holds a large
    document) leaves the readers only bytes to go by, and a head of plain text cannot tell
    an Anthropic log from an OpenAI one: ``longer(n)`` (the file's first ``n`` bytes) then
    gives the sniff the whole first line, up to ``LONG_HEAD_BYTES`` (read once, when the
    file is new to the lake)."""
    fmt = detect(task.path, head)
    if longer is not None and len(head) >= SNIFF_BYTES and b"\n" not in head[:SNIFF_BYTES]:
        wider = longer(LONG_HEAD_BYTES)
        end = wider.find(b"\n")
        if end >= 0:
            fmt = detect(task.path, wider[:end + 1]) or fmt
    if fmt is None and not head and task.path.endswith(".jsonl") and "/.claude/" in task.path:
        fmt = "claude_code"
    return fmt


def _file_problem(task: FileTask, base: dict, generation: int, writer: PartWriter,
                  reason: str) -> FileResult:
    """A file that cannot be read at all: one quarantine row at line 0, no line counted."""
    ctx = SourceContext(task.path, base["source_id"], generation, task.root)
    row = _quarantine_row(ctx, 0, 0, 0, reason)
    writer.add({t: [row] if t == "quarantine" else [] for t in PART_TABLES}, 0)
    source = dict(base, sha256=None, lines=0, records=0, quarantined=0, held_back=0,
                  watermark=0, watermark_sha256=None, generation=generation, reader_state=None)
    return FileResult(task.path, source, "problem", problems=[_problem(row)])


OVER_LONG = -2   # _complete_lines: a line over the limit, skipped unread


def _complete_lines(handle, hasher, expected: int,
                    max_line_bytes: int | None = None) -> Iterator[tuple[memoryview, int, int]]:
    """The lines of ``handle`` from its position as ``(block, start, newline)`` positions in
    blocks of up to ``READ_BLOCK`` bytes (no copy per line; a line longer than a block grows
    the next read; ``expected``, the bytes left by the file's size, keeps a small file's
    block small). Every complete line is hashed into ``hasher`` in file order. An
    unterminated last line is yielded once as ``(block, start, -1)``, not hashed.

    A line longer than ``max_line_bytes`` is never held whole: once the pending bytes pass
    the limit, the rest of the line is read through and hashed in blocks (memory stays
    bounded by the limit) and the line comes as ``(first bytes, its length, OVER_LONG)``,
    its newline included when it has one (a last line without one ends at the end of file)."""
    carry = b""
    while True:
        if max_line_bytes is not None and len(carry) > max_line_bytes + 2:
            yield _skip_long_line(handle, hasher, carry)
            carry = b""
            continue
        size = max(min(READ_BLOCK, expected + 1), 2 * len(carry), 4096)
        if max_line_bytes is not None:
            size = max(min(size, max_line_bytes + 3 - len(carry)), 4096)
        buf = bytearray(len(carry) + size)
        buf[:len(carry)] = carry
        got = handle.readinto(memoryview(buf)[len(carry):])
        if not got:
            if carry:
                yield memoryview(carry), 0, -1
            return
        expected -= got
        filled = len(carry) + got
        data = memoryview(buf)[:filled]
        pos = 0
        find = buf.find
        while True:
            newline = find(b"\n", pos, filled)
            if newline < 0:
                break
            yield data, pos, newline
            pos = newline + 1
        hasher.update(data[:pos])
        carry = bytes(data[pos:])


def _skip_long_line(handle, hasher, carry: bytes) -> tuple[memoryview, int, int]:
    """Read through the rest of an over-long line (``carry`` holds its start, no newline),
    hashing it; leaves ``handle`` just after its newline (or at the end of the file)."""
    hasher.update(carry)
    length = len(carry)
    head = memoryview(carry[:SNIFF_BYTES])
    while True:
        block = handle.read(READ_BLOCK)
        if not block:
            return head, length, OVER_LONG
        newline = block.find(b"\n")
        if newline < 0:
            hasher.update(block)
            length += len(block)
            continue
        hasher.update(block[:newline + 1])
        length += newline + 1
        # put the rest back: seek over what follows the newline
        handle.seek(-(len(block) - newline - 1), os.SEEK_CUR)
        return head, length, OVER_LONG


class RecordColumns:
    """A batch's ``records`` rows as columns: a line costs a few list appends instead of a
    dict, and the raw lines are laid out once into a single Arrow buffer."""

    COLUMNS = ("source_id", "generation", "line_no", "byte_offset", "byte_len", "json_path",
               "record_type", "session_id", "raw")

    def __init__(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in self.COLUMNS}

    def __len__(self) -> int:
        return len(self.columns["line_no"])

    def append(self, *values) -> None:
        for column, value in zip(self.columns.values(), values):
            column.append(value)

    def extend(self, other: "RecordColumns") -> None:
        for name, column in self.columns.items():
            column.extend(other.columns[name])

    def to_arrow(self) -> pa.Table:
        """Arrow with the staged ``records`` schema; ``raw`` (valid UTF-8: orjson checked
        it) becomes one string buffer without being decoded line by line."""
        schema = staged_schema("records")
        raws = self.columns["raw"]
        offsets = array("i", [0])
        total = 0
        for raw in raws:
            total += len(raw)
            offsets.append(total)
        if total >= 2**31:
            raise ValueError("a records batch over 2 GiB; lower batch_bytes")
        arrays = [pa.array(self.columns[field.name], field.type) for field in schema
                  if field.name != "raw"]
        arrays.append(pa.StringArray.from_buffers(
            len(raws), pa.py_buffer(offsets), pa.py_buffer(b"".join(raws))))
        return pa.Table.from_arrays(arrays, schema=schema)


def _empty_pending() -> dict[str, list[dict] | RecordColumns]:
    return {t: RecordColumns() if t == "records" else [] for t in PART_TABLES}


def open_regular(path: str):
    """``path`` opened for buffered reading, refusing anything but a regular file without
    blocking (a FIFO swapped in after discovery would wait for a writer forever)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        kind = _file_kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise OSError(f"{kind}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=READ_BUFFER)
    except BaseException:
        os.close(fd)
        raise


DEFAULT_QUIET_MINUTES = 60.0


def settled_tail(tail: bytes, mtime_ns: int, settled_before_ns: int | None) -> bool:
    """Is an unterminated last line to be read now: its file was last modified at or before
    ``settled_before_ns`` (the run's start minus the quiet period) and it is a complete JSON
    object?"""
    if settled_before_ns is None or mtime_ns > settled_before_ns:
        return False
    content = tail.rstrip(b"\r")
    if content.startswith(BOM):
        content = content[len(BOM):]
    try:
        return isinstance(loads_json(content), dict)
    except orjson.JSONDecodeError:
        return False


def _expected_non_transcript(task: FileTask, head: bytes) -> bool:
    """A file no reader claims that is no news: a companion file an agent writes beside its
    transcripts (:data:`pipeline.formats.COMPANION_FILES`), or one with nothing in it yet
    (empty, a byte-order mark or white space only: a session just created; read once it
    holds a line). Listed as skipped, not warned about every night."""
    if COMPANION_FILES.search(task.path):
        return True
    return len(head) < SNIFF_BYTES and not head.lstrip(b"\xef\xbb\xbf \t\r\n")


def read_file(task: FileTask, writer: PartWriter, run_id: str, max_line_bytes: int,
              settled_before_ns: int | None = None) -> FileResult:
    handle = None
    if not task.problem:
        try:
            handle = open_regular(task.path)
        except OSError as exc:
            task.problem = f"cannot read file: {exc.strerror or exc}"
    if task.format is None and handle is not None:
        head = b""
        try:
            head = handle.peek(SNIFF_BYTES)[:SNIFF_BYTES]
            task.format = detect_task_format(task, head,
                                             longer=lambda n: os.pread(handle.fileno(), n, 0))
        except OSError as exc:
            task.problem = f"cannot read file: {exc.strerror or exc}"
        if task.format is None and not task.problem:
            handle.close()
            return FileResult(task.path, {}, "skipped" if _expected_non_transcript(task, head)
                              else "unrecognized")
        if task.format is not None and superseded_by(task.path, task.format):
            handle.close()
            return FileResult(task.path, {}, "superseded")
    prev = task.prev or {}
    source_id = prev.get("source_id") or source_id_for(task.path)
    base = dict(source_id=source_id, path=task.path, root=task.root, rel_path=task.rel_path,
                format=task.format, size_bytes=task.size,
                mtime=datetime.fromtimestamp(task.mtime_ns / 1e9, timezone.utc),
                mtime_ns=task.mtime_ns, run_id=run_id,
                ingested_at=datetime.now(timezone.utc))
    generation = (prev.get("generation") or 0) + 1
    writer.begin(source_id)
    if task.problem:
        if handle is not None:
            handle.close()
        return _file_problem(task, base, generation, writer, task.problem)

    reader_cls = reader_class(task.format)
    with handle:
        st = os.fstat(handle.fileno())
        base["size_bytes"], base["mtime_ns"] = st.st_size, st.st_mtime_ns
        base["ctime_ns"], base["inode"] = st.st_ctime_ns, inode_of(st)
        base["mtime"] = datetime.fromtimestamp(st.st_mtime_ns / 1e9, timezone.utc)
        mode = "new" if not prev else "reingested"
        start = 0
        state: dict = {}
        line_no = 0
        counts = dict(records=0, quarantined=0)
        hasher = hashlib.sha256()
        same_format = prev.get("format") == task.format
        if prev and same_format and reader_cls.layout == "jsonl" and reader_cls.append_safe \
                and prev.get("watermark") is not None and st.st_size >= prev["watermark"] \
                and prev.get("watermark_sha256"):
            digest, hasher = _hash_prefix(handle, prev["watermark"])
            if digest == prev["watermark_sha256"]:
                generation = prev["generation"]
                start = prev["watermark"]
                line_no = prev["lines"]
                counts = dict(records=prev["records"], quarantined=prev["quarantined"])
                state = orjson.loads(prev["reader_state"]) if prev.get("reader_state") else {}
                mode = "appended" if st.st_size > start else "unchanged"
            else:
                handle.seek(0)
                hasher = hashlib.sha256()
        elif prev and same_format and prev.get("sha256") and st.st_size == prev["size_bytes"] \
                and (reader_cls.layout == "document" or not reader_cls.append_safe) \
                and not prev.get("held_back"):
            # a whole-file read (a document, or JSONL whose records may be rewritten) of the
            # same bytes (a copy, a restore, ``touch``) is no change: the lake keeps the rows
            # of the generation it has, and no later stage redoes the file's sessions
            digest, _ = _hash_prefix(handle, st.st_size)
            handle.seek(0)
            if digest == prev["sha256"]:
                source = dict(prev, mtime=base["mtime"], mtime_ns=base["mtime_ns"],
                              ctime_ns=base["ctime_ns"], inode=base["inode"])
                return FileResult(task.path, source, "unchanged")
        ctx = SourceContext(task.path, source_id, generation, task.root)
        reader = reader_cls(ctx)
        out = Emitter(ctx)
        records = RecordColumns()
        quarantine: list[dict] = []
        problems: list[IngestProblem] = []
        run_lines = run_records = run_quarantined = held_back = 0
        items_quarantined = 0     # elements of a document quarantined on their own (line 0)
        bytes_read = 0

        if reader_cls.layout == "document":
            data = handle.read()
            hasher.update(data)
            bytes_read = len(data)
            watermark = len(data)
            content = data[len(BOM):] if data.startswith(BOM) else data
            if content.strip():
                run_lines = 1
                line_no = 1
                out.start_line(1, 0, len(data))
                reason = None
                try:
                    obj = loads_json(content)
                except orjson.JSONDecodeError as exc:
                    reason = explain_json_error(content, exc)
                else:
                    try:
                        if too_deep(content, obj):
                            raise RecordError(NESTING_REASON)
                        rtype = reader.document(obj, out)
                    except RecordError as exc:
                        reason = exc.message
                    except Exception as exc:  # a reader bug must not stop the run
                        reason = reader_failure(exc)
                    if reason is None:
                        session = _first_session(out)
                        reason = out.check_line() or _record_check(rtype, session)
                if reason is None:
                    records.append(source_id, generation, 1, 0, len(data), "", rtype,
                                   session, content)
                    run_records = 1
                    # elements the reader quarantined on their own (a bad message of a
                    # session document): a row each at line 0, the document's line read
                    items_quarantined = _quarantine_items(ctx, out, quarantine)
                else:
                    out.rollback_line()
                    quarantine.append(_quarantine_row(ctx, 1, 0, len(data), reason, content))
                    run_quarantined = 1
            state = {}
        else:
            reader.begin(state)
            offset = start
            handle.seek(start)
            pending_bytes = 0
            for data, begin_pos, end_pos in _complete_lines(handle, hasher, st.st_size - start,
                                                            max_line_bytes):
                if end_pos == OVER_LONG:  # skipped unread: quarantined, memory stays bounded
                    line_len = begin_pos
                    bytes_read += line_len
                    line_no += 1
                    run_lines += 1
                    quarantine.append(_quarantine_row(
                        ctx, line_no, offset, line_len,
                        f"line is {line_len:,} bytes, over the {max_line_bytes:,}-byte limit "
                        "(--max-line-bytes)", data))
                    run_quarantined += 1
                    offset += line_len
                    pending_bytes += line_len
                    continue
                terminator = 1
                if end_pos < 0:  # an unterminated last line: held back, hashed afterwards
                    tail = data[begin_pos:]
                    if not settled_tail(bytes(tail), st.st_mtime_ns, settled_before_ns):
                        held_back = 1
                        bytes_read += len(tail)
                        break
                    # a settled file's complete last line: read now (and hashed as a line)
                    hasher.update(tail)
                    end_pos, terminator = len(data), 0
                line_len = end_pos + terminator - begin_pos
                bytes_read += line_len
                line_no += 1
                run_lines += 1
                # a view of the line without its terminator (and a leading BOM): no copy
                end = end_pos - 1 if end_pos > begin_pos and data[end_pos - 1] == CR else end_pos
                if offset == 0 and data[begin_pos:begin_pos + len(BOM)] == BOM:
                    begin_pos += len(BOM)
                content = data[begin_pos:end]
                reason = None
                severity = "error"
                obj = None
                if not content or (content[0] in WHITESPACE and not bytes(content).strip()):
                    reason, severity = "blank line (nothing to read)", "notice"
                elif len(content) > max_line_bytes:
                    reason = (f"line is {len(content):,} bytes, over the {max_line_bytes:,}-byte "
                              "limit (--max-line-bytes)")
                else:
                    try:
                        obj = loads_json(content)
                    except orjson.JSONDecodeError as exc:
                        reason = explain_json_error(bytes(content), exc)
                    else:
                        if not isinstance(obj, dict):
                            reason = (f"JSON value is {type(obj).__name__ if obj is not None else 'null'}"
                                      ", expected an object")
                        elif too_deep(data.obj, obj, begin_pos, end):
                            reason = NESTING_REASON
                if reason is None:
                    out.start_line(line_no, offset, line_len)
                    try:
                        rtype = reader.line(obj, out)
                    except RecordError as exc:
                        reason = exc.message
                    except Exception as exc:  # a reader bug must not stop the run
                        reason = reader_failure(exc)
                    if reason is None:
                        session = _last_session(out, reader)
                        reason = out.check_line() or _record_check(rtype, session)
                    if reason is not None:
                        out.rollback_line()
                        reader.rollback()
                        _unread_line(reader, obj, out)
                    else:
                        records.append(source_id, generation, line_no, offset, line_len, None,
                                       rtype, session, content)
                        run_records += 1
                if reason is not None:
                    quarantine.append(_quarantine_row(ctx, line_no, offset, line_len, reason,
                                                      content, severity))
                    run_quarantined += 1
                offset += line_len
                pending_bytes += line_len
                # the writer's batch (this file's rows and earlier files') bounds memory
                if pending_bytes + writer.pending_bytes >= writer.batch_bytes and reader_cls.append_safe:
                    rows = out.take()
                    rows["records"], records = records, RecordColumns()
                    rows["quarantine"].extend(quarantine)
                    problems.extend(_problem(q) for q in quarantine)
                    quarantine = []
                    writer.add(rows, pending_bytes)
                    pending_bytes = 0
            watermark = offset
            # rows emitted by finish() (readers that buffer, e.g. Gemini JSONL) are undone as a
            # whole if it fails: a file-level problem (line 0), not a quarantined line
            out.start_line(line_no, offset, 0)
            try:
                state = reader.finish(out)
                reason = out.check_line()
                if reason is None:
                    orjson.dumps(state)
            except Exception as exc:  # a reader bug must not stop the run
                reason = exc.message if isinstance(exc, RecordError) else reader_failure(exc)
            if reason is not None:
                out.rollback_line()
                quarantine.append(_quarantine_row(ctx, 0, 0, 0, f"could not finish the file: {reason}"))
                state = {}
            else:   # messages finish() left out on their own (Gemini JSONL)
                items_quarantined = _quarantine_items(ctx, out, quarantine)
            # the hash up to the last complete line; the held-back tail then completes the
            # whole-file hash (raw is that tail when a line was held back)
            wm_digest = hasher.hexdigest()
            if held_back:
                hasher.update(tail)
            hasher.update(handle.read())
        rows = out.take()
        rows["records"] = records
        rows["quarantine"].extend(quarantine)
        problems.extend(_problem(q) for q in quarantine)
        writer.add(rows, bytes_read)

        whole = hasher.hexdigest()
        if reader_cls.layout == "document":
            wm_digest = whole
        source = dict(base, sha256=whole, lines=line_no,
                      records=counts["records"] + run_records,
                      quarantined=counts["quarantined"] + run_quarantined + items_quarantined,
                      held_back=held_back, watermark=watermark, watermark_sha256=wm_digest,
                      generation=generation, reader_state=orjson.dumps(state).decode())
        return FileResult(task.path, source, mode, lines=run_lines + held_back,
                          records=run_records, quarantined=run_quarantined,
                          held_back=held_back, bytes_read=bytes_read, problems=problems)


def _quarantine_items(ctx: SourceContext, out: Emitter, quarantine: list[dict]) -> int:
    """The elements the reader quarantined on their own (:meth:`Emitter.quarantine_item`: a
    bad message of a session document, or of a Gemini JSONL file's final list) as
    quarantine rows at line 0 (not a line: the file's lines were read), each with its reason
    and its JSON as the excerpt (stdlib ``json``, ASCII: it writes what was read, integers
    beyond 64 bits and lone surrogates included). Returns how many."""
    import json

    for why, element in out.item_problems:
        quarantine.append(_quarantine_row(ctx, 0, 0, 0, why,
                                          json.dumps(element, ensure_ascii=True).encode("ascii")))
    count = len(out.item_problems)
    out.item_problems.clear()
    return count


def _unread_line(reader, obj: dict, out: Emitter) -> None:
    """The rows a quarantined line still gives (:meth:`Reader.unread_line`), all or none: a
    reader bug or a row that cannot be stored rolls them back (the line is quarantined
    either way)."""
    try:
        reader.unread_line(obj, out)
        reason = out.check_line()
    except Exception:  # noqa: BLE001 - the line is already quarantined with its reason
        reason = "unreadable"
    if reason is not None:
        out.rollback_line()
        reader.rollback()


def _first_session(out: Emitter) -> str | None:
    for table in ("session_info", "messages"):
        if out.rows[table]:
            return out.rows[table][0].get("session_id")
    return None


def _last_session(out: Emitter, reader) -> str | None:
    messages = out.rows["messages"]
    if messages and messages[-1].get("line_no") == out.line_no:
        return messages[-1].get("session_id")
    return getattr(reader, "session_id", None)


def process_chunk(args: tuple) -> list[FileResult]:
    lake_root, run_id, chunk_no, tasks, batch_bytes, max_line_bytes, settled_before_ns = args
    with _rare_gc():
        writer = PartWriter(Lake(lake_root), run_id, chunk_no, batch_bytes)
        results = [read_file(task, writer, run_id, max_line_bytes, settled_before_ns)
                   for task in tasks]
        writer.close()
        writer.record_parts(results, tasks)
    crash_point("ingest:chunk")     # parts written, result not returned yet (the kill tests)
    return results


@contextlib.contextmanager
def _rare_gc() -> Iterator[None]:
    """Collect cycles rarely while reading: every parsed line allocates many short-lived
    containers (freed by reference counting, they never form cycles), and the default
    thresholds made the collector walk a batch's live rows again and again (~5% of ingest
    CPU). The caller's thresholds come back afterwards."""
    saved = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD_0, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


def _init_worker() -> None:
    """Initializer of a forked ingest worker: freeze the objects inherited from the parent
    (the collector no longer walks them, nor copies their pages). glibc's heap is left to
    trim itself: keeping freed memory saved some page faults but let the peak grow with the
    archive (1 GB vs 200 MB: x1.2 instead of x1.07). The worker lets go of the parent's lake
    lock and dies with the parent (:func:`pipeline.core.lake.detach_forked_worker`)."""
    detach_forked_worker()
    gc.freeze()


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PartCompaction:
    """When and how far a night merges the tables' small parts. Each night that reads a few
    files leaves one small part set (the files of one run chunk, one per table) that every
    later query opens; a year of nights would leave hundreds. A set is small under
    ``small_bytes``, and worth merging when the archive files holding its current rows come
    to at most ``set_bytes`` (a set held by a huge file is left alone: merging it would cost
    that file's whole read, and would be tried again every night). With more than
    ``max_small`` such sets, a night reads the files holding the rows of the cheapest of them
    again whole, down to half that many sets and up to ``night_bytes`` of files: their rows go
    to that night's parts under a new generation (the later stages redo their sessions, as for
    any file read again), and the old parts, which then hold no current row, are deleted once
    the night has committed."""
    small_bytes: int = 4 * 2**20
    max_small: int = 32
    set_bytes: int = 64 * 2**20
    night_bytes: int = 128 * 2**20

    def small(self, set_bytes: dict[str, int]) -> list[str]:
        """The small part sets among ``set_bytes`` (:meth:`Lake.part_set_bytes`)."""
        return [name for name, size in set_bytes.items() if size < self.small_bytes]


PART_COMPACTION = PartCompaction()


@dataclasses.dataclass
class IngestSummary:
    run_id: str
    lake: str
    files: int = 0
    files_new: int = 0
    files_appended: int = 0
    files_reingested: int = 0
    files_unchanged: int = 0
    files_problem: int = 0
    files_unrecognized: int = 0
    lines: int = 0
    records: int = 0
    quarantined: int = 0
    quarantined_errors: int = 0
    held_back: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    problems: list[IngestProblem] = dataclasses.field(default_factory=list)
    unrecognized: list[str] = dataclasses.field(default_factory=list)
    # unrecognised files named on the command line (not found in a folder): --strict fails
    unrecognized_named: list[str] = dataclasses.field(default_factory=list)
    superseded: list[str] = dataclasses.field(default_factory=list)
    # no reader's, and no news: agents' companion files, files with nothing in them yet
    skipped: list[str] = dataclasses.field(default_factory=list)
    # transcripts in a form no reader opens (compressed, .ndjson, .JSONL): said in a warning
    unread: list[str] = dataclasses.field(default_factory=list)
    own_folders: list[str] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)   # sources no longer there
    # small parts merged (PartCompaction): the files read again whole for it, the parts deleted
    files_compacted: int = 0
    parts_merged: int = 0
    # things a person should know that are no line's fault (a forced --format that read
    # records but no message, ...)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def compaction_note(self) -> str | None:
        """What merging the small parts did this run, in words (None when it did nothing)."""
        if not self.files_compacted:
            return None
        return (f"small table parts merged: {self.files_compacted} files read again whole, "
                f"{self.parts_merged} part files deleted")


def _chunks(tasks: list[FileTask], chunk_bytes: int, n_workers: int,
            min_bytes: int = 2 * 1024 * 1024) -> list[list[FileTask]]:
    """Group tasks into chunks, biggest files first, with guided sizes: a chunk holds up to
    ``remaining / (2 * workers)`` bytes (between ``min_bytes`` and ``chunk_bytes``), so the
    last chunks are small and no worker is left alone with a big one at the end. A chunk is
    closed before a file would take it over its size (only a file bigger than that stands
    alone), so a chunk's memory does not grow with the size of an archive's biggest files."""
    workers = max(n_workers, 1)
    return contiguous_runs(sorted(tasks, key=lambda t: (-t.size, t.path)), lambda t: t.size,
                           lambda remaining: max(min_bytes, min(chunk_bytes, remaining // (2 * workers))))


def _settled_when_read(read_at: datetime | None, task: FileTask, quiet_minutes: float) -> bool:
    """Had the file already settled when it was last read (its mtime a quiet period before
    that read)? Then its held-back last line was judged settled, and is still not a complete
    JSON object (else it would have been read): the same file gives the same answer, so it
    is not read again every night (nor is ``sources`` rewritten for it)."""
    if read_at is None or quiet_minutes < 0:
        return False
    read_ns = (int(read_at.timestamp()) * 10**6 + read_at.microsecond) * 1000
    return task.mtime_ns <= read_ns - int(quiet_minutes * 60e9)


def _below(roots: list[Path]) -> Callable[[str], bool]:
    """Whether a path is one of ``roots`` or below one of them."""
    bases = [os.path.abspath(root) for root in roots]
    prefixes = tuple(base.rstrip(os.sep) + os.sep for base in bases)
    return lambda path: path in bases or path.startswith(prefixes)


def removed_sources(previous: Iterable[str], roots: list[Path], found: set[str]) -> list[str]:
    """Paths ingested before, below one of ``roots`` (or one of them), not found there now."""
    below = _below(roots)
    return sorted(path for path in previous if path not in found and below(path))


def moved_sources(previous: "KnownSources", roots: list[Path], arrived: dict[str, dict]) -> list[str]:
    """Paths ingested before, outside ``roots``, whose file is gone and whose exact content
    (size and SHA-256) a file read in this run has: the archive was moved or renamed, and its
    old copies are dropped (else their sessions would be read twice and ``apply`` would fail
    on files that are no longer there). A gone file whose content arrived nowhere stays (a
    folder of another run's roots, perhaps on a drive not mounted tonight)."""
    contents = {(s.get("size_bytes"), s.get("sha256")) for s in arrived.values() if s.get("sha256")}
    if not contents:
        return []
    sizes = {size for size, _ in contents}
    below = _below(roots)
    out = []
    for path, fields in previous.compared.items():
        if path in arrived or fields["size_bytes"] not in sizes or below(path):
            continue
        if os.path.lexists(path):
            continue
        row = previous.row(path)
        if (row["size_bytes"], row["sha256"]) in contents:
            out.append(path)
    return sorted(out)


class KnownSources:
    """The lake's ``sources`` by path, read column by column: discovery compares a few fields
    of every file (``compared``), and only the files read again become whole rows (``row``).
    A night with nothing new then costs a few columns, not a dict per file; ``updated`` makes
    the new table from the old one's kept rows and the changed ones, ordered by path."""

    COMPARED = ("size_bytes", "mtime_ns", "format", "ctime_ns", "inode", "held_back")

    def __init__(self, lake: Lake):
        self.lake = lake
        table = lake.read_sources(("path", *self.COMPARED))
        self._paths = table.column(0).to_pylist()
        self._columns = [table.column(name).to_pylist() for name in self.COMPARED]
        self.index = {path: i for i, path in enumerate(self._paths)}
        self.unread: set[str] = set()     # files to read again whole (see forget)

    def lost_parts(self) -> tuple[list[str], set[str]]:
        """The part files the lake's sources name that are gone (:meth:`Lake.lost_parts`),
        and the paths of the files whose current rows they held: those files are read again
        whole (a new generation), so that no row is missing."""
        lost = self.lake.lost_parts()
        if not lost:
            return [], set()
        lists = self.lake.read_sources(("parts",)).column(0).to_pylist()   # in _paths' order
        return sorted(lost), {path for path, parts in zip(self._paths, lists)
                              if parts and not lost.isdisjoint(parts)}

    def piled_up(self, limits: PartCompaction,
                 reads: Callable[[str], bool] = lambda path: True) -> set[str]:
        """The files to read again whole so that the tables' small part sets merge (see
        :class:`PartCompaction`; empty while they are few, the usual night: one listing and a
        stat per part). The cheapest sets go first (the fewest bytes of files to read again),
        until half the limit is left: a merge then comes every ``max_small / 2`` nights of
        appends, not every night. A set is merged only when every file holding its rows is
        one this run ``reads`` (below its paths): a set held by a file of another folder
        would outlive the merge, and its files here would be read again every night for
        nothing. A lake with a source whose parts are unknown (made before ``parts`` was
        kept) is left as it is."""
        small = limits.small(self.lake.part_set_bytes())
        if len(small) <= limits.max_small:
            return set()
        lists = self.lake.read_sources(("parts",)).column(0).to_pylist()   # in _paths' order
        if any(parts is None for parts in lists):
            return set()
        holders: dict[str, set[int]] = {}
        for i, parts in enumerate(lists):
            for part in parts:
                holders.setdefault(part.partition("/")[2], set()).add(i)
        sizes = self._columns[self.COMPARED.index("size_bytes")]
        worth = []
        for name in small:
            held = holders.get(name, set())
            cost = sum(sizes[i] or 0 for i in held)
            if held and cost <= limits.set_bytes and all(reads(self._paths[i]) for i in held):
                worth.append((cost, name, held))
        if len(worth) <= limits.max_small:
            return set()
        chosen: set[int] = set()
        spent = merged = 0
        # by cost, then name (run ids are times: of two sets as cheap, the older first)
        for _cost, _name, held in sorted(worth, key=lambda w: w[:2]):
            extra = sum(sizes[i] or 0 for i in held - chosen)
            if spent + extra <= limits.night_bytes:
                chosen |= held
                spent += extra
                merged += 1
                if merged >= len(worth) - limits.max_small // 2:
                    break
        return {self._paths[i] for i in chosen}

    def forget(self, paths: set[str]) -> None:
        """Read ``paths`` again whole, whatever their size and mtime (see :meth:`lost_parts`)."""
        self.unread = paths
        self.__dict__.pop("unchanged_signatures", None)

    @functools.cached_property
    def compared(self) -> dict[str, dict]:
        """The compared fields of every file, by path."""
        return {path: dict(zip(self.COMPARED, values))
                for path, values in zip(self._paths, zip(*self._columns))}

    def compared_of(self, path: str) -> dict | None:
        """The compared fields of one file (None: not in the lake), without making
        :attr:`compared` for the whole archive (a night that looks at a few files)."""
        i = self.index.get(path)
        if i is None:
            return None
        return {name: column[i] for name, column in zip(self.COMPARED, self._columns)}

    @functools.cached_property
    def unchanged_signatures(self) -> dict[str, tuple[tuple[int, int, int, int], str]]:
        """((size, mtime, ctime, inode), format) by path, of the files a run with the same
        values need not look at: a format known, ctime and inode kept (a lake made before
        they were kept compares them in :meth:`FileTask.same_file_as`), nothing held back
        (a held-back line may be read once the file has settled). The four numbers are
        compared as one tuple with :func:`stat_signature` (one comparison per file of the
        archive on a night with nothing new)."""
        size, mtime, fmt, ctime, inode, held = self._columns
        return {path: ((s, m, c, i), f) for path, s, m, f, c, i, h
                in zip(self._paths, size, mtime, fmt, ctime, inode, held)
                if f and not h and c is not None and i is not None and path not in self.unread}

    def read_at(self, path: str) -> datetime | None:
        """When the file was last read (``ingested_at``; one column, read on first use)."""
        i = self.index.get(path)
        return None if i is None else self.lake.read_sources(("ingested_at",)).column(0)[i].as_py()

    @functools.cached_property
    def table(self) -> pa.Table:
        """The whole table (read when a file is read again: rows in the same order)."""
        return self.lake.read_sources()

    def row(self, path: str) -> dict | None:
        """The whole row of ``path``; of a file to read again whole (:meth:`forget`), without
        the watermark and digests that would let it be read on or kept as it is."""
        i = self.index.get(path)
        if i is None:
            return None
        row = self.table.slice(i, 1).to_pylist()[0]
        if path in self.unread:
            row.update(watermark=None, watermark_sha256=None, sha256=None)
        return row

    def updated(self, changed: dict[str, dict], dropped: set[str]) -> pa.Table:
        """The table with ``changed`` rows (by path) replacing or joining the old ones and
        the ``dropped`` paths gone; sorted by path (UTF-8 byte order is code point order)."""
        import pyarrow.compute as pc

        keep = [i for path, i in self.index.items() if path not in changed and path not in dropped]
        parts = [self.table.take(pa.array(sorted(keep), type=pa.int64()))]
        if changed:
            parts.append(pa.Table.from_pylist(list(changed.values()), schema=SOURCES))
        table = pa.concat_tables(parts)
        order = pc.sort_indices(table, sort_keys=[("path", "ascending")])
        return table.take(order).combine_chunks()


def _forced_format_warnings(lake: Lake, format: str, results: list[FileResult]) -> list[str]:
    """A file read with a forced ``--format`` whose records gave no message at all is most
    likely another format: one warning per such file, naming the format it looks like."""
    if not results:
        return []
    ids = [r.source["source_id"] for r in results if r.records]
    if not ids:
        return []
    with lake.connect() as con:
        with_messages = {row[0] for row in con.execute(
            sqlfiles.load("select_sources_with_content"), {"source_ids": ids}).fetchall()}
    out = []
    for res in sorted(results, key=lambda r: r.path):
        if not res.records or res.source["source_id"] in with_messages:
            continue
        try:
            with open(res.path, "rb") as handle:
                looks = detect(res.path, handle.read(SNIFF_BYTES))
        except OSError:
            looks = None
        guess = f"it looks like {looks}" if looks and looks != format else \
            "auto-detection does not recognise it either"
        out.append(f"{res.path}: read as --format {format}: {res.records:,} records but no "
                   f"message ({guess}; drop --format to auto-detect)")
    return out


def _known_problems(lake: Lake, rereads: list[FileResult]) -> dict[str, set[tuple]]:
    """The quarantined lines (byte offset, reason) the lake already holds for files read
    again whole (lost parts, merged small parts), by source id: reading a file again whole
    is housekeeping, and a line it quarantines again is not news (nor, under ``--strict``, a
    failed night); a line found for the first time still is. Asked of the lake only when such
    a file has a quarantined line (its rows are those of the last commit until this run's)."""
    ids = sorted({res.source["source_id"] for res in rereads
                  if res.problems and res.source.get("source_id")})
    if not ids:
        return {}
    known: dict[str, set[tuple]] = {}
    with lake.connect() as con:
        for source_id, byte_offset, reason in con.execute(
                sqlfiles.load("select_quarantined_lines_of_sources"), {"source_ids": ids}).fetchall():
            known.setdefault(source_id, set()).add((byte_offset, reason))
    return known


def _lost_parts_warning(lost: list[str], rereading: set[str], read: set[str],
                        dropped: set[str]) -> str:
    """What a night says of part files gone from the lake (see ``KnownSources.lost_parts``):
    the files read again to restore their rows, and those it could not read (not below the
    paths read this time), whose rows stay missing until a run reads them."""
    what, held = (f"{len(lost)} part files of the lake's tables are", "they") \
        if len(lost) > 1 else ("a part file of the lake's tables is", "it")
    restored = rereading & read
    text = (f"{what} missing ({first_few(lost)}): the {len(restored)} files whose rows {held} "
            "held are read again whole")
    waiting = sorted(rereading - read - dropped)
    if waiting:
        text += ("; the rows of these files, not below the paths read now, stay missing until "
                 f"a run reads them: {first_few(waiting)}")
    return text


def make_run_id(started: datetime) -> str:
    return started.strftime("%Y%m%dT%H%M%S") + f"{started.microsecond:06d}"


def ingest(paths: list[str | Path] | None = None, *, lake: Lake, format: str | None = None,
           workers: int | None = None, chunk_bytes: int = 32 * 1024 * 1024,
           batch_bytes: int = 32 * 1024 * 1024, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
           quiet_minutes: float = DEFAULT_QUIET_MINUTES,
           progress: Callable[[int, int], None] | None = None,
           run_id: str | None = None, engine=None,
           compaction: PartCompaction | None = None) -> IngestSummary:
    """Ingest ``paths`` (files or folders; default: the standard locations) into ``lake``.

    A file ingested before that is no longer below any of ``paths`` it was found under
    (deleted, or now superseded) leaves ``sources``: its rows disappear from every view.
    ``run_id``: the nightly run this ingest is part of (its run-log row is updated; by
    default the ingest logs a run of its own).
    ``quiet_minutes``: a file not modified for this long before the run is settled, and its
    complete last line is read even without a newline (negative: always hold it back).
    ``engine`` (:mod:`pipeline.stages.engine`; default: the activated one, else local): with Ray,
    each chunk is a Ray task writing the same parts as a local worker; the driver commits.
    ``compaction``: when small parts are merged (default :data:`PART_COMPACTION`)."""
    from pipeline.stages import engine as engines

    chosen = engines.resolve(engine)
    if quiet_minutes != quiet_minutes:   # NaN
        raise UsageError("quiet_minutes must be a number")
    started = time.perf_counter()
    if format is not None and format not in READERS:
        reader_class(format)  # raises a UsageError naming the choices
    roots = [Path(p) for p in paths] if paths else standard_locations()
    require_paths(roots)
    if not roots:
        raise UsageError("no archive given and none of ~/.claude/projects, ~/.gemini/tmp, "
                         "~/.codex/sessions exists here",
                         hint="pass the folders or files to read, e.g. ctxlake ingest ./transcripts")
    run_started = datetime.now(timezone.utc)
    standalone = run_id is None
    run_id = run_id or make_run_id(run_started)
    settled_before_ns = None if quiet_minutes < 0 else \
        int(run_started.timestamp() * 1e9) - int(quiet_minutes * 60e9)
    summary = IngestSummary(run_id=run_id, lake=str(lake.root))
    with lake.lock():
        lake.init()
        if standalone:      # the nightly job did it under this same lock just before
            lake.gc_uncommitted()
        lake.collect_dead_parts()       # what the last run's new generations superseded
        previous = KnownSources(lake)
        lost, rereading = previous.lost_parts()
        merging = previous.piled_up(compaction or PART_COMPACTION, _below(roots))
        previous.forget(rereading | merging)
        found = discover(roots, format=format, known=previous)
        summary.superseded = found.superseded
        summary.unrecognized.extend(found.unrecognized)
        summary.own_folders = found.own_folders
        summary.unread = found.unread
        if found.unread:
            summary.warnings.append(
                f"{len(found.unread)} files look like transcripts in a form ctxlake does not read "
                "(compressed, or not named .jsonl, .json or .traj): not read; decompress or rename "
                "them to read them: " + first_few(found.unread))
        todo: list[FileTask] = []
        results: list[FileResult] = []
        unchanged = list(found.unchanged)   # kept as they are in sources (not even made rows)
        for task in found.tasks:
            prev = task.prev
            # same size, mtime, format (a problem file has none, before and now), inode and
            # ctime: not read, unless its held-back last line may be read now that the file
            # has settled
            settling = bool(prev and prev.get("held_back")) and settled_before_ns is not None \
                and task.mtime_ns <= settled_before_ns \
                and not _settled_when_read(previous.read_at(task.path), task, quiet_minutes)
            if prev and task.same_file_as(prev) and not settling \
                    and task.path not in previous.unread:
                unchanged.append(task.path)
            else:
                task.prev = previous.row(task.path)   # the whole row, for the reader
                todo.append(task)
        total_bytes = sum(t.size for t in todo)
        n_workers = workers or os.cpu_count() or 1
        chunks = _chunks(todo, chunk_bytes, n_workers)
        jobs = [(str(lake.root), run_id, i, chunk, batch_bytes, max_line_bytes, settled_before_ns)
                for i, chunk in enumerate(chunks)]
        done_bytes = 0
        if progress:
            progress(0, total_bytes)
        if not engines.is_local(chosen):
            # a Ray worker's working directory is not the driver's: the lake by absolute path
            root = os.path.abspath(lake.root)
            outputs = chosen.map(process_chunk, [(root, *job[1:]) for job in jobs])
            pool = None
        elif n_workers <= 1 or len(jobs) <= 1 or not engines.fork_safe():
            outputs = map(process_chunk, jobs)
            pool = None
        else:
            # fork: workers start at once and any caller works, even a script without a
            # __main__ guard (forkserver/spawn re-import it). Workers use pyarrow and DuckDB
            # only, never polars, whose thread pool does not survive a fork.
            pool = ProcessPoolExecutor(max_workers=min(n_workers, len(jobs)),
                                       mp_context=multiprocessing.get_context("fork"),
                                       initializer=_init_worker)
            outputs = pool.map(process_chunk, jobs)
        try:
            # the persisted views depend on the SQL and the lake's layout, not on the rows:
            # written (when stale) while the workers read, off the run's critical path
            if not lake.duckdb_file_current():
                lake.update_duckdb_file()
            for chunk_results in outputs:
                for res in chunk_results:
                    results.append(res)
                    done_bytes += res.source.get("size_bytes") or 0
                if progress:
                    progress(done_bytes, total_bytes)
        finally:
            if pool is not None:
                pool.shutdown()
        # commit: sources then runs (the run id listed in runs makes its parts visible for GC)
        summary.files_unchanged = summary.files = len(unchanged)
        dropped = set(removed_sources(previous.index, roots,
                                      {t.path for t in found.tasks} | set(found.unchanged)))
        new_sources: dict[str, dict] = {}
        known_problems = _known_problems(lake, [res for res in results if res.path in previous.unread])
        for res in results:
            if res.mode in ("unrecognized", "superseded", "skipped"):
                # a file named on the command line is never skipped without a word
                mode = "unrecognized" if res.mode == "skipped" and res.path in found.named \
                    else res.mode
                getattr(summary, mode).append(res.path)
                continue
            new_sources[res.path] = res.source
            summary.files += 1
            summary.lines += res.lines
            summary.records += res.records
            summary.quarantined += res.quarantined
            summary.held_back += res.held_back
            summary.bytes_read += res.bytes_read
            seen = known_problems.get(res.source.get("source_id"), ())
            summary.problems.extend(p for p in res.problems
                                    if not p.line_no or (p.byte_offset, p.reason) not in seen)
            attr = {"new": "files_new", "appended": "files_appended",
                    "reingested": "files_reingested", "unchanged": "files_unchanged",
                    "problem": "files_problem"}[res.mode]
            setattr(summary, attr, getattr(summary, attr) + 1)
        moved = moved_sources(previous, roots, new_sources)
        dropped.update(moved)
        summary.removed = sorted(dropped)
        if lost:
            summary.warnings.append(_lost_parts_warning(lost, rereading, set(new_sources), dropped))
        # commit: sources.parquet is the commit point (its run ids keep this run's parts);
        # runs.parquet is the log, written after (a crash between the two loses a log line only).
        # Nothing read and nothing gone: sources stays as it is (a night with nothing new
        # writes no table).
        if new_sources or dropped:
            write_parquet_atomic(previous.updated(new_sources, dropped), lake.sources_path)
        crash_point("ingest:committed")
        errors = sum(1 for p in summary.problems if p.severity == "error")
        run = dict(run_id=run_id, files=summary.files, files_skipped=summary.files_unchanged,
                   lines=summary.lines, records=summary.records,
                   quarantined=summary.quarantined, held_back=summary.held_back,
                   ingest_committed=True)
        if standalone:
            run.update(started_at=run_started, finished_at=datetime.now(timezone.utc),
                       command="ingest", status="problems" if errors else "ok",
                       exit_code=0, pid=os.getpid())
        lake.record_run(run)
        if merging:     # the small parts hold no current row now: gone before the stages read
            summary.files_compacted = len(merging & set(new_sources))
            summary.parts_merged = lake.collect_dead_parts()
        summary.problems.sort(key=lambda p: (p.path, p.line_no))
        summary.unrecognized.sort()
        summary.unrecognized_named = [p for p in summary.unrecognized if p in found.named]
        summary.superseded.sort()
        summary.skipped.sort()
        summary.files_unrecognized = len(summary.unrecognized)
        if format is not None:
            summary.warnings.extend(_forced_format_warnings(
                lake, format, [r for r in results if r.mode in ("new", "appended", "reingested")]))
        summary.quarantined_errors = sum(1 for p in summary.problems if p.severity == "error")
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary
