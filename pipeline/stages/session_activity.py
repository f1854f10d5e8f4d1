"""Every session's first and last message time and the models it was billed under, kept in
the lake so that summarize reads the messages of changed sessions only.

Summarize places every top-level session on its day, gives every session a lake-unique
recovery id (its last activity to the second) and prices every model that carries usage:
three questions about the whole lake. Asked of ``messages`` they scanned every part file
each night (~0.4 s on a 500 MB lake, for one new session). ``derived/session_activity``
(per session bucket) holds the answers per session with ``sources_key``, the fingerprint of
the session's own sources (``sql/select_session_source_keys.sql``, read from
``session_info`` and ``sources`` only): a row is current while its key is the session's
now. Every (source, session) of a message row is listed in ``session_info``
(``sql/checks/select_session_rows_without_session_info.sql``), so a session's messages change
only with its key. The night reads the stored rows, asks ``messages`` about the sessions
whose key changed (through a cursor scoped to their files), and rewrites their buckets.

A session whose recovery id may have changed without its own files changing (another
session now ends in the same second, or no longer does: both then carry a hash suffix, or
lose it) is named in :attr:`SessionFacts.id_shifted`, so that its document is written
again as a run over the whole lake would write it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from pipeline.core import sqlfiles
from pipeline.core.dates import from_epoch_us
from pipeline.stages.recover import memory_id, unique_memory_ids

if TYPE_CHECKING:
    from pipeline.core.lake import Lake

ACTIVITY = "session_activity"
_TIME = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([
    ("session_id", pa.string()), ("sources_key", pa.string()),
    ("started_at", _TIME), ("ended_at", _TIME),
    ("last_activity", _TIME),            # ended_at, else its first source's mtime
    ("usage_models", pa.list_(pa.string()))])

# more changed sessions than this share of the lake are asked of the whole lake at once
_SCOPED_SHARE = 0.5


class _Activity(NamedTuple):
    """A session's row of ``session_activity`` (after its id), times as microseconds."""
    sources_key: str | None
    started: int | None
    ended: int | None
    last: int | None
    models: tuple[str, ...]


@dataclass
class SessionFacts:
    top_level: list[dict]           # session_id, started_at, ended_at, log_key
    memory_ids: dict[str, str]      # every session's lake-unique recovery id
    models: list[str]               # models carrying recorded usage, sorted
    id_shifted: set[str]            # top-level sessions whose document may name another id


def read_session_facts(lake: "Lake", con, *, incremental: bool) -> SessionFacts:
    """The facts above for every session of the lake (``con``: a lake-wide cursor), from
    the stored rows where current (``incremental``; otherwise every session is asked of
    ``messages`` and the table written whole), and the stored table brought up to date.
    Times are handled as microseconds since the epoch (a ``datetime`` with a zone costs
    ~5 us to make, and the lake has thousands of sessions); only the facts returned are
    ``datetime``."""
    keys = con.execute(sqlfiles.load("select_session_source_keys")).fetchall()
    stored = _read_stored(lake) if incremental else {}
    stale = [sid for sid, _parent, key, _log, _mtime in keys
             if sid not in stored or stored[sid].sources_key != key]
    asked = _activity(lake, con, stale, whole=not incremental
                      or len(stale) > _SCOPED_SHARE * len(keys))

    stale_set = set(stale)
    rows: dict[str, _Activity] = {}
    for sid, _parent, key, _log, mtime in keys:
        if sid in stale_set:
            started, ended, models = asked.get(sid, (None, None, ()))
        else:
            started, ended, models = stored[sid].started, stored[sid].ended, stored[sid].models
        rows[sid] = _Activity(key, started, ended, ended if ended is not None else mtime, models)
    changed = [sid for sid, row in rows.items() if stored.get(sid) != row]
    gone = sorted(set(stored) - set(rows))
    if changed or gone or not incremental:
        lake.write_session_rows(ACTIVITY, "all", _table({s: rows[s] for s in changed}),
                                sorted(set(changed) | set(gone)) if incremental else None,
                                sort_by=["session_id"])

    activity = {sid: from_epoch_us(row.last) for sid, row in rows.items()}
    # the recovery ids any changed or removed session had or has now: every session holding
    # one of them may have gained or lost its suffix (without stored rows there are no
    # earlier ids to compare with, and no documents to correct)
    moved = ({memory_id(from_epoch_us(stored[s].last)) for s in [*changed, *gone] if s in stored}
             | {memory_id(activity[s]) for s in changed}) if stored else set()
    parent_of = {sid: parent for sid, parent, *_ in keys}
    shifted = {parent_of[s] or s for s, when in activity.items() if memory_id(when) in moved}
    top_level = [{"session_id": sid, "started_at": from_epoch_us(rows[sid].started),
                  "ended_at": from_epoch_us(rows[sid].ended), "log_key": log_key}
                 for sid, parent, _key, log_key, _mtime in keys if parent is None]
    models = sorted({model for row in rows.values() for model in row.models})
    return SessionFacts(top_level, unique_memory_ids(activity), models, shifted)


def _table(rows: dict[str, _Activity]) -> pa.Table:
    columns = [list(rows), *(zip(*rows.values()) if rows else [[] for _ in _Activity._fields])]
    return pa.Table.from_arrays(
        [pa.array(values, pa.int64()).cast(field.type) if field.type == _TIME
         else pa.array(values, field.type) for field, values in zip(SCHEMA, columns)],
        schema=SCHEMA)


def _read_stored(lake: "Lake") -> dict[str, _Activity]:
    table = lake.read_derived(ACTIVITY, "all", SCHEMA)
    ids, *values = [table.column(field.name).cast(pa.int64()).to_pylist() if field.type == _TIME
                    else table.column(field.name).to_pylist() for field in SCHEMA]
    return {sid: _Activity(key, started, ended, last, tuple(models or ()))
            for sid, key, started, ended, last, models in zip(ids, *values)}


def _activity(lake: "Lake", con, sessions: list[str], *, whole: bool) -> dict[str, tuple]:
    """``select_session_activity`` of ``sessions`` (id -> (started, ended, models)): over
    the whole lake (``whole``), else through a cursor that reads their families' files only."""
    if not sessions:
        return {}
    query = sqlfiles.load("select_session_activity")
    if whole:
        rows = con.execute(query, {"sessions": None}).fetchall()
    else:
        with lake.connect(scope=sessions, within=con) as scoped:
            rows = scoped.execute(query, {"sessions": sessions}).fetchall()
    wanted = set(sessions)
    return {sid: (started, ended, tuple(models or ())) for sid, started, ended, models in rows
            if sid in wanted}
