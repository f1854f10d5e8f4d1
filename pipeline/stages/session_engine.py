"""The session engine shared by plan and replay: list the lake's sessions, load their rows
(one ordered scan per table, inline sidechain rows dropped, the flags stage's first prompt and
ignore verdict), build each session's :class:`~pipeline.policies.base.SessionInput`, and run a
piece of work over them chunk by chunk (in this process, a forked pool or Ray tasks), plus
:func:`kept_rows` for rewriting a per-policy table. See docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core import sqlfiles
from pipeline.core.batching import contiguous_runs
from pipeline.core.config import Config
from pipeline.core.dates import parse_since
from pipeline.core.errors import UsageError
from pipeline.core.lake import Lake
from pipeline.policies.base import (
    SessionInfo, SessionInput, slice_lists, table_lists,
)
from pipeline.stages.flags import session_verdicts

__all__ = ["ChunkRun", "LoadedSessions", "SessionRow", "iter_session_inputs", "kept_rows",
           "list_sessions", "load_session_input", "load_sessions", "memory_classifier",
           "run_session_chunks", "session_inputs"]

CALL_PATHS_SCHEMA = pa.schema([("session_id", pa.string()), ("seq", pa.int64()),
                               ("call_id", pa.string()), ("path", pa.string()),
                               ("memory_class", pa.string())])
# Message text per loading pass (one scan per table). A pass's peak memory is ~2.3x its text
# (DuckDB's ORDER BY holds the rows while the Arrow result is built): 256 MiB keeps a pass
# under ~0.9 GB of the process tree whatever the archive's size (1 GiB let an archive of
# large tool results reach ~2.5 GB; on 409 MB of text plan alone took 1.14 GB in one pass,
# 0.81 GB in two).
LOAD_BYTES = 256 * 1024 * 1024
CHUNK_BYTES = 16 * 1024 * 1024        # message text per unit of work (lists converted at once)
PARALLEL_MIN_BYTES = 24 * 1024 * 1024  # below this, one process is faster than a pool


# ---------------------------------------------------------------------------------------
# Loading sessions from the lake
# ---------------------------------------------------------------------------------------
@dataclass
class SessionRow:
    session_id: str
    info: SessionInfo
    text_bytes: int
    ignored_by: str | None


def list_sessions(lake: Lake, config: Config | None = None, *, session_id: str | None = None,
                  since: Any = None, sessions: Iterable[str] | None = None) -> list[SessionRow]:
    """Sessions with messages (one, or started at/after ``since``), in session id order.

    ``info.first_user_text`` and ``ignored_by`` are filled by :func:`load_sessions` (the
    first prompt is read from the loaded rows, which saves a scan of every text)."""
    with lake.connect(scope=None if sessions is None else sorted(sessions)) as con:
        rows = con.execute(sqlfiles.load("select_plan_sessions"),
                           {"session_id": session_id, "since": parse_since(since, moment=True),
                            "session_ids": None if sessions is None else sorted(sessions)}
                           ).fetchall()
    out = []
    for sid, fmt, project, branch, parent, _started, nbytes, n_messages in rows:
        if n_messages:
            info = SessionInfo(sid, fmt, project, branch or None, parent, None)
            out.append(SessionRow(sid, info, int(nbytes or 0), None))
    return out


@dataclass
class LoadedSessions:
    """The rows of some sessions, one Arrow table per kind, sorted by (session_id, seq)."""

    rows: list[SessionRow]
    messages: pa.Table
    calls: pa.Table
    results: pa.Table
    slices: dict[str, dict[str, tuple[int, int]]]
    read_paths: dict[str, list[tuple]] = field(default_factory=dict)


def load_sessions(lake: Lake, rows: Sequence[SessionRow], config: Config | None = None, *,
                  con=None, all_sessions: bool = False,
                  verdicts: dict[str, tuple[str | None, str | None]] | None = None) -> LoadedSessions:
    """The rows of ``rows``' sessions: one ordered scan per table, then (vectorised) inline
    sidechain rows dropped; each session's first prompt and ``ignore_patterns`` verdict are
    the flags stage's (:func:`pipeline.stages.flags.session_verdicts`).

    Inline sidechain rows are those with ``is_sidechain`` in a session that also has main-chain
    rows; a session made only of sidechain rows is a sub-agent's own (kept whole).
    ``all_sessions``: ``rows`` are every session of the lake (no id filter in the scans).
    ``verdicts``: :func:`pipeline.stages.flags.session_verdicts` of (at least) these sessions,
    read once for several passes (the first prompts' query reads every page of message text
    that holds a prompt: on an archive of large tool results, ~0.6 s per 400 MB of text)."""
    own = con is None
    con = con or lake.connect()
    try:
        params = {"session_ids": None if all_sessions else [r.session_id for r in rows]}
        messages, calls, results = (
            _as_table(con.sql(sqlfiles.load(name), params=params).to_arrow_table())
            for name in ("select_session_messages", "select_session_tool_calls",
                         "select_session_tool_results"))
        read_paths: dict[str, list[tuple]] = {}
        for row in con.execute(sqlfiles.load("select_session_read_paths"), params).fetchall():
            read_paths.setdefault(row[0], []).append(row)
        config = config or Config()
        first = verdicts if verdicts is not None else _verdicts(lake, con, config, params["session_ids"])
    finally:
        if own:
            con.close()
    side = pc.fill_null(messages.column("is_sidechain"), False)
    if messages.num_rows and pc.any(side).as_py():
        main_ids = pc.unique(pc.filter(messages.column("session_id"), pc.invert(side)))
        inline = pc.and_(side, pc.is_in(messages.column("session_id"), value_set=main_ids))
        if pc.any(inline).as_py():
            dropped = messages.filter(inline).select(["session_id", "seq"])
            messages = messages.filter(pc.invert(inline))
            calls = calls.join(dropped, keys=["session_id", "seq"], join_type="left anti")
            results = results.join(dropped, keys=["session_id", "seq"], join_type="left anti")
            calls = calls.sort_by([("session_id", "ascending"), ("seq", "ascending")])
            results = results.sort_by([("session_id", "ascending"), ("seq", "ascending")])
    messages = messages.drop_columns(["is_sidechain"])
    messages, calls, results = (t.combine_chunks() for t in (messages, calls, results))
    kept = []
    for row in rows:
        text, matched = first.get(row.session_id, (None, None))
        kept.append(SessionRow(row.session_id, replace(row.info, first_user_text=text),
                               row.text_bytes, matched))
    return LoadedSessions(kept, messages, calls, results,
                          {"messages": _slices(messages), "calls": _slices(calls),
                           "results": _slices(results)}, read_paths)


def _verdicts(lake: Lake, con, config: Config, session_ids: list[str] | None
              ) -> dict[str, tuple[str | None, str | None]]:
    return session_verdicts(lake, con, config.ignore_patterns, config.compiled_ignore_patterns(),
                            session_ids)


def _pass_verdicts(lake: Lake, config: Config, batches: list[list[SessionRow]]
                   ) -> dict[str, tuple[str | None, str | None]] | None:
    """The verdicts of every session of ``batches``, read once when there are several passes
    (None for one pass: :func:`load_sessions` reads them with its scans)."""
    if len(batches) < 2:
        return None
    with lake.connect() as con:
        return _verdicts(lake, con, config, [r.session_id for batch in batches for r in batch])


def _call_paths_lists(read_paths: dict[str, list[tuple]], calls: dict[str, list],
                      offsets: dict[str, tuple[int, int]], classifier) -> dict[str, dict[str, list]]:
    """Per session: paths and memory classes of its read-family calls (the preservation
    rule's input) as correlate classified them (``select_session_read_paths``), as column
    lists (``seq``, ``call_id``, ``path``, ``memory_class``; a call naming no path has one
    row with None). Calls left out of the session tables (inline sidechain rows) are skipped;
    a call correlate has not seen yet is classified by correlate's own function."""
    from pipeline.stages.correlate import tool_paths_rows

    out: dict[str, dict[str, list]] = {}
    seqs = calls.get("seq", [])
    for sid, (start, length) in offsets.items():
        kept = set(seqs[start:start + length])
        rows = [r for r in read_paths.get(sid, []) if r[1] in kept]
        unknown = [r for r in rows if not r[9]]
        fresh: dict[tuple, list[tuple]] = {}
        if unknown:
            found = tool_paths_rows(pa.table({
                "session_id": [r[0] for r in unknown], "call_id": [r[2] for r in unknown],
                "seq": pa.array([r[1] for r in unknown], pa.int64()),
                "tool_name": [r[3] for r in unknown], "input_json": [r[4] for r in unknown],
                "cwd": pa.array([r[5] for r in unknown], pa.string())}), classifier)
            for seq, call_id, path, cls in zip(found.column("seq").to_pylist(),
                                               found.column("call_id").to_pylist(),
                                               found.column("path").to_pylist(),
                                               found.column("memory_class").to_pylist()):
                fresh.setdefault((seq, call_id), []).append((path, cls))
        cols = {"seq": [], "call_id": [], "path": [], "memory_class": []}
        for r in rows:
            entries = [(r[7], r[8])] if r[9] else (fresh.get((r[1], r[2])) or [(None, None)])
            for path, cls in entries:
                cols["seq"].append(r[1])
                cols["call_id"].append(r[2])
                cols["path"].append(path)
                cols["memory_class"].append(cls if path is not None else None)
        cols["__len__"] = [len(cols["seq"])]
        out[sid] = cols
    return out


def session_inputs(loaded: LoadedSessions, rows: Sequence[SessionRow], classifier
                   ) -> list[SessionInput]:
    """SessionInputs of ``rows`` (a contiguous run of ``loaded.rows``), their column lists
    converted once for the whole run and cached on each input (see SessionInput.view)."""
    tables = {"messages": loaded.messages, "calls": loaded.calls, "results": loaded.results}
    lists: dict[str, dict[str, list]] = {}
    local: dict[str, dict[str, tuple[int, int]]] = {}
    for kind, table in tables.items():
        where = [loaded.slices[kind][r.session_id] for r in rows
                 if r.session_id in loaded.slices[kind]]
        lo = min((o for o, _ in where), default=0)
        hi = max((o + n for o, n in where), default=0)
        lists[kind] = table_lists(table.slice(lo, hi - lo))
        local[kind] = {r.session_id: (loaded.slices[kind][r.session_id][0] - lo,
                                      loaded.slices[kind][r.session_id][1])
                       for r in rows if r.session_id in loaded.slices[kind]}
    paths = _call_paths_lists(loaded.read_paths, lists["calls"], local["calls"], classifier)
    out = []
    empty_calls = {name: [] for name in lists["calls"]} | {"__len__": [0]}
    empty_results = {name: [] for name in lists["results"]} | {"__len__": [0]}
    no_paths = {"seq": [], "call_id": [], "path": [], "memory_class": [], "__len__": [0]}
    for row in rows:
        sid = row.session_id
        if sid not in local["messages"]:
            continue
        m = slice_lists(lists["messages"], *local["messages"][sid])
        c = slice_lists(lists["calls"], *local["calls"][sid]) if sid in local["calls"] \
            else empty_calls
        r = slice_lists(lists["results"], *local["results"][sid]) if sid in local["results"] \
            else empty_results
        p = paths.get(sid, no_paths)
        session = SessionInput(
            sid, _take(loaded.messages, loaded.slices["messages"], sid),
            _take(loaded.calls, loaded.slices["calls"], sid),
            _take(loaded.results, loaded.slices["results"], sid),
            pa.table({"session_id": [sid] * p["__len__"][0], "seq": p["seq"],
                      "call_id": p["call_id"], "path": p["path"],
                      "memory_class": p["memory_class"]}, schema=CALL_PATHS_SCHEMA),
            row.info)
        session._cache["lists"] = (m, c, r, p)
        out.append(session)
    return out


def _slices(table: pa.Table) -> dict[str, tuple[int, int]]:
    """(offset, length) of each session's rows in a table sorted by session_id."""
    if table.num_rows == 0:
        return {}
    encoded = pc.run_end_encode(table.column("session_id").combine_chunks())
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.chunk(0)
    out, start = {}, 0
    for sid, end in zip(encoded.values.to_pylist(), encoded.run_ends.to_pylist()):
        out[sid] = (start, end - start)
        start = end
    return out


def _as_table(value: Any) -> pa.Table:
    if isinstance(value, pa.Table):
        return value
    if isinstance(value, pa.RecordBatchReader):
        return value.read_all()
    return pa.table(value)


def _take(table: pa.Table, slices: dict, sid: str) -> pa.Table:
    where = slices.get(sid)
    if where is None:
        return table.slice(0, 0)
    return table.slice(*where)


def _batches(sessions: Sequence[SessionRow], limit: int) -> list[list[SessionRow]]:
    """Contiguous runs of ``sessions`` with at most ``limit`` bytes of text each."""
    return contiguous_runs(sessions, lambda row: row.text_bytes, limit)


def memory_classifier(config: Config):
    from pipeline.text.memory import Classifier

    return Classifier(config.memory_roots())


def iter_session_inputs(lake: Lake, config: Config, *, session_id: str | None = None,
                        since: Any = None, include_ignored: bool = False
                        ) -> Iterator[SessionInput]:
    """Every (non-ignored) session of the lake as a SessionInput, in session id order (for
    replay). Loads ``LOAD_BYTES`` of message text per pass."""
    rows = list_sessions(lake, config, session_id=session_id, since=since)
    classifier = memory_classifier(config)
    batches = _batches(rows, LOAD_BYTES)
    verdicts = _pass_verdicts(lake, config, batches)
    for batch in batches:
        loaded = load_sessions(lake, batch, config,
                               all_sessions=len(batches) == 1 and session_id is None
                               and since is None, verdicts=verdicts)
        wanted = [r for r in loaded.rows if include_ignored or r.ignored_by is None]
        for chunk in _batches(wanted, CHUNK_BYTES):
            yield from session_inputs(loaded, chunk, classifier)


def no_session_error(session_id: str | None) -> UsageError:
    return UsageError(f"no session '{session_id}' in the lake",
                      hint="list them with: ctxlake sql \"SELECT session_id FROM sessions\"")


def load_session_input(lake: Lake, session_id: str, config: Config) -> SessionInput:
    """One session of the lake (ignored or not) as a SessionInput."""
    rows = list_sessions(lake, config, session_id=session_id)
    if not rows:
        raise no_session_error(session_id)
    loaded = load_sessions(lake, rows, config)
    return session_inputs(loaded, loaded.rows, memory_classifier(config))[0]


# ---------------------------------------------------------------------------------------
# Every session, chunk by chunk (plan and replay)
# ---------------------------------------------------------------------------------------
ChunkWork = Callable[[LoadedSessions, list[SessionRow], Any, Any], Any]


@dataclass
class ChunkRun:
    """What :func:`run_session_chunks` did: the sessions listed, those worked on (``todo``)
    and those skipped by ``ignore_patterns``, and the work's results in session order."""

    rows: list[SessionRow]
    todo: list[SessionRow]
    ignored: list[SessionRow]
    results: list


# State a forked worker inherits (copy-on-write): the loaded tables, the batch's extra data,
# the config and the work function (never pickled: only chunk indexes and results are).
def _worker_chunk(shared: dict, chunk: list) -> Any:
    """Body of a forked worker (:func:`pipeline.stages.engine.forked_map`): one chunk."""
    classifier = shared.get("classifier")
    if classifier is None:
        classifier = shared["classifier"] = memory_classifier(shared["config"])
    return shared["work"](shared["loaded"], chunk, classifier, shared["extra"])


def _ipc(table: pa.Table) -> pa.Buffer:
    """``table`` as an Arrow IPC stream: only its own rows' bytes (a pickled slice would carry
    the whole buffers it points into, i.e. the whole pass)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _chunk_job(loaded: LoadedSessions, chunk: list[SessionRow], extra: Any) -> tuple:
    """What a remote task needs for ``chunk`` (a contiguous run of ``loaded.rows``): each
    table's rows of the chunk (Arrow IPC), their offsets, the chunk's read paths and, when the
    pass's ``extra`` is a dict by session id, the chunk's entries (else None: shared)."""
    ids = [r.session_id for r in chunk]
    tables, slices = {}, {}
    for kind in ("messages", "calls", "results"):
        where = [loaded.slices[kind][sid] for sid in ids if sid in loaded.slices[kind]]
        lo = min((o for o, _ in where), default=0)
        hi = max((o + n for o, n in where), default=0)
        tables[kind] = _ipc(getattr(loaded, kind).slice(lo, hi - lo))
        slices[kind] = {sid: (loaded.slices[kind][sid][0] - lo, loaded.slices[kind][sid][1])
                        for sid in ids if sid in loaded.slices[kind]}
    own_extra = {sid: extra[sid] for sid in ids if sid in extra} \
        if isinstance(extra, dict) else None
    return (list(chunk), tables, slices,
            {sid: loaded.read_paths[sid] for sid in ids if sid in loaded.read_paths}, own_extra)


def _engine_chunk(shared: tuple, job: tuple) -> Any:
    """One session chunk on a remote engine: ``work`` on the chunk's own tables."""
    from pipeline.core.crash import crash_point

    work, config, extra = shared
    chunk, tables, slices, read_paths, own_extra = job
    loaded = LoadedSessions(chunk, *(pa.ipc.open_stream(tables[kind]).read_all()
                                     for kind in ("messages", "calls", "results")),
                            slices, read_paths)
    result = work(loaded, chunk, memory_classifier(config), extra if own_extra is None else own_extra)
    crash_point("engine:session_chunk")     # work done, result not returned yet (kill tests)
    return result


def run_session_chunks(lake: Lake, config: Config, work: ChunkWork, *,
                       session_id: str | None = None, since: Any = None,
                       sessions: Iterable[str] | None = None,
                       batch_extra: Callable[[Any, list[SessionRow]], Any] | None = None,
                       progress: Callable[[int, int], None] | None = None,
                       workers: int | None = None, engine: Any = None) -> ChunkRun:
    """Call ``work(loaded, chunk, classifier, extra)`` on every non-ignored session of the lake
    (or ``session_id``, or those started at/after ``since``), in session id order.

    Sessions are loaded ``LOAD_BYTES`` of message text per pass and handed to ``work`` in
    chunks of ``CHUNK_BYTES`` (a contiguous run of ``loaded.rows``); ``classifier`` is the
    config's memory classifier. ``batch_extra(con, batch)``, when given, reads per-pass data
    through the connection that loaded the sessions (``extra``; None otherwise). A pass with at
    least ``PARALLEL_MIN_BYTES`` of text and two chunks runs over a forked process pool of
    ``workers`` (default: up to 2), so ``work``'s results must pickle. ``progress(done,
    total)`` counts sessions, ignored ones included.

    ``engine`` (:mod:`pipeline.stages.engine`; default: the activated one, else the config's): with
    Ray, each chunk of a pass is a Ray task over its own rows of the loaded tables (the
    driver loads, the tasks work, results come back in session order), whatever its size;
    an ``extra`` that is a dict by session id is split the same way (else shared whole).
    """
    from pipeline.stages import engine as engines

    chosen = engines.resolve(engine, config)
    rows = list_sessions(lake, config, session_id=session_id, since=since, sessions=sessions)
    if session_id is not None and not rows:
        raise no_session_error(session_id)
    n_workers = workers or engines.default_workers()
    run = ChunkRun(rows, [], [], [])
    done = 0
    if progress:
        progress(0, len(rows))
    classifier = memory_classifier(config)
    batches = _batches(rows, LOAD_BYTES)
    verdicts = _pass_verdicts(lake, config, batches)
    for batch in batches:
        # the owed sessions of a night: each batch's scans read only its sessions' files
        scope = None if sessions is None else [r.session_id for r in batch]
        with lake.connect(scope=scope) as con:
            loaded = load_sessions(lake, batch, config, con=con,
                                   all_sessions=len(batches) == 1 and session_id is None
                                   and since is None and sessions is None, verdicts=verdicts)
            extra = batch_extra(con, batch) if batch_extra is not None else None
        run.ignored += [r for r in loaded.rows if r.ignored_by is not None]
        wanted = [r for r in loaded.rows if r.ignored_by is None]
        run.todo += wanted
        done += len(batch) - len(wanted)
        chunks = _batches(wanted, CHUNK_BYTES)
        size = sum(r.text_bytes for r in wanted)
        if not engines.is_local(chosen):
            # made one by one as the engine submits them: a task runs while the next is made
            jobs = (_chunk_job(loaded, chunk, extra) for chunk in chunks)
            shared = (work, config, None if isinstance(extra, dict) else extra)
            for chunk, result in zip(chunks, chosen.map(_engine_chunk, jobs, shared=shared)):
                run.results.append(result)
                done += len(chunk)
                if progress:
                    progress(done, len(rows))
            continue
        if n_workers == 1 or size < PARALLEL_MIN_BYTES or len(chunks) < 2 \
                or not engines.fork_safe():
            for chunk in chunks:
                run.results.append(work(loaded, chunk, classifier, extra))
                done += len(chunk)
                if progress:
                    progress(done, len(rows))
            continue
        shared = {"loaded": loaded, "config": config, "extra": extra, "work": work}
        for chunk, result in zip(chunks, engines.forked_map(_worker_chunk, chunks, shared,
                                                            workers=n_workers)):
            run.results.append(result)
            done += len(chunk)
            if progress:
                progress(done, len(rows))
    return run


def kept_rows(old: pa.Table, config_hash: str, sessions: set[str]) -> pa.Table:
    """Rows of an earlier run worth keeping: same config hash, a session not just redone."""
    keep = pc.and_(pc.equal(old.column("config_hash"), config_hash),
                   pc.invert(pc.is_in(old.column("session_id"),
                                      pa.array(sorted(sessions), pa.string()))))
    return old.filter(keep)
