"""The nightly job (``ctxlake run``): every stage, incremental, under one lake lock.

Stages, in order, each a library function the CLI could also call on its own:

1. ``ingest``      new/grown/changed archive files -> lake tables (skips unchanged files)
2. ``correlate``   request-side paths and managed-memory classes -> ``tool_links``;
   ``calibrate``     the per-model token calibration -> ``token_calibration``
3. ``plan``        the nightly policies (default ``payload_prune+microcompact``) -> plans, evictions
4. ``apply``       pruned transcripts under ``<lake>/out/<policy>/`` + the payload store
5. ``summarize``   daily session logs and recovery documents for the sessions the run touched

A second caller while a run holds the lake gets a clear ``LakeLockedError``. Every stage is
idempotent, so a run killed at any point is completed by the next one.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import pyarrow as pa

from pipeline import sqlfiles
from pipeline.config import load_config
from pipeline.lake import Lake

DEFAULT_POLICIES = ("payload_prune+microcompact",)
SESSION_FLAGS = pa.schema([("session_id", pa.string()), ("ignored", pa.bool_()),
                           ("ignored_by", pa.string())])

Progress = Callable[[str], Callable[[int, int], None] | None]


@dataclasses.dataclass
class NightlySummary:
    lake: str
    ingest: dict
    correlate: dict
    calibration_rows: int
    plans: list
    applied: dict
    summaries: dict
    touched_sessions: int
    sessions_ignored: int
    out_dir: str
    seconds: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def touched_sessions(lake: Lake, run_id: str) -> list[str]:
    """Sessions with rows from files (re)read by ingest run ``run_id``."""
    con = lake.connect()
    try:
        return [row[0] for row in con.execute(sqlfiles.load("select_run_sessions"), [run_id]).fetchall()]
    finally:
        con.close()


def flag_ignored_sessions(lake: Lake, patterns) -> int:
    """Write ``session_flags`` (the ``sessions.ignored`` flag): sessions whose first real user
    message matches an ``ignore_patterns`` regex stay in the lake, flagged. Returns the count."""
    from pipeline.policies.ignore_patterns import compile_patterns, matching_pattern

    compiled = compile_patterns(patterns)
    con = lake.connect()
    try:
        sessions = con.execute(sqlfiles.load("select_session_first_prompts")).fetchall()
    finally:
        con.close()
    rows = []
    for session_id, first_user_text in sessions:
        matched = matching_pattern(first_user_text, compiled)
        rows.append({"session_id": session_id, "ignored": matched is not None, "ignored_by": matched})
    lake.write_derived("session_flags", "all", pa.Table.from_pylist(rows, schema=SESSION_FLAGS))
    return sum(1 for row in rows if row["ignored"])


def _as_dict(value) -> dict:
    if value is None:
        return {}
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return dataclasses.asdict(value)


def run_nightly(paths: list[str | Path] | None = None, *, lake: Lake,
                config_path: Path | None = None, policies: tuple[str, ...] | None = None,
                tz: str | None = None, out: Path | None = None, workers: int | None = None,
                progress: Progress | None = None) -> NightlySummary:
    """Run every stage over ``paths`` (default: the standard locations) into ``lake``."""
    from pipeline.apply import apply_policy
    from pipeline.calibrate import calibrate
    from pipeline.correlate import correlate
    from pipeline.ingest import ingest
    from pipeline.plan import plan_many
    from pipeline.summarize import summarize

    started = time.perf_counter()
    config = load_config(config_path)
    policies = tuple(policies or DEFAULT_POLICIES)
    for spec in policies:
        config.resolve(spec)  # a bad policy name fails before any work is done
    out_dir = Path(out) if out else lake.root / "out"
    step = progress or (lambda name: None)
    with lake.lock():
        ingested = ingest(paths, lake=lake, workers=workers, quiet_minutes=config.quiet_minutes,
                          progress=step("ingest"))
        touched = touched_sessions(lake, ingested.run_id)
        ignored = flag_ignored_sessions(lake, config.ignore_patterns)
        correlated = correlate(lake, roots=config.memory_roots())
        calibration = calibrate(lake)
        planned = plan_many(lake, policies=list(policies), config=config, progress=step("plan"))
        applied = {spec: _as_dict(apply_policy(lake, policy=spec, out=out_dir, progress=step("apply")))
                   for spec in policies}
        summarized = summarize(lake, tz=tz, ignore_patterns=config.ignore_patterns,
                               session_logging=config.session_logging,
                               sessions=touched, progress=step("summarize"))
    return NightlySummary(
        lake=str(lake.root), ingest=ingested.to_dict(), correlate=_as_dict(correlated),
        calibration_rows=calibration.num_rows, plans=[_as_dict(p) for p in planned], applied=applied, summaries=_as_dict(summarized),
        touched_sessions=len(touched), sessions_ignored=ignored, out_dir=str(out_dir),
        seconds=round(time.perf_counter() - started, 3))
