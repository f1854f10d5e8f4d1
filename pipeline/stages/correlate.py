"""The correlate stage: request-side paths and their memory classes, behind the ``tool_links`` view.

Stable entry point (the nightly job calls it after ingest)::

    from pipeline.core.config import load_config
    from pipeline.stages.correlate import correlate
    summary = correlate(lake, roots=load_config(path).memory_roots())   # -> CorrelateSummary

``correlate(lake, *, roots=None, home=None)``: ``roots`` defaults to ``MemoryRoots()``.

What it does, in order:

1. Selects the tool calls whose input may name a path (``sql/select_tool_call_inputs.sql``,
   a regular expression that is a *necessary* condition for :func:`pipeline.text.paths
   .request_path_entries` to find one; the rest are never parsed in Python).
2. Extracts the request-side paths of those calls (:mod:`pipeline.text.paths`, ``~`` expanded to
   the home the call's cwd implies, else to ``home`` / this user's home) and classifies
   each with one :class:`pipeline.text.memory.Classifier` (cached per (cwd, path)).
3. Writes the derived table ``tool_paths`` (``derived/tool_paths/all.parquet``; always, with
   the fixed schema :data:`TOOL_PATHS`, even when empty): one row per (call, path) and one row
   with NULL ``path_no``/``path``/``memory_class`` per call that names no path, so
   ``tool_links.paths_known`` can tell "no path" from "not correlated yet".

The ``tool_links`` view (``sql/create_view_tool_links.sql``) is SQL over ``tool_calls``,
``tool_results`` and ``tool_paths``. Before correlate has ever run, ``tool_paths`` is an empty
placeholder view (``sql/create_view_tool_paths_empty.sql``), so ``tool_links`` can always be
created: its pairing columns are right, its ``paths`` are empty and ``paths_known`` is false.
After a later ingest, calls not yet correlated also show ``paths_known = false`` until
correlate runs again (the nightly job runs it after every ingest).

``tool_links`` columns (one row per session and call id; calls/results without an id are left
out, the check ``select_tool_results_without_call_id`` reports such results):
``session_id, call_id, tool_name, tool_family`` (of the first call; for an orphan result the
family its tool name has elsewhere in the lake, else ``other``), ``call_seq``/``call_time``
(first call), ``result_seq``/``result_time`` (first result), ``status`` (``paired``: one call
and a result; ``orphan_call``; ``orphan_result``; ``ambiguous``: more than one request-side
call with this id in the session), ``n_calls``, ``n_results``, ``is_error`` (any result),
``paths``/``memory_classes`` (parallel lists, first-seen order, over every call of the id),
``protected`` (exactly one call AND at least one path AND every path project/user/team; the
read-family restriction of docs/policies.md is the policy's), ``paths_known``,
``input_est_tokens``/``input_bytes`` (sum over the calls), ``result_est_tokens``/
``payload_bytes`` (sum over the results), ``later_ref_seq``, ``later_ref_time``,
``later_ref_gap_s``.

``later_ref_seq``/``later_ref_gap_s``: the next call in the same session, after the result (or
after the call when there is no result), whose request-side paths include one of this call's
paths (a later read, edit, write or a simple-shell read of it). Paths that only appear in later
free text (messages, grep patterns) are NOT counted: matching every path against every later
message is quadratic per session and too slow for the nightly budget.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import pyarrow as pa

from pipeline.core import sqlfiles
from pipeline.core.lake import Lake, holds_lake_lock
from pipeline.text.memory import MEMORY_CLASSES, Classifier, MemoryRoots, home_for_cwd
from pipeline.text.paths import CANDIDATE_PATTERN, request_path_entries

__all__ = ["correlate", "CorrelateSummary", "TOOL_PATHS", "tool_paths_rows"]

TOOL_PATHS = pa.schema([
    ("session_id", pa.string()),
    ("call_id", pa.string()),
    ("seq", pa.int64()),
    ("path_no", pa.int32()),        # order of the path within the call's input
    ("path", pa.string()),          # normalised, absolute when the cwd is known; NULL: no path
    ("memory_class", pa.string()),  # project | user | team | none | escape
])


@dataclass
class CorrelateSummary:
    """What one correlate run did (counts are over the current lake)."""

    calls: int = 0                 # tool call rows
    calls_parsed: int = 0          # rows whose input was parsed in Python
    calls_with_paths: int = 0
    paths: int = 0                 # (call, path) rows
    by_class: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)   # tool_links rows per status
    protected: int = 0             # tool_links rows with protected = true
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tool_paths_rows(calls: pa.Table, classifier: Classifier) -> pa.Table:
    """Paths and classes of candidate calls (columns of ``select_tool_call_inputs``).

    Returns the found rows only (schema :data:`TOOL_PATHS`, no NULL-path rows).
    """
    columns = {name: calls.column(name).to_pylist() for name in
               ("session_id", "call_id", "seq", "tool_name", "input_json", "cwd")}
    out_session: list[str] = []
    out_call: list[str | None] = []
    out_seq: list[int] = []
    out_no: list[int] = []
    out_path: list[str] = []
    out_class: list[str] = []
    homes: dict[str | None, str | None] = {}
    for session_id, call_id, seq, tool_name, input_json, cwd in zip(
            columns["session_id"], columns["call_id"], columns["seq"], columns["tool_name"],
            columns["input_json"], columns["cwd"]):
        home = homes.get(cwd)
        if home is None and cwd not in homes:
            home = homes[cwd] = home_for_cwd(cwd) or classifier.default_home
        entries = request_path_entries(tool_name, input_json, cwd, home=home)
        for number, entry in enumerate(entries):
            out_session.append(session_id)
            out_call.append(call_id)
            out_seq.append(seq)
            out_no.append(number)
            out_path.append(entry.path)
            out_class.append(classifier.classify(entry.raw, cwd=cwd, home=home))
    return pa.Table.from_arrays(
        [pa.array(out_session, pa.string()), pa.array(out_call, pa.string()),
         pa.array(out_seq, pa.int64()), pa.array(out_no, pa.int32()),
         pa.array(out_path, pa.string()), pa.array(out_class, pa.string())],
        schema=TOOL_PATHS)


def _distinct_calls(found: pa.Table) -> int:
    return len(set(zip(found.column("session_id").to_pylist(), found.column("call_id").to_pylist(),
                       found.column("seq").to_pylist())))


TOOL_PATHS_ORDER = ["session_id", "seq", "call_id", "path_no"]


@holds_lake_lock
def correlate(lake: Lake, *, roots: MemoryRoots | None = None, home: str | None = None,
              sessions: Iterable[str] | None = None) -> CorrelateSummary:
    """Compute ``tool_paths`` for every tool call in the lake and summarise ``tool_links``.

    ``roots``: managed-memory roots (default :class:`MemoryRoots` defaults; pass
    ``MemoryRoots.from_config(config["memory"])`` for configured extras). ``home``: the home
    directory for ``~`` when a call's cwd does not imply one (default: this user's home).
    ``sessions``: only these sessions (the nightly job's owed ones); their rows are replaced
    in the session buckets of ``derived/tool_paths`` and the counts are theirs. Safe to run
    again at any time.
    """
    wanted = None if sessions is None else sorted(set(sessions))
    started = time.perf_counter()
    classifier = Classifier(roots or MemoryRoots(), home=home)
    summary = CorrelateSummary()
    with lake.connect(scope=wanted) as con:
        candidates = con.sql(sqlfiles.load("select_tool_call_inputs"),
                             params={"pattern": CANDIDATE_PATTERN, "session_ids": wanted}
                             ).to_arrow_table()
        summary.calls_parsed = candidates.num_rows
        found = tool_paths_rows(candidates, classifier)
        del candidates
        con.register("found_paths", found)
        table = con.sql(sqlfiles.load("select_tool_paths"),
                        params={"session_ids": wanted}).to_arrow_table()
        con.unregister("found_paths")
    table = table.cast(TOOL_PATHS)
    lake.write_session_rows("tool_paths", "all", table, wanted, sort_by=TOOL_PATHS_ORDER)
    distinct = _distinct_calls(found)
    summary.calls = table.num_rows - found.num_rows + distinct

    classes = Counter(found.column("memory_class").to_pylist())
    summary.paths = found.num_rows
    summary.by_class = {name: classes.get(name, 0) for name in MEMORY_CLASSES}
    summary.calls_with_paths = distinct
    with lake.connect(scope=wanted) as con:
        statuses = con.execute(sqlfiles.load("select_tool_link_statuses"),
                               {"session_ids": wanted}).fetchall()
    summary.statuses = {status: count for status, count, _ in statuses}
    summary.protected = sum(protected for _, _, protected in statuses)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary
