"""The stage ledger: what every stage after ingest owes, and one runner that pays it.

Each stage keeps, per item (a session id, or a source id for ``apply``), the input it last
finished (``input_fp``: the session's content fingerprint), the settings it ran with
(``settings_fp``: a hash of the stage's settings, which include those of the stages it reads),
the run that did it, a status and a detail (where its outputs are). It is stored under
``<lake>/ledger/<stage>.parquet``, one file per stage, rewritten atomically at the stage's end
and after a batch committed once the stage has run a while (``COMMIT_WRITE_AFTER_S``).
A row with an empty item is the stage's marker: the lake state and settings it last finished
completely.

A run asks each stage for the items it owes (:meth:`Ledger.owed`): those whose input or
settings changed, whose outputs are missing, that failed, or that an interrupted run left
unfinished; and the items it recorded that the lake no longer has (removed: their rows and
outputs go). When the lake state and the settings equal the marker and no recorded output is
missing, the stage owes nothing and is not even asked for its inputs (a night with nothing
new costs a few file reads).

A stage's outputs are written before its ledger rows, so a run killed between the two redoes
the work (stages are idempotent and deterministic); a run killed before the marker is written
lets the next run compute what is owed again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.crash import crash_point, die_with
from pipeline.core.errors import CorruptPartError
from pipeline.core.store import file_sha256
from pipeline.core.lake import (Lake, atomic_write_bytes, conform_table, detach_forked_worker,
                                forget_inherited_connections, read_parquet_cached,
                                write_parquet_atomic)

LEDGER = pa.schema([
    ("stage", pa.string()),
    ("item", pa.string()),          # session id (or source id); '' = the stage's marker
    ("input_fp", pa.string()),      # the item's input fingerprint (marker: the lake state)
    ("settings_fp", pa.string()),
    ("run_id", pa.string()),
    ("status", pa.string()),        # done | failed
    ("detail", pa.string()),        # JSON: where the item's outputs are, what failed
])

MARKER = ""

# The largest lake (source lines) on which full redos run in both lanes at once: their peaks
# add. Cold runs, PSS of the process tree, in turn -> beside: 500 MB demo (140k lines)
# 986 MB -> 1.14 GB and 33.8 s -> 26.1 s; 1 GB demo (~280k lines) 1.5 GB -> 1.67 GB, over
# the 1.5 GB the nightly job keeps to. Lines, not bytes: the side lane's tables hold a row per
# call and message (a Claude-only archive of large tool results: 3.5k lines in 500 MB).
BESIDE_FULL_MAX_LINES = 200_000
# bumped when a stage's output format changes: every item is redone under the new one
LAYOUT = 1
# A batch a stage commits is written to its ledger file at once only when the stage has run
# this long since its start or its last write (a killed run keeps that progress); otherwise
# with the stage's marker at its end, one write instead of two (~10 ms each on a 500 MB
# lake: a whole file per stage). A run killed before that write redoes those items, as a run
# killed before the commit does: stages are idempotent, so the next run ends the same.
COMMIT_WRITE_AFTER_S = 5.0


class _LedgerFile:
    """One version of a stage's ledger file as read whole in this process: for a stage that
    owes something, or a file written before heads. A night with nothing new reads the heads
    in the footers and the details column only. What a stage compares per item (:attr:`keys`)
    is read from three columns; a whole row is made into a dict only when asked for
    (:meth:`row`): the ledger of a 500 MB lake has ~3.6k rows per stage, and seven stages a
    night made every one of them into a dict and back."""

    def __init__(self, table: pa.Table):
        self.table = conform_table(table, LEDGER)   # a column the file lacks is NULL
        self._keys: dict[str, tuple] | None = None
        self._index: dict[str, int] | None = None
        self.head = _head_of(self.table)

    @property
    def keys(self) -> dict[str, tuple]:
        """Item -> ``(input_fp, settings_fp, status)``, the marker included."""
        if self._keys is None:
            columns = [self.table.column(name).to_pylist()
                       for name in ("item", "input_fp", "settings_fp", "status")]
            self._keys = dict(zip(columns[0], zip(*columns[1:])))
        return self._keys

    def row(self, item: str) -> dict | None:
        """The whole row of ``item`` (None: no such item)."""
        if self._index is None:
            self._index = {key: i for i, key in enumerate(self.keys)}
        i = self._index.get(item)
        return None if i is None else self.table.slice(i, 1).to_pylist()[0]


class RecordedRows(Mapping):
    """The rows a stage recorded before this run (item -> row dict, the marker left out),
    each made into a dict when it is read."""

    def __init__(self, ledger_file: _LedgerFile):
        self.file = ledger_file
        self._items = [item for item in ledger_file.keys if item != MARKER]

    def __getitem__(self, item: str) -> dict:
        row = self.file.row(item) if item != MARKER else None
        if row is None:
            raise KeyError(item)
        return row

    def __contains__(self, item: object) -> bool:
        return item != MARKER and item in self.file.keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


# each ledger file version read in this process (table id -> its reading)
_FILES: dict[int, _LedgerFile] = {}

# the schema metadata key of a ledger file's head: its marker, whether every item is done and
# how many rows it has, so that a night with nothing new reads file footers, not the rows
HEAD_KEY = b"ctxlake.ledger.head"


@dataclasses.dataclass(frozen=True)
class _Head:
    marker: dict | None
    all_done: bool
    rows: int


def _head_of(table: pa.Table) -> _Head:
    """The head of a stage's rows: its marker, whether every item is done, its row count
    (what a file's footer keeps, :meth:`Ledger._write_table`)."""
    import pyarrow.compute as pc   # on use: a night with nothing new reads footers only

    markers = table.filter(pc.equal(table.column("item"), MARKER)).to_pylist()
    return _Head(markers[0] if markers else None,
                 pc.sum(pc.not_equal(table.column("status"), "done")).as_py() in (None, 0),
                 table.num_rows)


_DETAILS: dict[int, tuple[pa.Table, dict[str, str | None]]] = {}
_HEADS: dict[str, tuple[tuple[int, int, int], _Head | None]] = {}


def _read_head(path: Path) -> _Head | None:
    """The head a ledger file's footer holds (None: no file, or one written before heads,
    whose rows must be read), read once per version of the file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _HEADS.get(str(path))
    if cached is not None and cached[0] == key:
        return cached[1]
    head = None
    try:
        metadata = pq.read_schema(path).metadata or {}
        if HEAD_KEY in metadata:
            value = json.loads(metadata[HEAD_KEY])
            head = _Head(value["marker"], bool(value["all_done"]), int(value["rows"]))
    except (OSError, pa.ArrowException, ValueError, KeyError, TypeError):
        head = None          # read whole (Ledger.file), which says what is wrong with it
    _HEADS[str(path)] = (key, head)
    return head


# json.dumps with these options would make an encoder per call (a stage fingerprints every
# session of the lake); one made once gives the same text
_FINGERPRINT_ENCODER = json.JSONEncoder(sort_keys=True, default=str, separators=(",", ":"))


def fingerprint(value: Any) -> str:
    """A short stable hash of a JSON-able value (settings, lists of fingerprints)."""
    text = _FINGERPRINT_ENCODER.encode(value)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


_STATES: dict[tuple, str] = {}


def lake_state(lake: Lake) -> str:
    """A fingerprint of what the lake holds: the bytes of ``sources.parquet`` (its sources,
    their generations, lengths and digests). A night that reads nothing writes no
    ``sources``, so its state stays as it was; a rewrite with the same sources (a file
    touched and read again) gives another state, which costs the stages a look at their
    inputs, never a wrong skip. Hashed, not decoded: a few MB/s of parsing columns of every
    source was the largest cost of a night with nothing new on a large lake. Kept per
    version of the file (inode, size, mtime) in this process."""
    path = lake.sources_path
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return fingerprint(["sources", None])
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    state = _STATES.get(key)
    if state is None:
        state = fingerprint(["sources", file_sha256(path)])
        _STATES.clear()
        _STATES[key] = state
    return state


class Listings:
    """Whether files exist, from one listing per folder (not a stat per file): the nightly
    job checks every output it ever wrote, each night. Each folder's mtime is taken before
    it is listed (``folders``), so that a later run can tell the folder is as listed."""

    def __init__(self):
        self._names: dict[str, set[str]] = {}
        self.folders: dict[str, int | None] = {}   # folder -> its mtime_ns (None: none)

    def has(self, path: str | Path) -> bool:
        return self.holds(*os.path.split(os.fspath(path)))

    def holds(self, folder: str, name: str) -> bool:
        """Whether ``folder`` holds a file ``name``."""
        names = self._names.get(folder)
        if names is None:
            try:
                self.folders[folder] = os.stat(folder).st_mtime_ns
                with os.scandir(folder) as listing:
                    names = {entry.name for entry in listing if entry.is_file()}
            except OSError:
                self.folders[folder] = None
                names = set()
            self._names[folder] = names
        return name in names


# the suffix of a stage's note of outputs found whole (``Ledger.missing``): inodes and mtimes
# of this machine, so a remote lake's mirror never pushes it (``pipeline.core.remote``)
CHECKED_SUFFIX = ".checked.json"

# a folder whose mtime is this recent may still change within the same clock tick (a
# filesystem's timestamps can be as coarse as a few ms, FAT's 2 s): not trusted as unchanged
_SETTLED_NS = 3_000_000_000


def _folders_unchanged(folders: dict[str, int | None]) -> bool:
    for folder, mtime in folders.items():
        try:
            if mtime is None or os.stat(folder).st_mtime_ns != mtime:
                return False
        except OSError:
            return False
    return True


@dataclasses.dataclass
class ItemResult:
    status: str = "done"            # done | failed
    detail: dict | None = None


@dataclasses.dataclass
class Owed:
    """What one stage owes this run."""

    todo: list[str]                  # items to (re)do, sorted
    removed: list[str]               # items recorded before that the lake no longer has
    full: bool                       # the settings changed (or nothing was ever recorded)
    inputs: dict[str, str]           # every current item -> its input fingerprint
    recorded: RecordedRows           # the ledger rows before this run (item -> row)

    @property
    def nothing(self) -> bool:
        return not self.todo and not self.removed


@dataclasses.dataclass(frozen=True)
class Pending:
    """How much one stage owes now (``ctxlake status``)."""

    todo: int = 0                    # items to (re)do
    removed: int = 0                 # items to remove
    full: bool = False               # all of them: the settings changed

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class StageReport:
    """What one stage did in a run (the ``runs`` row keeps these per stage)."""

    stage: str
    seconds: float = 0.0
    done: int = 0
    skipped: int = 0
    failed: int = 0
    removed: int = 0
    status: str = "ok"               # ok | problems | failed | skipped
    error: str | None = None
    warning: str | None = None       # said, not a failure (e.g. an unreadable ledger file)
    result: Any = None               # the stage function's own summary

    def figures(self) -> dict:
        return {"seconds": round(self.seconds, 3), "done": self.done, "skipped": self.skipped,
                "failed": self.failed, "removed": self.removed, "status": self.status,
                **({"error": self.error} if self.error else {}),
                **({"warning": self.warning} if self.warning else {})}


@dataclasses.dataclass
class Stage:
    """One stage as the runner sees it.

    ``inputs()``: every current item and its input fingerprint. ``work(owed, commit)`` does
    ``owed.todo`` (all items when ``owed.full``) and removes ``owed.removed``, calling
    ``commit({item: ItemResult})`` as batches finish; it returns the stage's own summary.
    ``missing(details, listings)``: of the recorded items (item -> detail JSON), those whose
    outputs are gone (checked every run, with ``listings``, a :class:`Listings`, for the
    folders: an unchanged folder is not listed again).
    ``upstream``: the stages whose results this one reads. Their markers fold into this
    stage's lake state, and, when ``same_items`` (both keyed by session), an item's input
    fingerprint includes its upstream rows, so an item an upstream stage redid (or that failed
    there, and is not done here until it is done there) is owed again."""

    name: str
    settings: dict
    inputs: Callable[[], dict[str, str]]
    work: Callable[[Owed, Callable[[dict[str, ItemResult]], None]], Any]
    missing: Callable[[dict[str, str | None], Listings], set[str]] | None = None
    upstream: tuple[str, ...] = ()
    same_items: bool = True
    # reads no table another stage writes and none reads its tables in a run: it may run in
    # a forked process beside the others (Runner.run_beside)
    beside: bool = False

    @property
    def settings_fp(self) -> str:
        return fingerprint(self.settings)


class Ledger:
    """The ledger files of one lake (see the module docstring)."""

    def __init__(self, lake: Lake):
        self.lake = lake
        self.root = lake.root / "ledger"
        self.unreadable: dict[str, str] = {}    # stage -> why its file could not be read
        self._empty: dict[tuple, pa.Table] = {}

    def path(self, stage: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stage)
        return self.root / f"{safe}-{hashlib.sha256(stage.encode()).hexdigest()[:8]}.parquet"

    def _table(self, stage: str, columns: tuple[str, ...] | None = None) -> pa.Table:
        """The stage's ledger file (``columns`` of it). A file that cannot be read (cut
        short, not Parquet) counts as no ledger: the stage redoes every item and its next
        write replaces the file; what was wrong is kept in ``unreadable``."""
        path = self.path(stage)
        try:
            return read_parquet_cached(path, LEDGER, columns=columns)
        except (OSError, pa.ArrowException) as error:
            self.unreadable.setdefault(stage, f"{path}: {error}")
            key = (stage, columns)
            if key not in self._empty:
                empty = LEDGER.empty_table()
                self._empty[key] = empty if columns is None else empty.select(list(columns))
            return self._empty[key]

    def file(self, stage: str) -> _LedgerFile:
        table = self._table(stage)
        cached = _FILES.get(id(table))
        if cached is None or cached.table is not table:
            _FILES[id(table)] = cached = _LedgerFile(table)
        return cached

    def keys(self, stage: str) -> dict[str, tuple]:
        """Item -> ``(input_fp, settings_fp, status)`` (the marker under ``MARKER``): what
        is compared per item, without making every row a dict. Not to be changed."""
        return self.file(stage).keys

    def _checked_path(self, stage: str) -> Path:
        return self.path(stage).with_suffix(CHECKED_SUFFIX)

    def _file_key(self, stage: str) -> list[int] | None:
        try:
            st = os.stat(self.path(stage))
        except FileNotFoundError:
            return None
        return [st.st_ino, st.st_size, st.st_mtime_ns]

    def missing(self, stage: Stage, *, record: bool = False) -> set[str]:
        """The recorded items of ``stage`` whose outputs are gone (``stage.missing``).

        When an earlier run found none missing in folders that have not changed since (same
        ledger file, same folder mtimes: removing or renaming a file changes its folder's),
        nothing is read or listed: a night with nothing new does not read every output's
        detail. ``record``: note such a finding (a run does, under the lake's lock), only for
        folders settled for a few seconds (see ``_SETTLED_NS``)."""
        key = self._file_key(stage.name)
        checked = self._checked_path(stage.name)
        try:
            note = json.loads(checked.read_bytes())
            if note.get("ledger") == key and _folders_unchanged(note.get("folders") or {}):
                return set()
        except (OSError, ValueError, AttributeError):
            pass
        details = self.details(stage.name)
        listings = Listings()
        found = stage.missing(details, listings) if details else set()
        settled = time.time_ns() - _SETTLED_NS
        if record and not found and key is not None and all(
                mtime is not None and mtime < settled for mtime in listings.folders.values()):
            atomic_write_bytes(checked, json.dumps({"ledger": key, "folders": listings.folders},
                                                   sort_keys=True).encode())
        return found

    def head(self, stage: str) -> _Head:
        """The stage's marker, whether all its items are done, and its row count: from the
        file's footer (a file written before heads is read whole)."""
        head = _read_head(self.path(stage))
        return self.file(stage).head if head is None else head

    def marker(self, stage: str) -> dict | None:
        return self.head(stage).marker

    def finished(self, stage: str, state: str, settings_fp: str) -> bool:
        """Whether ``stage`` last finished completely at this lake ``state`` (as the stage
        sees it) with these settings, and no item of it failed."""
        head = self.head(stage)
        marker = head.marker
        return marker is not None and marker["input_fp"] == state \
            and marker["settings_fp"] == settings_fp and head.all_done

    def details(self, stage: str) -> dict[str, str | None]:
        """Item -> its detail (JSON text), the marker left out (two columns read, not all)."""
        table = self._table(stage, ("item", "detail"))
        cached = _DETAILS.get(id(table))
        if cached is None or cached[0] is not table:
            details = dict(zip(table.column("item").to_pylist(), table.column("detail").to_pylist()))
            details.pop(MARKER, None)
            _DETAILS.clear()
            _DETAILS[id(table)] = cached = (table, details)
        return cached[1]

    def write(self, stage: str, rows: dict[str, dict]) -> None:
        ordered = [rows[item] for item in sorted(rows)]
        self._write_table(stage, pa.Table.from_pylist(ordered, schema=LEDGER))

    def write_changes(self, stage: str, base: _LedgerFile, changed: dict[str, dict],
                      dropped: Iterable[str] = ()) -> None:
        """The stage's file as ``base`` (the version this run's ``owed`` read) with its marker
        and the items of ``dropped`` taken out and the rows of ``changed`` put in: the rows
        kept stay Arrow (the same file as :meth:`write` of every row as a dict)."""
        import pyarrow.compute as pc

        kept = base.table
        gone = sorted(set(changed) | set(dropped) | {MARKER})
        if kept.num_rows:
            kept = kept.filter(pc.invert(pc.is_in(kept.column("item"),
                                                  value_set=pa.array(gone, pa.string()))))
        added = pa.Table.from_pylist([changed[item] for item in sorted(changed)], schema=LEDGER)
        merged = pa.concat_tables([kept, added])
        self._write_table(stage, merged.sort_by("item").combine_chunks())

    def _write_table(self, stage: str, table: pa.Table) -> None:
        """Write a stage's rows (sorted by item) with its head in the schema's metadata."""
        head = dataclasses.asdict(_head_of(table))
        table = table.replace_schema_metadata({HEAD_KEY: json.dumps(head, sort_keys=True)})
        write_parquet_atomic(table, self.path(stage))

    def reset_all(self) -> None:
        """Every stage owes all its items again (:meth:`reset`)."""
        if not self.root.exists():
            return
        for path in sorted(self.root.glob("*.parquet")):
            self._reset_file(path)

    def reset(self, stage: str) -> None:
        """``stage`` owes all its items again, its rows kept (so that what it recorded for
        items the lake no longer has is still removed): each row's settings are set to a value
        no stage has. For work done outside the ledger over the stage's outputs (a manual
        ``summarize``): the nightly job no longer trusts what it recorded."""
        path = self.path(stage)
        if path.exists():
            self._reset_file(path)

    def _reset_file(self, path: Path) -> None:
        """A file that cannot be read is removed (the same as no ledger)."""
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException):
            path.unlink()
            return
        stage = table.column("stage")[0].as_py() if table.num_rows else None
        if stage is not None:
            rows = {row["item"]: {**row, "settings_fp": "reset"} for row in table.to_pylist()}
            self.write(stage, rows)

    def drop_part(self, path: str | None) -> bool:
        """Remove a damaged derived part (``Lake.remove_derived_part``: only a regular file of
        a derived folder of this lake) and make every stage owe everything (:meth:`reset_all`:
        any stage may read that table). False, and nothing done, for any other path."""
        if not path or not self.lake.remove_derived_part(path):
            return False
        self.reset_all()
        return True

    def stages(self) -> list[str]:
        """Every stage with a ledger file."""
        if not self.root.exists():
            return []
        names = []
        for path in sorted(self.root.glob("*.parquet")):
            table = pq.read_table(path, columns=["stage"])
            if table.num_rows:
                names.append(table.column(0)[0].as_py())
        return names

    def stage_state(self, stage: Stage, state: str) -> str:
        """The lake state as ``stage`` sees it: the sources and its upstream stages' markers."""
        markers = []
        for name in stage.upstream:
            marker = self.marker(name) or {}
            markers.append([marker.get("input_fp"), marker.get("settings_fp"), marker.get("run_id")])
        return fingerprint([state, markers]) if stage.upstream else state

    def upstream_keys(self, stage: Stage) -> list[dict[str, tuple]]:
        """Per upstream stage (when keyed by the same items): item -> its
        ``(input_fp, settings_fp, status)`` there."""
        return [self.keys(name) for name in stage.upstream] if stage.same_items else []

    def owed(self, stage: Stage, state: str, *, check_missing: bool = True,
             record: bool = False) -> Owed | None:
        """What ``stage`` owes, or None when it owes nothing (marker current, nothing failed,
        no output missing: its inputs are not even computed). ``record``: see :meth:`missing`."""
        state = self.stage_state(stage, state)
        settings_fp = stage.settings_fp
        missing: set[str] = set()
        if stage.missing and check_missing and self.head(stage.name).rows:
            missing = self.missing(stage, record=record)
        if not missing and self.finished(stage.name, state, settings_fp):
            return None
        ledger_file = self.file(stage.name)
        items = {k: v for k, v in ledger_file.keys.items() if k != MARKER}
        inputs = stage.inputs()
        upstream = self.upstream_keys(stage)
        if upstream:
            inputs = {item: fingerprint([fp] + [_row_key(keys.get(item)) for keys in upstream])
                      for item, fp in inputs.items()}
        full = not items or any(key[1] != settings_fp for key in items.values())
        if full:
            todo = sorted(inputs)
        else:
            todo = sorted(item for item, fp in inputs.items()
                          if item not in items or items[item][0] != fp
                          or items[item][2] != "done" or item in missing)
        removed = sorted(set(items) - set(inputs))
        return Owed(todo, removed, full, inputs, RecordedRows(ledger_file))


def _row_key(key: tuple | None) -> list:
    """An upstream item's ``(input_fp, settings_fp, status)`` as a fingerprint takes it."""
    return [None, None, "missing"] if key is None else list(key)


class Runner:
    """Runs stages in order for one nightly run, each doing only what it owes."""

    def __init__(self, lake: Lake, run_id: str):
        self.lake = lake
        self.run_id = run_id
        self.ledger = Ledger(lake)
        self.reports: list[StageReport] = []
        self.corrupt: str | None = None    # a derived part found unreadable (and removed)
        self._side: _SideLane | None = None      # stages running in a forked process
        self._in_side_lane = False

    def run_beside(self, stages: list[tuple[Stage, Iterable[str]]], shared: dict) -> None:
        """Run ``stages`` in order in one forked process while this one runs the others
        (:meth:`join` collects them; a stage that needs one of them joins first). For
        stages marked ``beside``: they read no table the others write, so the two lanes
        only share the cores. ``shared``: the dict their work writes its results into; what
        they add comes back to it at the join. Nothing is forked when they owe nothing (a
        night with nothing new) or forking is not safe here; they then run in turn now.

        The process keeps the lake lock's bookkeeping (their stage functions take the lock
        re-entrantly), dies with this one (PR_SET_PDEATHSIG), and at an armed crash point
        kills this one too. A damaged part it meets is reported here and removed by this
        process at the join (one writer of the ledgers)."""
        from pipeline.stages.engine import fork_safe

        inline = not stages or not hasattr(os, "fork") or not sys.platform.startswith("linux") \
            or not fork_safe() or not self._owe_part([stage for stage, _ in stages])
        if inline:
            for stage, needs in stages:
                if self.corrupt:     # as the forked lane does: the run starts again in full
                    break
                self.run(stage, blocked_by=needs)
            return
        import gc

        placeholders = [StageReport(stage.name, status="failed", error="its process ended early")
                        for stage, _ in stages]
        self.reports.extend(placeholders)
        read_end, write_end = os.pipe()
        before = dict(shared)
        gc.freeze()          # the pages of what both lanes inherit stay shared
        pid = os.fork()
        if pid == 0:         # the side lane: never returns
            os.close(read_end)
            self._side_lane(stages, shared, before, write_end)
        os.close(write_end)
        self._side = _SideLane(pid, read_end, placeholders, shared)

    def _owe_part(self, stages: list[Stage]) -> bool:
        """Whether some of ``stages`` owe something, and a full redo (a first run, a changed
        setting) only on a lake of at most :data:`BESIDE_FULL_MAX_LINES` source lines (the
        check :meth:`run` makes first). Two full redos at once add their peaks: on a larger
        lake they run in turn. A stage whose ledger or inputs cannot be read runs in turn
        too, and says why."""
        base = lake_state(self.lake)
        owing = False
        for stage in stages:
            try:
                owed = self.ledger.owed(stage, base)
            except CorruptPartError:
                return False
            if owed is not None and owed.full and not self._small_lake():
                return False
            owing = owing or owed is not None
        return owing

    def _small_lake(self) -> bool:
        lines = self.lake.read_sources(("lines",)).column(0).to_pylist()
        return sum(n or 0 for n in lines) <= BESIDE_FULL_MAX_LINES

    def _side_lane(self, stages, shared: dict, before: dict, write_end: int) -> None:
        import pickle
        import traceback

        status = 0
        try:
            detach_forked_worker(under_parent_lock=True)
            die_with(os.getppid())
            forget_inherited_connections()
            self._in_side_lane = True
            reports = []
            for stage, needs in stages:
                reports.append(self.run(stage, blocked_by=needs))
                if self.corrupt:
                    break
            added = {key: value for key, value in shared.items() if before.get(key) is not value}
            payload = pickle.dumps(("done", reports, added, self.corrupt))
        except BaseException:
            payload = pickle.dumps(("error", traceback.format_exc(limit=8)))
            status = 1
        try:
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
        finally:
            os._exit(status)

    def _reap(self) -> tuple[_SideLane, bytes, int] | None:
        """The side lane's end: what it wrote to its pipe and its wait status (None: none)."""
        import gc

        side, self._side = self._side, None
        if side is None:
            return None
        try:
            with os.fdopen(side.read_end, "rb") as pipe:
                data = pipe.read()
            _, wait_status = os.waitpid(side.pid, 0)
        finally:
            gc.unfreeze()
        return side, data, wait_status

    def abandon(self) -> None:
        """Stop a side lane still under way (this run ended early: an error, an interrupt):
        killed and reaped, so it writes nothing more; its stages are owed again next run."""
        if self._side is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._side.pid, signal.SIGKILL)
            self._reap()

    def join(self) -> None:
        """Wait for the side lane (:meth:`run_beside`) and take its reports and results."""
        import pickle

        ended = self._reap()
        if ended is None:
            return
        side, data, wait_status = ended
        try:
            answer = pickle.loads(data) if data else None
        except Exception:       # cut short: the process died while writing
            answer = None
        if answer is not None and answer[0] == "done":
            _, reports, added, corrupt = answer
            for placeholder, report in zip(side.placeholders, reports):
                vars(placeholder).update(vars(report))
            for placeholder in side.placeholders[len(reports):]:
                placeholder.status, placeholder.error = "skipped", "not run: a damaged part was found"
            side.shared.update(added)
            if corrupt and self.ledger.drop_part(corrupt):
                self.corrupt = corrupt
            return
        if answer is not None:
            why = answer[1].strip().splitlines()[-1]
        elif os.WIFSIGNALED(wait_status):
            why = f"its process was killed (signal {os.WTERMSIG(wait_status)})"
        else:
            why = f"its process ended early (exit status {os.waitstatus_to_exitcode(wait_status)})"
        for placeholder in side.placeholders:
            placeholder.status, placeholder.error = "failed", why

    def _corrupt(self, report: StageReport, error: CorruptPartError, started: float) -> StageReport:
        """A derived part that cannot be read: removed, and every stage owes everything
        (the caller runs them all again: any of them may have read that table)."""
        report.status = "failed"
        report.error = str(error).split("\nhint:")[0]
        report.seconds = time.perf_counter() - started
        if self._in_side_lane:              # the run's own process removes it (join)
            self.corrupt = error.path
        elif self.ledger.drop_part(error.path):
            self.corrupt = error.path
        return report

    def run(self, stage: Stage, *, blocked_by: Iterable[str] = ()) -> StageReport:
        blocked_by = tuple(blocked_by)
        if self._side is not None and {p.stage for p in self._side.placeholders} & set(blocked_by):
            self.join()
        report = StageReport(stage.name)
        self.reports.append(report)
        started = time.perf_counter()
        # a stage skipped for a failure upstream blocks its own dependents too (apply never
        # runs on the plans of a night whose plan did not run)
        failed_upstream = [f"{r.stage} {'failed' if r.status == 'failed' else 'was not run'}"
                           for r in self.reports if r.stage in set(blocked_by)
                           and r.status in ("failed", "skipped")]
        if failed_upstream:
            report.status = "skipped"
            report.error = f"not run: {', '.join(failed_upstream)}"
            return report
        crash_point(f"stage:{stage.name}:start")
        base = lake_state(self.lake)
        state = self.ledger.stage_state(stage, base)
        try:
            owed = self.ledger.owed(stage, base, record=True)
        except CorruptPartError as error:     # its inputs read a damaged derived part
            return self._corrupt(report, error, started)
        if stage.name in self.ledger.unreadable:
            report.warning = (f"its ledger file could not be read, so every item is redone "
                              f"({self.ledger.unreadable[stage.name]})")
        if owed is None:
            report.skipped = self.ledger.head(stage.name).rows - 1
            report.seconds = time.perf_counter() - started
            return report
        # the rows this run writes over the file owed read (item -> row; dropped: removed)
        base = owed.recorded.file
        changed: dict[str, dict] = {}
        dropped = set(owed.removed)
        settings_fp = stage.settings_fp
        # an item that failed (or is missing) upstream is not done here until it is done there
        upstream = self.ledger.upstream_keys(stage)
        blocked = {item for item in owed.todo for up in upstream
                   if (up.get(item) or (None, None, None))[2] != "done"}
        for item in sorted(blocked):
            changed[item] = {"stage": stage.name, "item": item, "input_fp": owed.inputs[item],
                             "settings_fp": settings_fp, "run_id": self.run_id,
                             "status": "failed",
                             "detail": json.dumps({"error": "not done upstream"})}
        owed.todo = [item for item in owed.todo if item not in blocked]
        todo = set(owed.todo) | blocked
        committed: set[str] = set(blocked)
        unwritten = [False]          # rows committed since the ledger file was last written
        written_at = [started]

        def commit(results: dict[str, ItemResult]) -> None:
            for item, result in results.items():
                if item not in owed.inputs or item in blocked:
                    continue
                committed.add(item)
                changed[item] = {"stage": stage.name, "item": item,
                                 "input_fp": owed.inputs[item], "settings_fp": settings_fp,
                                 "run_id": self.run_id, "status": result.status,
                                 "detail": json.dumps(result.detail, sort_keys=True)
                                 if result.detail is not None else None}
            unwritten[0] = True
            if time.perf_counter() - written_at[0] >= COMMIT_WRITE_AFTER_S:
                self.ledger.write_changes(stage.name, base, changed, dropped)
                unwritten[0], written_at[0] = False, time.perf_counter()
            crash_point(f"stage:{stage.name}:batch")

        try:
            report.result = stage.work(owed, commit)
        except CorruptPartError as error:
            return self._corrupt(report, error, started)
        except Exception as error:   # one stage failing never stops the night
            if unwritten[0]:         # what it finished before failing is kept
                self.ledger.write_changes(stage.name, base, changed, dropped)
            report.status = "failed"
            report.error = f"{type(error).__name__}: {error}"
            report.failed = len(todo)
            report.seconds = time.perf_counter() - started
            return report

        def status(item: str) -> str | None:
            if item in changed:
                return changed[item]["status"]
            key = base.keys.get(item) if item not in dropped else None
            return None if key is None else key[2]

        failed = {k for k in todo if status(k) == "failed"}
        unfinished = todo - committed
        report.done = len(todo) - len(failed) - len(unfinished)
        report.failed = len(failed) + len(unfinished)
        report.removed = len(owed.removed)
        report.skipped = len(owed.inputs) - len(todo)
        if report.failed:
            report.status = "problems"
        for item in unfinished:   # a stage that did not say: owed again next run
            changed[item] = {"stage": stage.name, "item": item, "input_fp": owed.inputs[item],
                             "settings_fp": settings_fp, "run_id": self.run_id,
                             "status": "failed", "detail": json.dumps({"error": "not done"})}
        changed[MARKER] = {"stage": stage.name, "item": MARKER, "input_fp": state,
                           "settings_fp": settings_fp, "run_id": self.run_id, "status": "done",
                           "detail": None}
        self.ledger.write_changes(stage.name, base, changed, dropped)
        crash_point(f"stage:{stage.name}:done")
        report.seconds = time.perf_counter() - started
        return report


@dataclasses.dataclass
class _SideLane:
    """A side lane under way: its process, the read end of its pipe, the reports it fills
    in and the results dict it adds to."""

    pid: int
    read_end: int
    placeholders: list[StageReport]
    shared: dict


def pending(lake: Lake, stages: list[Stage]) -> dict[str, Pending]:
    """Per stage: how many items it owes now (for ``ctxlake status``)."""
    ledger = Ledger(lake)
    state = lake_state(lake)
    out = {}
    for stage in stages:
        owed = ledger.owed(stage, state)
        out[stage.name] = Pending() if owed is None else Pending(
            len(owed.todo), len(owed.removed), owed.full)
    return out
