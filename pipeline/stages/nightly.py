"""The nightly job (``ctxlake run``): ingest, then every later stage for what it owes.

Stages, in order (each a library function the CLI can also call on its own):

1. ``ingest``      new/grown/changed archive files -> lake tables (skips unchanged files;
   files gone from the archive leave the lake)
2. ``flags``       ``sessions.ignored`` from ``ignore_patterns``
3. ``correlate``   request-side paths and managed-memory classes -> ``tool_paths``
4. ``calibrate``   per-call calibration rows (remembered) and the fit -> ``token_calibration``
5. ``plan:<p>``    plans and evictions of each nightly policy (default
   ``payload_prune+microcompact``)
6. ``apply:<p>``   pruned transcripts under ``<out>/<policy>/`` + the payload store
7. ``summarize``   daily session logs and recovery documents

``calibrate`` and ``usage`` read no table the others write (and none reads theirs during a
run): with more than one worker (the default) they run in one forked process beside the
others, and a full redo (a first run) too on a lake of at most
:data:`pipeline.core.ledger.BESIDE_FULL_MAX_LINES` source lines (above it, one stage's peak
memory at a time; :meth:`pipeline.core.ledger.Runner.run_beside`); the reports and the
outputs are those of a run that does them in turn.

After ingest, each stage does only what it owes (:mod:`pipeline.core.ledger`): the sessions (or,
for apply, the files) whose input or settings changed since it last finished them, whose
outputs are missing, that failed, or that a killed run left undone; and it removes what it
wrote for sessions the lake no longer has. A night with nothing new reads a few small files.

Every run is logged in ``runs`` (state ``running`` while it works, then ``ok``, ``problems``
or ``failed``; a run found ``running`` by the next one was killed: ``interrupted``), with
per-stage figures and the settings in force. Exit codes: 0 ok, 1 data problems reported (a
stage failed, or some of its items), 2 usage error, 75 lake busy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import orjson

from pipeline import __version__
from pipeline.core import sqlfiles
from pipeline.core.config import Config, load_config
from pipeline.core.errors import CorruptPartError
from pipeline.stages.engine import resolve as resolve_engine
from pipeline.core.lake import Lake, check_output_folder, path_within
from pipeline.core.ledger import (LAYOUT, ItemResult, Ledger, Listings, Owed, Pending, Runner,
                                  Stage, StageReport, fingerprint, pending)
from pipeline.stages.flags import stage_settings as flags_stage_settings
from pipeline.stages.results import NightlySummary, RunSettings, StageRun

DEFAULT_POLICIES = ("payload_prune+microcompact",)

Progress = Callable[[str], Callable[[int, int], None] | None]


# ---------------------------------------------------------------------------------------
# What the stages read: fingerprints of sessions and files
# ---------------------------------------------------------------------------------------
class LakeInputs:
    """Content fingerprints of the lake's sessions and files, computed once per run (after
    ingest) and only when some stage asks."""

    def __init__(self, lake: Lake):
        self.lake = lake
        self._sessions: dict[str, str] | None = None
        self._files_of: dict[str, list[str]] = {}

    def sessions(self) -> dict[str, str]:
        if self._sessions is None:
            with self.lake.connect() as con:
                rows = con.execute(sqlfiles.load("select_session_fingerprints")).fetchall()
            self._sessions = {sid: fp for sid, fp, _ in rows}
            self._files_of = {sid: list(files) for sid, _, files in rows}
        return self._sessions

    def sessions_by_file(self) -> dict[str, list[str]]:
        self.sessions()
        by_file: dict[str, list[str]] = {}
        for sid, files in self._files_of.items():
            for source_id in files:
                by_file.setdefault(source_id, []).append(sid)
        return by_file

    def files(self) -> dict[str, str]:
        sources = self.lake.read_sources(("source_id", "format", "generation", "lines", "sha256"))
        return {source_id: fingerprint([generation, lines, sha256])
                for source_id, fmt, generation, lines, sha256
                in zip(*(column.to_pylist() for column in sources.columns))
                if fmt is not None and sha256 is not None}


def _all_done(owed: Owed, detail: Callable[[str], dict | None] = lambda item: None
              ) -> dict[str, ItemResult]:
    return {item: ItemResult("done", detail(item)) for item in owed.todo}


def _scope(owed: Owed) -> list[str] | None:
    """The sessions a stage function is asked for: None (all) when the settings changed."""
    return None if owed.full else sorted(set(owed.todo) | set(owed.removed))


# ---------------------------------------------------------------------------------------
# The stages
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class NightlySettings:
    config: Config
    policies: tuple[str, ...]
    tz: str
    out_dir: Path
    workers: int | None

    def describe(self) -> RunSettings:
        return RunSettings(self.tz, tuple(self.policies), str(self.out_dir),
                           tuple(self.config.ignore_patterns), __version__)


def nightly_stages(lake: Lake, settings: NightlySettings, inputs: LakeInputs,
                   progress: Progress, results: dict) -> list[tuple[Stage, tuple[str, ...]]]:
    """The stages after ingest, in order, each with the stages it cannot run without.
    Each stage's module is imported by its work, when it owes some (a night with nothing
    new imports none of them)."""
    config = settings.config
    patterns = list(config.ignore_patterns)
    flags_settings = flags_stage_settings(patterns)
    roots = config.memory_roots()
    correlate_settings = {"roots": repr(roots), "home": os.path.expanduser("~"), "layout": LAYOUT}

    def flags_work(owed: Owed, commit):
        from pipeline.stages.flags import flag_ignored_sessions

        results["sessions_ignored"] = flag_ignored_sessions(lake, patterns, sessions=_scope(owed))
        commit(_all_done(owed))

    def correlate_work(owed: Owed, commit):
        from pipeline.stages.correlate import correlate

        results["correlate"] = correlate(lake, roots=roots, sessions=_scope(owed))
        commit(_all_done(owed))

    def calibrate_work(owed: Owed, commit):
        from pipeline.stages.calibrate import calibrate

        results["calibration"] = calibrate(lake, sessions=_scope(owed))
        commit(_all_done(owed))

    stages: list[tuple[Stage, tuple[str, ...]]] = [
        (Stage("flags", flags_settings, inputs.sessions, flags_work), ()),
        (Stage("correlate", correlate_settings, inputs.sessions, correlate_work), ()),
        (Stage("calibrate", {"layout": LAYOUT, "version": __version__}, inputs.sessions,
               calibrate_work, beside=True), ()),
    ]
    for spec in settings.policies:
        resolved = config.resolve(spec)
        plan_name, apply_name = f"plan:{resolved.name}", f"apply:{resolved.name}"
        plan_settings = {"policy": resolved.name, "config_hash": resolved.config_hash,
                         "flags": flags_settings, "correlate": correlate_settings}
        target_root = settings.out_dir / resolved.key

        def plan_work(owed: Owed, commit, spec=spec):
            from pipeline.stages.plan import plan_many

            summary, = plan_many(lake, policies=[spec], config=config, sessions=_scope(owed),
                                 progress=progress("plan"), workers=settings.workers)
            results.setdefault("plans", []).append(summary)
            commit(_all_done(owed))

        def apply_inputs(plan_name=plan_name):
            planned = Ledger(lake).keys(plan_name)     # (input_fp, settings_fp, status)
            by_file = inputs.sessions_by_file()
            none = (None, None, None)
            return {source_id: fingerprint([fp] + [
                [sid, planned.get(sid, none)[0], planned.get(sid, none)[2]]
                for sid in sorted(by_file.get(source_id, []))])
                for source_id, fp in inputs.files().items()}

        def apply_work(owed: Owed, commit, spec=spec, target_root=target_root):
            from pipeline.stages.apply import apply_policy

            # a symlink planted in <lake>/out fails this stage before anything is removed
            check_output_folder(lake.root, settings.out_dir, target_root)
            removed, kept = _remove_outputs(owed, lake, target_root)
            summary = apply_policy(lake, policy=spec, out=settings.out_dir,
                                   source_ids=None if owed.full else owed.todo,
                                   progress=progress("apply"), engine=resolve_engine(None, config))
            summary.files_removed = removed
            summary.outputs_kept = kept
            results.setdefault("applied", {})[spec] = summary
            commit({source_id: ItemResult("failed" if out.get("failed") else "done",
                                          {"output": out.get("output")})
                    for source_id, out in summary.outputs.items()})

        stages.append((Stage(plan_name, plan_settings, inputs.sessions, plan_work,
                             upstream=("flags", "correlate")), ("flags", "correlate")))
        stages.append((Stage(apply_name, {"plan": plan_settings, "out": str(target_root),
                                          "layout": LAYOUT},
                             apply_inputs, apply_work, missing=_missing_outputs,
                             upstream=(plan_name,), same_items=False), (plan_name,)))

    summarize_settings = {"time_zone": settings.tz, "flags": flags_settings, "layout": LAYOUT,
                          "session_logging": config.session_logging, "version": __version__,
                          **({"log_details": True} if config.log_details else {})}

    def summarize_work(owed: Owed, commit):
        from pipeline.stages.summarize import summarize

        days = set()
        for item in set(owed.todo) | set(owed.removed):
            detail = _detail(owed.recorded.get(item))
            if detail.get("day"):
                days.add(detail["day"])
        summary = summarize(lake, tz=settings.tz, ignore_patterns=patterns,
                            sessions=None if owed.full else owed.todo, days=days,
                            removed=owed.removed, progress=progress("summarize"),
                            session_logging=config.session_logging,
                            log_details=config.log_details, ledger=True)
        results["summaries"] = summary
        commit(_all_done(owed, lambda item: summary.placed.get(item)))

    stages.append((Stage("summarize", summarize_settings, inputs.sessions, summarize_work,
                         missing=lambda details, listings: _missing_summaries(lake, details, listings),
                         upstream=("flags",)), ("flags",)))
    stages.append(_usage_stage(lake, inputs, results))
    if config.report_html:
        stages.append(_html_stage(lake, settings, inputs, results, summarize_settings))
    return stages


def _usage_stage(lake: Lake, inputs: LakeInputs, results: dict) -> tuple[Stage, tuple[str, ...]]:
    """The usage tables the reports read (per-call rows of the changed sessions, the calls
    once across the lake with their cost, the 15-minute sums): ``pipeline.stages.usage.refresh_usage``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        prices = version("genai-prices")
    except PackageNotFoundError:
        prices = None

    def usage_work(owed: Owed, commit):
        from pipeline.stages.usage import refresh_usage

        results["usage"] = refresh_usage(lake, sessions=_scope(owed))
        commit(_all_done(owed))

    return (Stage("usage", {"price_snapshot": prices, "layout": LAYOUT, "version": __version__},
                  inputs.sessions, usage_work, beside=True), ())


def _html_stage(lake: Lake, settings: NightlySettings, inputs: LakeInputs, results: dict,
                summarize_settings: dict) -> tuple[Stage, tuple[str, ...]]:
    """``[report] html = true``: the HTML report under ``<lake>/html``, its session pages
    rendered again only for the sessions that changed (the overview pages every time)."""
    policy = settings.config.resolve(settings.policies[0]).name
    plan_name = f"plan:{policy}"
    out = lake.root / "html"

    def html_work(owed: Owed, commit):
        from pipeline.reports.html import render_html

        results["html"] = render_html(lake, out, sessions=None if owed.full else owed.todo,
                                      policy=policy, tz=settings.tz)
        commit(_all_done(owed))

    html_settings = {"policy": policy, "summarize": summarize_settings, "out": str(out),
                     "layout": LAYOUT, "version": __version__}
    return (Stage("html", html_settings, inputs.sessions, html_work,
                  upstream=(plan_name, "summarize")), (plan_name, "summarize"))


def _detail(row: dict | None) -> dict:
    return _parsed(row.get("detail") if row else None)


def _parsed(detail: str | None) -> dict:
    """A ledger row's detail (JSON text) as a dict ({} when it is none or not an object)."""
    if not detail:
        return {}
    try:
        value = orjson.loads(detail)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _missing_outputs(details: dict[str, str | None], listings: Listings) -> set[str]:
    """Files whose pruned output is gone (or was never written)."""
    missing = set()
    for item, detail in details.items():
        output = _parsed(detail).get("output")
        if output and not listings.has(output):
            missing.add(item)
    return missing


def _missing_summaries(lake: Lake, details: dict[str, str | None],
                       listings: Listings) -> set[str]:
    """Sessions whose daily log or recovery document is gone."""
    log_dir = str(lake.summaries_dir / "sessions")
    doc_dir = str(lake.summaries_dir / "recovery")
    missing = set()
    for item, text in details.items():
        detail = _parsed(text)
        day, doc = detail.get("day"), detail.get("doc")
        if day and not listings.holds(log_dir, f"{day}.md"):
            missing.add(item)
        if doc and not listings.holds(doc_dir, doc):
            missing.add(item)
    return missing


def _remove_outputs(owed: Owed, lake: Lake, target_root: Path) -> tuple[int, list[str]]:
    """Delete the pruned outputs of files the lake no longer has (only regular files inside
    the policy's output folder, never through a symlink). An output edited after apply (no
    restore manifest names its bytes: an agent appended to the mirror, a person changed it)
    is kept, not lost with its source: returned in the list, said as a warning."""
    from pipeline.core.store import PayloadStore, file_sha256

    removed, kept = 0, []
    root = os.path.realpath(target_root)
    store = PayloadStore.for_lake(lake.root)
    for item in owed.removed:
        output = _detail(owed.recorded.get(item)).get("output")
        if not output:
            continue
        path = Path(output)
        if path_within(os.path.realpath(path.parent), root) and path.is_file() \
                and not path.is_symlink():
            if not store.manifest_path(file_sha256(path)).is_file():
                kept.append(output)
                continue
            path.unlink()
            removed += 1
    return removed, kept


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------
def _previous_settings(lake: Lake) -> dict | None:
    runs = [r for r in lake.read_runs().to_pylist() if r["command"] == "run" and r["settings_json"]
            and r["status"] in ("ok", "problems")]
    return json.loads(runs[-1]["settings_json"]) if runs else None


def _settings_changes(before: dict | None, settings: RunSettings) -> list[str]:
    """A warning per setting that differs from the last run's (:meth:`RunSettings.changed_from`)."""
    changed = settings.changed_from(before) or {}
    now = settings.to_dict()
    names = {"time_zone": "time zone", "policies": "policies", "out": "output folder",
             "ignore_patterns": "ignore patterns", "version": "ctxlake version"}
    return [f"{label} changed since the last run: {changed[key]!r} -> {now[key]!r}"
            for key, label in names.items() if key in changed]


# how many unreadable derived parts one run removes, redoing every stage after each
CORRUPT_PART_RETRIES = 3


def run_nightly(paths: list[str | Path] | None = None, *, lake: Lake,
                config_path: Path | None = None, policies: tuple[str, ...] | None = None,
                tz: str | None = None, out: Path | None = None, workers: int | None = None,
                progress: Progress | None = None) -> NightlySummary:
    """Run ingest over ``paths`` (default: the standard locations) into ``lake``, then every
    later stage for what it owes (see the module docstring)."""
    from pipeline.stages.ingest import ingest, make_run_id, require_paths, standard_locations
    from pipeline.stages.usage import resolve_timezone

    started = time.perf_counter()
    config = load_config(config_path)
    policies = tuple(policies or DEFAULT_POLICIES)
    resolved = [config.resolve(spec) for spec in policies]  # a bad name fails before any work
    settings = NightlySettings(config, policies, resolve_timezone(tz),
                               Path(out) if out else lake.root / "out", workers)
    require_paths(paths or ())
    for policy in resolved if out else ():   # the user's --out, before any work
        check_output_folder(lake.root, settings.out_dir, settings.out_dir / policy.key,
                            archives=list(paths) if paths else standard_locations())
    step = progress or (lambda name: None)
    started_at = datetime.now(timezone.utc)
    run_id = make_run_id(started_at)
    with lake.lock():
        lake.init()
        interrupted = lake.mark_interrupted()
        lake.gc_uncommitted()
        described = settings.describe()
        warnings = _settings_changes(_previous_settings(lake), described)
        warnings += _remove_broken_parts(lake)
        lake.record_run({"run_id": run_id, "started_at": started_at, "command": "run",
                         "status": "running", "pid": os.getpid(), "ingest_committed": False,
                         "settings_json": json.dumps(described.to_dict(), sort_keys=True)})
        try:
            ingested = None
            for attempt in range(CORRUPT_PART_RETRIES + 1):
                try:
                    read = ingest(paths, lake=lake, workers=workers, progress=step("ingest"),
                                  run_id=run_id, quiet_minutes=config.quiet_minutes,
                                  engine=resolve_engine(None, config))
                    # a second pass reads nothing new: the run reports what the first read
                    ingested = read if ingested is None else ingested
                    runner = Runner(lake, run_id)
                    results: dict = {}
                    inputs = LakeInputs(lake)
                    stages = nightly_stages(lake, settings, inputs, step, results)
                    # calibrate and usage read nothing the others write: with more than one
                    # worker they run in a forked process beside the others
                    beside = [(s, n) for s, n in stages if s.beside] if settings.workers != 1 else []
                    in_side_lane = {id(stage) for stage, _ in beside}
                    try:
                        runner.run_beside(beside, results)
                        for stage, needs in stages:
                            if runner.corrupt:
                                break
                            if id(stage) not in in_side_lane:
                                runner.run(stage, blocked_by=needs)
                        runner.join()
                    finally:
                        runner.abandon()     # a side lane the loop left early never writes on
                    order = [stage.name for stage, _ in stages]
                    runner.reports.sort(key=lambda report: order.index(report.stage))
                    warnings += [f"{report.stage}: {said}" for report in runner.reports
                                 for said in (report.error, report.warning) if said]
                    warnings += [f"apply:{spec}: kept {path}: edited after apply, its source is gone "
                                 "(delete it by hand if it is not wanted)"
                                 for spec, applied in results.get("applied", {}).items()
                                 for path in applied.outputs_kept]
                    corrupt = runner.corrupt
                except CorruptPartError as error:   # met outside a stage (the views of ingest)
                    if attempt == CORRUPT_PART_RETRIES or not Ledger(lake).drop_part(error.path):
                        raise
                    corrupt = error.path
                if not corrupt:
                    break
                # ingest and every stage again, in full, over derived tables without the bad
                # part (ingest has nothing new to read the second time)
                warnings.append(f"removed {corrupt} (unreadable): every stage redone in full")
            # the stages made new derived tables: the persisted views follow now, so the
            # next night does not pay for it
            refreshed = lake.refresh_duckdb_file()
            if refreshed:
                warnings.append(refreshed)
        except BaseException as error:
            lake.record_run({"run_id": run_id, "finished_at": datetime.now(timezone.utc),
                             "status": "interrupted" if isinstance(error, KeyboardInterrupt)
                             else "failed", "exit_code": 1,
                             "warnings": [f"{type(error).__name__}: {error}"]})
            raise
        reports: list[StageReport] = runner.reports
        failed = [r for r in reports if r.status in ("failed", "problems", "skipped")]
        applied = results.get("applied", {})
        apply_problems = sum(len(a.problems) for a in applied.values())
        status = "failed" if any(r.status == "failed" for r in reports) else \
            "problems" if failed or apply_problems else "ok"
        exit_code = 0 if status == "ok" else 1
        sessions_done = sum(r.done for r in reports)
        calibration = results.get("calibration")
        summary = NightlySummary(
            lake=str(lake.root), run_id=run_id, status=status, exit_code=exit_code,
            ingest=ingested, stages=[StageRun.of(r) for r in reports],
            correlate=results.get("correlate"),
            calibration_rows=calibration.num_rows if calibration is not None else 0,
            plans=results.get("plans", []), applied=applied,
            summaries=results.get("summaries"), html=results.get("html"),
            touched_sessions=max((r.done for r in reports if not r.stage.startswith("apply:")),
                                 default=0),
            sessions_ignored=_ignored_count(lake, warnings), out_dir=str(settings.out_dir),
            seconds=round(time.perf_counter() - started, 3), warnings=warnings,
            interrupted_runs=interrupted, settings=described)
        lake.record_run({"run_id": run_id, "finished_at": datetime.now(timezone.utc),
                         "status": status, "exit_code": exit_code,
                         "sessions_done": sessions_done,
                         "sessions_skipped": sum(r.skipped for r in reports),
                         "sessions_failed": sum(r.failed for r in reports),
                         "warnings": warnings,
                         "stages_json": json.dumps([s.to_dict() for s in summary.stages],
                                                  sort_keys=True)})
    return summary


def _remove_broken_parts(lake: Lake) -> list[str]:
    """Derived parts damaged since they were written are removed, and every stage redoes all
    its work (``Ledger.drop_part``): what the run says about it."""
    ledger = Ledger(lake)
    return [f"removed {path} (not a whole Parquet file): every stage redone in full"
            for path in lake.broken_derived_parts() if ledger.drop_part(str(path))]


def _ignored_count(lake: Lake, warnings: list[str]) -> int:
    """Sessions flagged ignored (0, said in ``warnings``, when the flags cannot be read: the
    flags stage has then failed and said so; the run's record must still be written)."""
    import pyarrow as pa

    from pipeline.stages.flags import SESSION_FLAGS

    try:
        flags = lake.read_derived("session_flags", "all", SESSION_FLAGS, columns=["ignored"])
    except (OSError, pa.ArrowException) as error:
        warnings.append(f"ignored sessions not counted: {error}")
        return 0
    # counted in Python (a few thousand values): pyarrow.compute costs ~50 ms to import
    return sum(1 for ignored in flags.column("ignored").to_pylist() if ignored)


def pending_work(lake: Lake, *, config_path: Path | None = None,
                 policies: tuple[str, ...] | None = None, tz: str | None = None,
                 out: Path | None = None) -> dict[str, Pending]:
    """What each stage owes now, without doing it (``ctxlake status``)."""
    from pipeline.stages.usage import resolve_timezone

    config = load_config(config_path)
    settings = NightlySettings(config, tuple(policies or DEFAULT_POLICIES), resolve_timezone(tz),
                               Path(out) if out else lake.root / "out", None)
    stages = [stage for stage, _ in nightly_stages(lake, settings, LakeInputs(lake),
                                                   lambda name: None, {})]
    return pending(lake, stages)
