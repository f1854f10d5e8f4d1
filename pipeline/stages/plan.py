"""The plan stage: run a policy (or chain) over the lake's sessions; write plans and evictions.

``plan(lake, policy=..., config=...)`` loads the sessions (in batches, optionally over a
process pool), runs the pure policy functions of :mod:`pipeline.policies` on each, and writes
``derived/plans/<key>.parquet`` and ``derived/evictions/<key>.parquet`` (views ``plans`` and
``evictions``). Same lake + same config gives byte-identical files: rows are sorted, and no
wall-clock value is stored (``at_time`` is the transcript's own timestamp).

What is planned
- Every session of the lake (or ``session_id``, or those started at/after ``since``), except
  sessions whose first real user message matches ``ignore_patterns`` (skipped and counted).
- Sub-agent sessions (their own ``session_id`` with ``parent_session_id``: Claude Code
  ``agent-*.jsonl``, Codex sub-agents) are planned as sessions of their own: a sub-agent has
  its own context window.
- Inline sidechain rows (``is_sidechain``, Claude Code 1.0.x Task records inside the main
  file) belong to the sub-agent's context, not the main one: they are left out entirely (never
  cleared, not counted in context tokens, no turns). A call id is still "ambiguous" for the
  memory-preservation rule when a sidechain call shares it (``id_calls`` counts them).

Request-side paths and memory classes are correlate's answer, read from ``tool_paths`` (the
``tool_links`` view shows the same classes): plan, apply, replay and the reports never classify
a path again, so a Gemini read of ``/home/bob/proj/GEMINI.md`` (no cwd recorded) that
``tool_links`` calls ``project`` is preserved by planning too. Only a read-family call that
correlate has not seen yet (a lake ingested but not correlated) is classified here, with
correlate's own function (:func:`pipeline.stages.correlate.tool_paths_rows`) and the config's
memory roots.

Chains: each step sees the previous steps' output (their evictions as prior state): an item
already cleared/pruned is never processed again; ``tail_protect`` protects for later steps.
Rows carry ``step`` (the step's built-in policy) besides ``policy`` (the name requested).
When only some sessions are planned (``session_id``/``since``), their rows replace the same
sessions' rows in the existing files; rows of other sessions are kept when their
``config_hash`` matches (a different config makes them stale: they are dropped).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.config import Config, ResolvedPolicy, load_config
from pipeline.core.errors import UsageError
from pipeline.core.lake import Lake, glob_escape, holds_lake_lock
from pipeline.policies.base import (
    PolicyOutput, SessionInput,
)
from pipeline.core.schema import EVICTIONS, PLANS
from pipeline.stages.session_engine import (
    LoadedSessions, SessionRow, list_sessions, load_sessions, memory_classifier, no_session_error,
    run_session_chunks, session_inputs,
)

__all__ = ["PlanSummary", "SessionPlan", "plan", "plan_many", "plan_session_input",
           "session_plan_tables", "suggest", "Suggestions", "PLANS_SCHEMA", "EVICTIONS_SCHEMA"]

# Columns added at the end of the schema.py contracts: the chain step that made the row.
PLANS_SCHEMA = PLANS.append(pa.field("step", pa.string()))
EVICTIONS_SCHEMA = EVICTIONS.append(pa.field("step", pa.string()))


# ---------------------------------------------------------------------------------------
# Pure part: one session
# ---------------------------------------------------------------------------------------
@dataclass
class SessionPlan:
    """One session's plan under one resolved policy (rows ready for the schemas)."""

    session_id: str
    policy: str
    config_hash: str
    plans: list[dict] = field(default_factory=list)
    evictions: list[dict] = field(default_factory=list)
    preserved: int = 0
    suggestions: list[dict] = field(default_factory=list)
    suppressed: list[dict] = field(default_factory=list)

    def plans_table(self) -> pa.Table:
        return pa.Table.from_pylist(self.plans, schema=PLANS_SCHEMA)

    def evictions_table(self) -> pa.Table:
        return pa.Table.from_pylist(self.evictions, schema=EVICTIONS_SCHEMA)


def _plan_id(policy: str, config_hash: str, session_id: str, step: int, at_seq: int) -> str:
    key = f"{policy}\x1f{config_hash}\x1f{session_id}\x1f{step}\x1f{at_seq}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def plan_session_input(session: SessionInput, policy: ResolvedPolicy) -> SessionPlan:
    """Run ``policy`` (all its steps) on one in-memory session (pure; used by replay/tests)."""
    result = SessionPlan(session.session_id, policy.name, policy.config_hash)
    prior = session.prior
    preserved: set[int] = set()
    for index, step in enumerate(policy.steps):
        step_input = session if prior is session.prior else session.with_prior(prior)
        out: PolicyOutput = step.info.plan_session(step_input, step.params)
        plan_ids = [_plan_id(policy.name, policy.config_hash, session.session_id, index,
                             row["at_seq"]) for row in out.plans]
        evicted_by_plan: dict[int, list[dict]] = {}
        for row in out.evictions:
            evicted_by_plan.setdefault(row["plan"], []).append(row)
        for index_in_step, (row, plan_id) in enumerate(zip(out.plans, plan_ids)):
            metadata = _superset_metadata(step.policy, row, evicted_by_plan.get(index_in_step, []))
            result.plans.append({
                "plan_id": plan_id, "policy": policy.name, "config_hash": policy.config_hash,
                "session_id": session.session_id, "trigger": row["trigger"],
                "at_seq": row["at_seq"], "at_time": row["at_time"],
                "tokens_before": row["tokens_before"], "tokens_after": row["tokens_after"],
                "tokens_saved": row["tokens_saved"], "evicted": row["evicted"],
                "preserved": row["preserved"], "kept": row["kept"],
                "metadata_json": orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS).decode(),
                "step": step.policy,
            })
        for row in out.evictions:
            result.evictions.append({
                "plan_id": plan_ids[row["plan"]], "policy": policy.name,
                "session_id": session.session_id, "call_id": row["call_id"],
                "tool_name": row["tool_name"], "action": row["action"], "reason": row["reason"],
                "paths": row["paths"], "tokens_before": row["tokens_before"],
                "tokens_after": row["tokens_after"], "bytes_before": row["bytes_before"],
                "bytes_after": row["bytes_after"], "locator": row["locator"],
                "payload_sha256": row["payload_sha256"], "replacement": row["replacement"],
                "source_id": row["source_id"], "line_no": row["line_no"],
                "json_path": row["json_path"], "seq": row["seq"], "block_no": row["block_no"],
                "at_seq": row["at_seq"], "step": step.policy,
            })
        preserved |= out.preserved_seqs
        result.suggestions.extend(out.suggestions)
        result.suppressed.extend(out.suppressed)
        next_prior = out.prior or prior
        if out.evictions:
            next_prior = replace(next_prior,
                                 evictions=next_prior.evictions + tuple(out.prior_evictions()))
        prior = next_prior
    result.preserved = len(preserved)
    return result


def _superset_metadata(step: str, row: dict, evictions: list[dict]) -> dict:
    """The plan's metadata with the keys of Claude Code's ``microcompactMetadata`` (trigger,
    preTokens, tokensSaved, compactedToolIds) and Anthropic's ``applied_edits``
    (cleared_tool_uses, cleared_input_tokens) always present; a policy's own values win."""
    metadata = dict(row["metadata"])
    results = [e for e in evictions if e["action"] != "clear_input"]
    metadata.setdefault("trigger", row["trigger"])
    metadata.setdefault("preTokens", row["tokens_before"])
    metadata.setdefault("tokensSaved", row["tokens_saved"])
    metadata.setdefault("compactedToolIds", [e["call_id"] for e in results
                                             if e["call_id"] is not None])
    metadata.setdefault("applied_edits", [{"type": step, "cleared_tool_uses": len(results),
                                           "cleared_input_tokens": row["tokens_saved"]}]
                        if evictions else [])
    return metadata


def session_plan_tables(session: SessionInput, policy: ResolvedPolicy | str,
                        config: Config | None = None) -> tuple[pa.Table, pa.Table]:
    """(plans, evictions) Arrow tables for one in-memory session."""
    if isinstance(policy, str):
        policy = (config or Config()).resolve(policy)
    result = plan_session_input(session, policy)
    return result.plans_table(), result.evictions_table()


# ---------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------
@dataclass
class PlanSummary:
    policy: str
    key: str
    config_hash: str
    steps: list[dict]
    sessions: int = 0
    sessions_ignored: int = 0
    plans: int = 0
    evictions: int = 0
    cleared: int = 0
    pruned: int = 0
    inputs_cleared: int = 0
    tokens_saved: int = 0
    bytes_saved: int = 0
    preserved: int = 0
    suggestions: int = 0

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class _BatchResult:
    plans: dict[str, pa.Table]
    evictions: dict[str, pa.Table]
    stats: dict[str, dict]


def _plan_batch_rows(inputs: list[SessionInput], policies: list[ResolvedPolicy]) -> _BatchResult:
    plans: dict[str, list] = {p.name: [] for p in policies}
    evictions: dict[str, list] = {p.name: [] for p in policies}
    stats = {p.name: {"preserved": 0, "suggestions": 0} for p in policies}
    for session in inputs:
        for policy in policies:
            result = plan_session_input(session, policy)
            plans[policy.name].extend(result.plans)
            evictions[policy.name].extend(result.evictions)
            stats[policy.name]["preserved"] += result.preserved
            stats[policy.name]["suggestions"] += len(result.suggestions)
    return _BatchResult(
        {name: pa.Table.from_pylist(rows, schema=PLANS_SCHEMA) for name, rows in plans.items()},
        {name: pa.Table.from_pylist(rows, schema=EVICTIONS_SCHEMA)
         for name, rows in evictions.items()},
        stats)


@contextlib.contextmanager
def _gc_paused():
    """No cyclic GC while planning one chunk: its many small objects otherwise trigger
    collections that cost 15-25% of the time (measured); cycles are collected afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plan_chunk(loaded: LoadedSessions, chunk: list[SessionRow], classifier, _extra: Any, *,
                policies: list[ResolvedPolicy]) -> _BatchResult:
    with _gc_paused():
        return _plan_batch_rows(session_inputs(loaded, chunk, classifier), policies)


PLAN_ORDER = ["session_id", "at_seq", "step", "plan_id"]
EVICTION_ORDER = ["session_id", "at_seq", "seq", "action", "plan_id"]


def _drop_other_configs(lake: Lake, policy: ResolvedPolicy) -> None:
    """Rows a policy's earlier parameters planned are never mixed with the current ones:
    when its stored plans carry another config hash, its plans and evictions all go (the
    caller replans what it needs)."""
    stored = lake.read_derived("plans", policy.key, PLANS_SCHEMA)
    if not stored.num_rows or pc.all(pc.equal(stored.column("config_hash"),
                                              policy.config_hash)).as_py():
        return
    for name in ("plans", "evictions"):
        for path in (lake.derived_dir / name).glob(f"{glob_escape(policy.key)}*.parquet"):
            if path.name == f"{policy.key}.parquet" or path.name[len(policy.key):].startswith(".b"):
                path.unlink()


@holds_lake_lock
def plan_many(lake: Lake, *, policies: Sequence[str], config: Config | None = None,
              session_id: str | None = None, since: Any = None,
              sessions: Iterable[str] | None = None,
              progress: Callable[[int, int], None] | None = None,
              workers: int | None = None, write: bool = True) -> list[PlanSummary]:
    """Plan several policies in one pass over the sessions (each session loaded once).

    ``sessions`` (the nightly job's owed sessions): plan only these, and replace exactly
    their rows (a session that has no messages any more, or is ignored, loses its plans).
    Plans and evictions are stored per session bucket (``Lake.write_session_rows``), so
    planning a few sessions rewrites a few files."""
    config = config or load_config(None)
    resolved = [config.resolve(p) for p in policies]
    names = [r.name for r in resolved]
    if len(set(names)) != len(names):
        raise UsageError("the same policy is requested twice")
    run = run_session_chunks(lake, config, functools.partial(_plan_chunk, policies=resolved),
                             session_id=session_id, since=since, sessions=sessions,
                             progress=progress, workers=workers)
    results: list[_BatchResult] = run.results
    todo, ignored = run.todo, run.ignored
    summaries = []
    planned = {r.session_id for r in todo} | {r.session_id for r in ignored}
    for policy in resolved:
        plans = pa.concat_tables([r.plans[policy.name] for r in results]) if results \
            else PLANS_SCHEMA.empty_table()
        evictions = pa.concat_tables([r.evictions[policy.name] for r in results]) if results \
            else EVICTIONS_SCHEMA.empty_table()
        summary = PlanSummary(policy.name, policy.key, policy.config_hash, policy.describe(),
                              sessions=len(todo), sessions_ignored=len(ignored))
        summary.plans = plans.num_rows
        summary.evictions = evictions.num_rows
        if evictions.num_rows:
            actions = evictions.column("action").to_pylist()
            summary.cleared = actions.count("clear")
            summary.pruned = actions.count("prune")
            summary.inputs_cleared = actions.count("clear_input")
            summary.tokens_saved = int(pc.sum(pc.subtract(evictions.column("tokens_before"),
                                                          evictions.column("tokens_after"))).as_py())
            summary.bytes_saved = int(pc.sum(pc.subtract(evictions.column("bytes_before"),
                                                         evictions.column("bytes_after"))).as_py())
        summary.preserved = sum(r.stats[policy.name]["preserved"] for r in results)
        summary.suggestions = sum(r.stats[policy.name]["suggestions"] for r in results)
        if write:
            replaced = None
            if session_id is not None or since is not None or sessions is not None:
                replaced = planned | set(sessions or ())
            _drop_other_configs(lake, policy)
            lake.write_session_rows("plans", policy.key, plans, replaced, sort_by=PLAN_ORDER)
            lake.write_session_rows("evictions", policy.key, evictions, replaced,
                                    sort_by=EVICTION_ORDER)
        summaries.append(summary)
    return summaries


def plan(lake: Lake, *, policy: str, config: Config | None = None, session_id: str | None = None,
         since: Any = None, progress: Callable[[int, int], None] | None = None,
         workers: int | None = None) -> PlanSummary:
    """Plan one policy (or chain) over the lake and write its plans and evictions."""
    return plan_many(lake, policies=[policy], config=config, session_id=session_id, since=since,
                     progress=progress, workers=workers)[0]


# ---------------------------------------------------------------------------------------
# Strategic suggestions for one session
# ---------------------------------------------------------------------------------------
@dataclass
class Suggestions:
    session_id: str
    policy: str
    minimal: bool
    points: list[dict]
    suppressed: list[dict]
    ignored_by: str | None = None

    def to_dict(self) -> dict:
        return {"session_id": self.session_id, "policy": self.policy,
                "suggestions": self.points, "suppressed": self.suppressed,
                "ignored_by": self.ignored_by}

    def render(self) -> str:
        from pipeline.reports.suggestions import box, one_line

        if self.minimal:
            return "\n".join(one_line(p) for p in self.points)
        return "\n".join(box(p) for p in self.points)


def suggest(lake: Lake, session_id: str, *, minimal: bool = False, config: Config | None = None,
            policy: str = "strategic") -> Suggestions:
    """Strategic suggestion points of one session (even an ignored one: asked explicitly)."""
    from pipeline.policies.strategic import suggestion_points

    config = config or load_config(None)
    resolved = config.resolve(policy)
    steps = [s for s in resolved.steps if s.policy == "strategic"]
    if not steps:
        raise UsageError(f"policy '{policy}' has no strategic step")
    rows = list_sessions(lake, config, session_id=session_id)
    if not rows:
        raise no_session_error(session_id)
    loaded = load_sessions(lake, rows, config)
    session = session_inputs(loaded, loaded.rows, memory_classifier(config))[0]
    points, suppressed = suggestion_points(session.view(), steps[0].params)
    return Suggestions(session_id, resolved.name, minimal, points, suppressed,
                       loaded.rows[0].ignored_by)
