"""The nightly job finishes what a killed run left undone and does only what it owes.

A run is killed (SIGKILL, in a forked child) at every stage boundary (``CTXLAKE_CRASH_AT``,
:mod:`pipeline.core.crash`) and at random moments; one plain run afterwards must leave pruned
outputs, the payload store, daily logs, recovery documents and every table exactly as an
uninterrupted run leaves them.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from pipeline.stages.ingest import ingest
from pipeline.core.lake import Lake, detach_forked_worker
from pipeline.stages.nightly import run_nightly
from tests.helpers.lake import copy_real, rows, scalar
from tests.helpers.processes import start_child, warm

SAMPLES = ("claude_code/claude_session.jsonl", "claude_code/claude_agent.jsonl",
           "codex/codex_session.jsonl", "mini_swe_agent/pvlib__pvlib-python-1606.traj.json")
POLICIES = ("payload_prune+microcompact", "observation_masking(window=10)")
STAGES = ["flags", "correlate", "calibrate", *(f"{kind}:{p}" for p in POLICIES
                                              for kind in ("plan", "apply")), "summarize", "usage"]
# table contents compared after recovery (columns that name a run or a time of day left out;
# the part files a source's rows are in, with the run id of their names left out)
PARTS = r"list_transform(parts, lambda p: regexp_replace(p, '/[0-9T]+-', '/<run>-')) AS parts"
TABLES = {
    "sources": f"* EXCLUDE (ingested_at, run_id, parts), {PARTS}", "records": "*", "messages": "*",
    "tool_calls": "*", "tool_results": "*", "session_info": "*",
    "quarantine": "* EXCLUDE (detected_at)", "sessions": "*", "plans": "*", "evictions": "*",
    "tool_paths": "*", "token_calibration": "*", "session_flags": "*",
}


def _night(lake_root: Path, archive: Path, **options) -> object:
    return run_nightly([archive], lake=Lake(lake_root), workers=options.pop("workers", 1),
                       tz="UTC", policies=options.pop("policies", POLICIES), **options)


# after _night_without: the file set aside and put back has a new ctime, nothing else differs
TABLES_HELD = dict(TABLES, sources=f"* EXCLUDE (ingested_at, run_id, ctime_ns, parts), {PARTS}")


def snapshot(lake_root: Path, *, store: bool = True, tables: dict = TABLES) -> dict[str, str]:
    """sha256 of every output, store file, summary, and of each table's sorted rows."""
    out = {}
    folders = ["out", "summaries"] + (["store"] if store else [])
    for folder in folders:
        for path in sorted((lake_root / folder).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(lake_root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    lake = Lake(lake_root)
    for table, columns in tables.items():
        found = rows(lake, f"SELECT {columns} FROM {table} ORDER BY ALL")
        out[f"table:{table}"] = hashlib.sha256(repr(found).encode()).hexdigest() + f":{len(found)}"
    return out


def _assert_same(lake_root: Path, setup, what: str = "", *, held: bool = False) -> None:
    tables = TABLES_HELD if held else TABLES
    expected = setup["expected_held" if held else "expected"]
    got = snapshot(lake_root, tables=tables)
    if got == expected:
        return
    differing = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
    detail = []
    for key in differing:
        if key.startswith("table:"):
            table = key[6:]
            mine = rows(Lake(lake_root), f"SELECT {tables[table]} FROM {table} ORDER BY ALL")
            theirs = rows(Lake(setup["base"] / "reference"), f"SELECT {tables[table]} FROM {table} ORDER BY ALL")
            first = next(((a, b) for a, b in zip(mine, theirs) if a != b), (len(mine), len(theirs)))
            detail.append(f"{table}: {first}")
    pytest.fail(f"{what} differs from an uninterrupted run: {differing}\n" + "\n".join(detail)[:3000])


def _child(lake_root: str, archive: str, crash_at: str | None, workers: int = 1,
           stall_calibrate: str | None = None) -> None:
    if crash_at:
        os.environ["CTXLAKE_CRASH_AT"] = crash_at
    if stall_calibrate:     # calibrate says which process runs it, then takes a minute
        import pipeline.stages.calibrate

        def stalled(lake, *, sessions=None):
            Path(stall_calibrate).write_text(str(os.getpid()))
            time.sleep(60)

        pipeline.stages.calibrate.calibrate = stalled
    try:
        _night(Path(lake_root), Path(archive), workers=workers)
    finally:
        os._exit(0)


def _start(lake_root: Path, archive: Path, crash_at: str | None = None, **options):
    return start_child(_child, str(lake_root), str(archive), crash_at, **options)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("nightly-kill")
    archive = copy_real(base, *SAMPLES)
    reference = base / "reference"
    summary = _night(reference, archive)
    assert summary.status == "ok", summary.stages
    expected = snapshot(reference)
    # the policies evict and store payloads: a killed apply has something to lose
    assert any(k.startswith("store/") for k in expected) and any(k.startswith("out/") for k in expected)
    assert any(k.startswith("summaries/recovery/") for k in expected)
    return {"base": base, "archive": archive, "expected": expected}


@pytest.fixture(scope="module")
def side_setup(tmp_path_factory):
    """Like ``setup``, with an archive of its own: the side-lane tests set a file of it aside
    and put it back (_night_without), which changes its ctime."""
    base = tmp_path_factory.mktemp("side-lane")
    archive = copy_real(base, *SAMPLES)
    _night(base / "reference", archive)
    return {"base": base, "archive": archive,
            "expected_held": snapshot(base / "reference", tables=TABLES_HELD)}


BOUNDARIES = ["ingest:committed"] + [f"stage:{s}:{when}" for s in STAGES
                                     for when in ("start", "batch", "done")]
# batch: a stage's commit (its ledger file written then only once the stage has run a while,
# COMMIT_WRITE_AFTER_S); done: its end, rows and marker written


@pytest.mark.parametrize("point", BOUNDARIES)
def test_a_run_killed_at_a_stage_boundary_is_finished_by_the_next_run(setup, point):
    lake_root = setup["base"] / point.replace(":", "_").replace("+", "_").replace("(", "_").replace(")", "_")
    child = _start(lake_root, setup["archive"], point)
    child.join(120)
    assert child.exitcode == -signal.SIGKILL, f"{point} was not reached"
    summary = _night(lake_root, setup["archive"])
    assert summary.status == "ok" and summary.interrupted_runs, summary.stages
    _assert_same(lake_root, setup)
    statuses = [r[0] for r in rows(Lake(lake_root), "SELECT status FROM runs ORDER BY started_at")]
    assert statuses == ["interrupted", "ok"]


HELD = "codex/codex_session.jsonl"


def _night_without(lake_root: Path, archive: Path, held: str = HELD) -> None:
    """A night over ``archive`` less the file ``held`` (set aside, then put back), so that
    the next night owes that file's session only: calibrate and usage then run beside the
    other stages (a full redo, such as a first run, does them in turn)."""
    path = archive / held
    aside = archive.parent / f"held-{path.name}"
    path.rename(aside)
    try:
        assert _night(lake_root, archive, workers=2).status == "ok"
    finally:
        aside.rename(path)


def test_a_night_whose_calibrate_and_usage_run_beside_the_other_stages_ends_as_an_inline_one(side_setup):
    lake_root = side_setup["base"] / "side-lane"
    _night_without(lake_root, side_setup["archive"])
    summary = _night(lake_root, side_setup["archive"], workers=2)
    assert summary.status == "ok" and summary.warnings == []
    assert [s.stage for s in summary.stages] == STAGES
    assert {s.stage: s.done for s in summary.stages} == {stage: 1 for stage in STAGES}
    assert summary.calibration_rows > 0 and summary.touched_sessions == 1
    _assert_same(lake_root, side_setup, held=True)


SIDE_LANE_POINTS = [f"stage:{stage}:{when}" for stage in ("calibrate", "usage")
                    for when in ("start", "batch", "done")] + ["stage:flags:done",
                                                               "stage:summarize:batch"]


@pytest.mark.parametrize("point", SIDE_LANE_POINTS)
def test_a_run_killed_at_a_boundary_of_either_lane_is_finished_by_the_next_run(side_setup, point):
    # with two workers calibrate and usage run in a forked process beside the others: a
    # crash point in that process kills the run's own process as well
    lake_root = side_setup["base"] / ("side-" + point.replace(":", "_").replace("+", "_"))
    _night_without(lake_root, side_setup["archive"])
    child = _start(lake_root, side_setup["archive"], point, workers=2)
    child.join(120)
    assert child.exitcode == -signal.SIGKILL, f"{point} was not reached"
    summary = _night(lake_root, side_setup["archive"], workers=2)
    assert summary.status == "ok" and summary.interrupted_runs, summary.stages
    _assert_same(lake_root, side_setup, held=True)


def test_killing_a_run_leaves_no_side_lane_running_and_no_lock(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    pid_file = tmp_path / "calibrate.pid"
    lake_root = tmp_path / "lake"
    _night_without(lake_root, archive)
    main = _start(lake_root, archive, "stage:summarize:start", workers=2,
                  stall_calibrate=str(pid_file))
    main.join(120)
    assert main.exitcode == -signal.SIGKILL
    side = int(pid_file.read_text())
    assert side != main.pid          # calibrate ran in a process of its own
    # which died with the run (its minute is not over) and holds no lock
    assert _gone(side), "the side lane outlived its killed run"
    with Lake(lake_root).lock():
        pass


def test_a_run_interrupted_in_its_own_process_stops_its_side_lane_at_once(tmp_path, monkeypatch):
    import pipeline.stages.calibrate
    import pipeline.stages.flags

    archive = copy_real(tmp_path, *SAMPLES)
    pid_file = tmp_path / "calibrate.pid"

    def stalled(lake, *, sessions=None):      # runs in the side lane (a fork of this process)
        pid_file.write_text(str(os.getpid()))
        time.sleep(60)

    def interrupted(*args, **kwargs):
        for _ in range(200):                   # the side lane is at work
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.05)
        raise KeyboardInterrupt

    _night_without(tmp_path / "lake", archive)
    monkeypatch.setattr(pipeline.stages.calibrate, "calibrate", stalled)
    monkeypatch.setattr(pipeline.stages.flags, "flag_ignored_sessions", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _night(tmp_path / "lake", archive, workers=2)
    side = int(pid_file.read_text())
    assert side != os.getpid()
    with pytest.raises(ProcessLookupError):   # killed and reaped before the run returned
        os.kill(side, 0)
    monkeypatch.undo()
    assert _night(tmp_path / "lake", archive, workers=2).status == "ok"


@pytest.mark.parametrize("max_lines, forked", [(0, False), (200_000, True)],
                         ids=["large lake: in turn", "small lake: beside"])
def test_a_first_run_does_calibrate_and_usage_beside_the_others_only_on_a_small_lake(
        tmp_path, monkeypatch, max_lines, forked):
    # two full redos at once add their peaks: above the limit nothing is forked
    import pipeline.core.ledger
    import pipeline.stages.calibrate

    ran_in: list[int] = []
    calibrate = pipeline.stages.calibrate.calibrate

    def recorded(lake, *, sessions=None):
        ran_in.append(os.getpid())
        return calibrate(lake, sessions=sessions)

    monkeypatch.setattr(pipeline.stages.calibrate, "calibrate", recorded)
    monkeypatch.setattr(pipeline.core.ledger, "BESIDE_FULL_MAX_LINES", max_lines)
    archive = copy_real(tmp_path, *SAMPLES)
    summary = _night(tmp_path / "lake", archive, workers=2)
    assert summary.status == "ok"
    # the forked lane's calls are not seen here: its process recorded them
    assert ran_in == ([] if forked else [os.getpid()])
    assert {s.stage: s.done > 0 for s in summary.stages}["calibrate"]


def test_twelve_runs_killed_at_random_moments_are_each_finished_by_one_plain_run(setup):
    warm()                             # the children's server up: a child's time alone
    started = time.perf_counter()      # a whole child run, as the trials start them
    timing = _start(setup["base"] / "timing", setup["archive"])
    timing.join(120)
    duration = time.perf_counter() - started
    rng = random.Random(20261201)
    killed = 0
    for trial in range(12):
        lake_root = setup["base"] / f"random-{trial}"
        child = _start(lake_root, setup["archive"])
        time.sleep(rng.uniform(0.05, 0.9 * duration))
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:      # it had already finished (and was reaped)
            pass
        child.join(60)
        killed += child.exitcode == -signal.SIGKILL
        _night(lake_root, setup["archive"])
        _assert_same(lake_root, setup, f"trial {trial}")
    assert killed >= 6       # most trials really were killed mid-run (the others finished)


def test_a_night_killed_while_doing_a_grown_file_is_finished_by_the_next_run(setup, tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    grown = archive / "claude_code" / "claude_session.jsonl"
    reference, trial = tmp_path / "reference", tmp_path / "trial"
    for lake_root in (reference, trial):
        _night(lake_root, archive)
    extra = json.loads(grown.read_text().splitlines()[-1])
    extra.update(uuid="00000000-0000-4000-8000-00000000beef", timestamp="2025-12-09T20:30:00.000Z",
                 type="user", message={"role": "user", "content": "and now add a README"})
    with open(grown, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(extra) + "\n")
    _night(reference, archive)
    for point in ("stage:correlate:done", "stage:plan:payload_prune+microcompact:batch",
                  "stage:apply:observation_masking(window=10):start", "stage:summarize:batch"):
        child = _start(trial, archive, point)
        child.join(120)
        assert child.exitcode == -signal.SIGKILL, point
    summary = _night(trial, archive)
    assert summary.status == "ok"
    assert snapshot(trial) == snapshot(reference)


def test_a_night_with_nothing_new_does_nothing(setup):
    lake_root = setup["base"] / "reference"
    summary = _night(lake_root, setup["archive"])
    assert snapshot(lake_root) == setup["expected"]
    assert summary.ingest.files_unchanged == len(SAMPLES)
    assert [(s.stage, s.done, s.failed) for s in summary.stages] == [
        (name, 0, 0) for name in STAGES]
    assert summary.touched_sessions == 0 and summary.status == "ok"


def test_one_appended_line_redoes_only_its_session_and_its_file(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    with open(archive / "codex" / "codex_session.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"timestamp": "2025-12-10T10:00:00.000Z", "type": "event_msg",
                                 "payload": {"type": "user_message", "message": "thanks"}}) + "\n")
    summary = _night(lake_root, archive)
    assert summary.ingest.files_appended == 1
    done = {s.stage: s.done for s in summary.stages}
    assert done == {name: 1 for name in STAGES}


def test_ingest_then_run_summarizes_every_session(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    lake = Lake(tmp_path / "lake")
    ingest([archive], lake=lake, workers=1)
    summary = run_nightly([archive], lake=lake, workers=1, tz="UTC")
    assert summary.ingest.files_unchanged == len(SAMPLES)
    top_level = scalar(lake, "SELECT count(*) FROM sessions WHERE parent_session_id IS NULL")
    assert summary.summaries.recovery_written == top_level == 3
    assert len(list((lake.root / "summaries" / "sessions").glob("*.md"))) == summary.summaries.days_written >= 1


def test_a_removed_source_leaves_tables_outputs_and_summaries(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    full, reduced = tmp_path / "full", tmp_path / "reduced"
    _night(full, archive)
    gone = archive / "mini_swe_agent" / "pvlib__pvlib-python-1606.traj.json"
    outputs = list((full / "out").rglob(gone.name))
    assert len(outputs) == 2
    gone.unlink()
    summary = _night(full, archive)
    assert summary.ingest.removed == [str(gone)]
    assert not any(p.exists() for p in outputs)
    assert scalar(Lake(full), "SELECT count(*) FROM sessions WHERE session_id LIKE 'pvlib%'") == 0
    _night(reduced, archive)
    assert snapshot(full, store=False) == snapshot(reduced, store=False)


def test_a_time_zone_change_rewrites_the_day_files_under_the_new_zone(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    changed, fresh = tmp_path / "changed", tmp_path / "fresh"
    _night(changed, archive)
    summary = run_nightly([archive], lake=Lake(changed), workers=1, tz="Pacific/Kiritimati",
                          policies=POLICIES)
    assert any("time zone changed" in w for w in summary.warnings)
    assert {s.stage: s.done for s in summary.stages}["summarize"] == 4
    run_nightly([archive], lake=Lake(fresh), workers=1, tz="Pacific/Kiritimati", policies=POLICIES)
    logs = lambda root: {p.name: p.read_text() for p in (root / "summaries" / "sessions").glob("*.md")}
    assert logs(changed) == logs(fresh) and len(logs(fresh)) >= 1
    listed = "".join(logs(changed).values())
    assert listed.count("### ") == 3        # each top-level session under one day only


def test_a_policy_parameter_change_replans_only_that_policy(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    config = tmp_path / "ctxlake.toml"
    config.write_text('[policies.mask]\npolicy = "observation_masking"\nwindow = 10\n')
    lake_root = tmp_path / "lake"
    policies = ("payload_prune+microcompact", "mask")
    _night(lake_root, archive, policies=policies, config_path=config)
    config.write_text('[policies.mask]\npolicy = "observation_masking"\nwindow = 5\n')
    summary = _night(lake_root, archive, policies=policies, config_path=config)
    done = {s.stage: s.done for s in summary.stages}
    assert done == {"flags": 0, "correlate": 0, "calibrate": 0,
                    "plan:payload_prune+microcompact": 0, "apply:payload_prune+microcompact": 0,
                    "plan:mask": 4, "apply:mask": 4, "summarize": 0, "usage": 0}
    assert scalar(Lake(lake_root), "SELECT count(DISTINCT config_hash) FROM plans WHERE policy = 'mask'") == 1


def test_a_deleted_output_is_written_again_by_the_next_run(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    doc = next((lake_root / "summaries" / "recovery").glob("*.md"))
    pruned = next((lake_root / "out").rglob("*.traj.json"))
    before = doc.read_bytes(), pruned.read_bytes()
    doc.unlink()
    pruned.unlink()
    summary = _night(lake_root, archive)
    assert (doc.read_bytes(), pruned.read_bytes()) == before
    done = {s.stage: s.done for s in summary.stages}
    assert done["summarize"] == 1 and sum(v for k, v in done.items() if k.startswith("apply:")) == 1


def _age_folders(root: Path, seconds: int = 3600) -> None:
    """Every folder below ``root`` last changed ``seconds`` ago (settled, as a night later)."""
    past = time.time() - seconds
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        os.utime(folder, (past, past))


def test_outputs_found_whole_are_not_checked_again_until_their_folder_changes(tmp_path, monkeypatch):
    from pipeline.stages import nightly

    archive = copy_real(tmp_path, *SAMPLES)
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    _age_folders(lake_root)
    _night(lake_root, archive)       # checks every output and notes the folders it listed
    assert sorted(p.name.split("-")[0] for p in (lake_root / "ledger").glob("*.checked.json")) \
        == ["apply_observation_masking_window_10_", "apply_payload_prune_microcompact", "summarize"]
    checks = []
    real_check = nightly._missing_outputs
    monkeypatch.setattr(nightly, "_missing_outputs",
                        lambda details, listings: checks.append(len(details)) or real_check(details, listings))
    summary = _night(lake_root, archive)
    assert checks == [] and all(s.done == 0 for s in summary.stages)
    pruned = next((lake_root / "out").glob("payload_prune_microcompact-*/*/*.traj.json"))
    before = pruned.read_bytes()
    pruned.unlink()                  # its folder's mtime moves: the check runs again
    summary = _night(lake_root, archive)
    assert checks == [4] and pruned.read_bytes() == before
    assert {s.stage: s.done for s in summary.stages}["apply:payload_prune+microcompact"] == 1


def test_a_ledger_written_before_heads_is_read_whole_and_owes_nothing(tmp_path):
    import pyarrow.parquet as pq

    archive = copy_real(tmp_path, *SAMPLES)
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    heads = {s.stage: (s.done, s.skipped) for s in _night(lake_root, archive).stages}
    for path in (lake_root / "ledger").glob("*.parquet"):
        table = pq.read_table(path)
        assert b"ctxlake.ledger.head" in table.schema.metadata
        pq.write_table(table.replace_schema_metadata(None), path)
    assert {s.stage: (s.done, s.skipped) for s in _night(lake_root, archive).stages} == heads
    assert set(heads.values()) == {(0, 4)}


def test_a_ledger_file_cut_short_costs_a_warning_and_that_stage_redoing_its_work(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    before = snapshot(lake_root)
    ledger_file = next((lake_root / "ledger").glob("summarize-*.parquet"))
    ledger_file.write_bytes(ledger_file.read_bytes()[:100])
    summary = _night(lake_root, archive)
    assert summary.exit_code == 0
    assert [w.split(" (")[0] for w in summary.warnings] == \
        ["summarize: its ledger file could not be read, so every item is redone"]
    assert str(ledger_file) in summary.warnings[0]
    assert {s.stage: s.done for s in summary.stages if s.done} == {"summarize": 4}
    assert snapshot(lake_root) == before
    again = _night(lake_root, archive)        # the file was written anew
    assert again.warnings == [] and all(s.done == 0 for s in again.stages)


def _same_derived_tables(one: Path, other: Path, tables=("usage_call_rows", "usage_calls_priced",
                                                       "usage_buckets", "session_log_entries",
                                                       "session_activity")):
    import pyarrow.parquet as pq

    for table in tables:
        stored = [[pq.read_table(p).to_pylist() for p in sorted((root / "derived" / table).glob("*.parquet"))]
                  for root in (one, other)]
        assert stored[0] == stored[1], table


def test_a_derived_part_cut_short_is_removed_and_the_run_recomputes_what_a_clean_lake_holds(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES[:3])
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    part = sorted((lake_root / "derived" / "usage_call_rows").glob("*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:50])          # a full disk, a bad copy
    copy_real(tmp_path, SAMPLES[3])                   # and new data
    summary = _night(lake_root, archive)
    assert summary.exit_code == 0
    assert summary.warnings == [f"removed {part} (not a whole Parquet file): every stage redone in full"]
    assert all(s.skipped == 0 and s.done > 0 for s in summary.stages)
    _night(tmp_path / "clean", archive)
    assert snapshot(lake_root, store=False) == snapshot(tmp_path / "clean", store=False)
    _same_derived_tables(lake_root, tmp_path / "clean")
    assert _night(lake_root, archive).warnings == []


def test_a_stage_that_cannot_read_a_derived_part_has_it_removed_and_every_stage_redo_everything(tmp_path):
    import pyarrow.parquet as pq

    from pipeline.core.ledger import Runner, Stage

    archive = copy_real(tmp_path, *SAMPLES)
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    parts = sorted((lake_root / "derived" / "usage_call_rows").glob("*.parquet"))
    schema = pq.read_schema(parts[1])
    data = parts[0].read_bytes()     # Parquet's magic at both ends, nothing readable inside
    parts[0].write_bytes(data[:4] + bytes(len(data) - 12) + (len(data) - 12).to_bytes(4, "little") + b"PAR1")
    lake = Lake(lake_root)
    runner = Runner(lake, "probe-run")
    report = runner.run(Stage("probe", {}, lambda: {"one": "1"},
                              lambda owed, commit: lake.read_derived("usage_call_rows", "all", schema)))
    assert (report.status, runner.corrupt, parts[0].exists()) == ("failed", str(parts[0]), False)
    assert report.error.startswith(f"{parts[0]}: cannot read this part of a derived table")
    summary = _night(lake_root, archive)
    assert {s.stage: (s.done, s.skipped) for s in summary.stages} == {s: (4, 0) for s in STAGES}
    _night(tmp_path / "clean", archive)
    assert snapshot(lake_root, store=False) == snapshot(tmp_path / "clean", store=False)
    _same_derived_tables(lake_root, tmp_path / "clean")


def test_a_damaged_part_the_side_lane_meets_is_removed_by_the_run_and_every_stage_redone(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    lake_root = tmp_path / "lake"
    _night_without(lake_root, archive)
    part = sorted((lake_root / "derived" / "usage_call_rows").glob("*.parquet"))[0]
    data = part.read_bytes()          # Parquet's magic at both ends, nothing readable inside
    part.write_bytes(data[:4] + bytes(len(data) - 12) + (len(data) - 12).to_bytes(4, "little") + b"PAR1")
    summary = _night(lake_root, archive, workers=2)   # usage, beside the others, reads it
    assert summary.status == "ok"
    first, removed = summary.warnings
    # the side lane's first stage to read it says so: usage in its forked process, or, when
    # the lake's views are extended just then (a derived view created over every part),
    # calibrate, as the runner asks what the lane owes before forking
    assert first.startswith((f"usage: {part}: cannot read this part of a derived table",
                             f"calibrate: {part}: cannot read this part of a derived table"))
    assert removed == f"removed {part} (unreadable): every stage redone in full"
    assert {s.stage: s.done for s in summary.stages} == {s: 4 for s in STAGES}
    _night(tmp_path / "clean", archive)
    assert snapshot(lake_root, store=False) == snapshot(tmp_path / "clean", store=False)
    _same_derived_tables(lake_root, tmp_path / "clean")


def test_a_derived_part_garbled_inside_is_found_by_the_views_and_removed_by_the_next_run(tmp_path):
    from click.testing import CliRunner

    from pipeline.cli import cli
    from pipeline.core import lake as lake_module

    archive = copy_real(tmp_path, *SAMPLES)
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    part = sorted((lake_root / "derived" / "session_flags").glob("*.parquet"))[0]
    data = part.read_bytes()          # whole in shape (magic at both ends), unreadable inside
    part.write_bytes(data[:4] + bytes(len(data) - 12) + (len(data) - 12).to_bytes(4, "little") + b"PAR1")
    (lake_root / "ctxlake.duckdb").unlink()            # the views are made again: they read it
    lake_module._VIEWS.clear()                         # (as in a new process)
    status = CliRunner().invoke(cli, ["--lake", str(lake_root), "status"], catch_exceptions=False)
    assert status.exit_code == 1
    assert status.output.splitlines()[0].startswith(
        f"Error: {part}: cannot read this part of a derived table: ")
    assert "hint: the next `ctxlake run` removes it and recomputes the derived tables" in status.output
    summary = _night(lake_root, archive)
    assert summary.exit_code == 0
    assert summary.warnings == [f"removed {part} (unreadable): every stage redone in full"]
    _night(tmp_path / "clean", archive)
    assert snapshot(lake_root, store=False) == snapshot(tmp_path / "clean", store=False)
    assert _night(lake_root, archive).warnings == []


def _hold_lock_with_a_worker(lake_root: str, pid_file: str) -> None:
    lake = Lake(lake_root)
    with lake.lock():
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"),
                                   initializer=detach_forked_worker)
        worker_pid = pool.submit(os.getpid).result()
        Path(pid_file).write_text(str(worker_pid))
        pool.submit(time.sleep, 60)
        time.sleep(60)
    os._exit(0)


def test_killing_only_the_main_process_leaves_no_lock_and_no_worker(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.root.mkdir()
    pid_file = tmp_path / "worker.pid"
    main = multiprocessing.get_context("fork").Process(
        target=_hold_lock_with_a_worker, args=(str(lake.root), str(pid_file)))
    main.start()
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    os.kill(main.pid, signal.SIGKILL)
    main.join(10)
    with lake.lock():        # free at once: the worker never held it
        pass
    assert _gone(worker), "the worker outlived its killed parent"


def _gone(pid: int, within: float = 5.0) -> bool:
    """Whether process ``pid`` is gone, or goes within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_lake_made_before_the_run_log_had_states_still_opens(tmp_path):
    import pyarrow.parquet as pq

    archive = copy_real(tmp_path, "codex/codex_session.jsonl")
    lake = Lake(tmp_path / "lake")
    ingest([archive], lake=lake, workers=1)
    old = pq.read_table(lake.runs_path).select(["run_id", "started_at", "finished_at", "files",
                                                "files_skipped", "lines", "records",
                                                "quarantined", "held_back"])
    pq.write_table(old, lake.runs_path)
    assert scalar(lake, "SELECT count(*) FROM messages") > 0
    assert rows(lake, "SELECT command, status, ingest_committed FROM runs") == [("ingest", "ok", True)]


def test_the_nightly_job_refreshes_the_html_report_for_the_sessions_that_changed(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    config = tmp_path / "ctxlake.toml"
    config.write_text("[report]\nhtml = true\n")
    lake_root = tmp_path / "lake"
    first = _night(lake_root, archive, config_path=config)
    assert (lake_root / "html" / "index.html").is_file()
    assert first.html.sessions_rendered == first.html.sessions >= 3
    with open(archive / "codex" / "codex_session.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"timestamp": "2025-12-10T10:00:00.000Z", "type": "event_msg",
                                 "payload": {"type": "user_message", "message": "thanks"}}) + "\n")
    second = _night(lake_root, archive, config_path=config)
    assert {s.stage: s.done for s in second.stages}["html"] == 1
    assert second.html.sessions_rendered == 1


def test_a_failing_stage_costs_that_stage_only_and_the_next_run_retries_it(tmp_path, monkeypatch):
    import pipeline.stages.calibrate
    from click.testing import CliRunner
    from pipeline.cli import cli

    archive = copy_real(tmp_path, *SAMPLES)

    def broken(lake, *, sessions=None):
        raise OSError("disk full")

    monkeypatch.setattr(pipeline.stages.calibrate, "calibrate", broken)
    result = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake"), "run", str(archive),
                                      "--tz", "UTC", "--json"], catch_exceptions=False)
    assert result.exit_code == 1
    summary = json.loads(result.output)
    states = {s["stage"]: s["status"] for s in summary["stages"]}
    assert states.pop("calibrate") == "failed" and set(states.values()) == {"ok"}
    assert summary["status"] == "failed" and "calibrate: OSError: disk full" in summary["warnings"]
    monkeypatch.undo()
    again = run_nightly([archive], lake=Lake(tmp_path / "lake"), workers=1, tz="UTC")
    assert {s.stage: s.done for s in again.stages}["calibrate"] == 4
    assert again.status == "ok" and again.exit_code == 0


def test_a_second_run_while_one_holds_the_lake_exits_75(tmp_path):
    from click.testing import CliRunner
    from pipeline.cli import cli

    archive = copy_real(tmp_path, "codex/codex_session.jsonl")
    lake = Lake(tmp_path / "lake")
    lake.root.mkdir()
    holder = multiprocessing.get_context("fork").Process(target=_hold, args=(str(lake.root),))
    holder.start()
    try:
        for _ in range(100):
            if (lake.root / ".lock").exists() and (lake.root / ".lock").read_text():
                break
            time.sleep(0.05)
        result = CliRunner().invoke(cli, ["--lake", str(lake.root), "run", str(archive)],
                                    catch_exceptions=False)
        assert result.exit_code == 75
        assert "another ctxlake run is using this lake" in result.output
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()


def _hold(lake_root: str) -> None:
    with Lake(lake_root).lock():
        time.sleep(30)
    os._exit(0)


def test_status_shows_the_lake_its_runs_and_what_each_stage_owes(tmp_path):
    from click.testing import CliRunner
    from pipeline.cli import cli

    archive = copy_real(tmp_path, *SAMPLES)
    lake_root = tmp_path / "lake"
    run_nightly([archive], lake=Lake(lake_root), workers=1, tz="UTC")
    ingest([archive / "codex"], lake=Lake(lake_root), workers=1)   # nothing new: owes nothing
    status = lambda: json.loads(CliRunner().invoke(
        cli, ["--lake", str(lake_root), "status", "--tz", "UTC", "--json"],
        catch_exceptions=False).output)
    first = status()
    assert first["lake"] == str(lake_root.resolve()) and first["sessions"] == 4
    assert [r["command"] for r in first["runs"]] == ["ingest", "run"]
    assert all(p["todo"] == 0 for p in first["pending"].values())
    with open(archive / "codex" / "codex_session.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"timestamp": "2025-12-10T10:00:00.000Z", "type": "event_msg",
                                 "payload": {"type": "user_message", "message": "thanks"}}) + "\n")
    ingest([archive / "codex"], lake=Lake(lake_root), workers=1)
    owed = {name: p["todo"] for name, p in status()["pending"].items()}
    assert owed == {"flags": 1, "correlate": 1, "calibrate": 1,
                    "plan:payload_prune+microcompact": 1, "apply:payload_prune+microcompact": 1,
                    "summarize": 1, "usage": 1}
    later = json.loads(CliRunner().invoke(cli, ["--lake", str(lake_root), "status", "--tz",
                                                "Asia/Tokyo", "--json"]).output)
    assert later["pending"]["summarize"]["full"] is True


def test_a_temporary_file_a_killed_holder_left_in_the_summaries_is_collected_by_the_next_run(tmp_path):
    archive = copy_real(tmp_path, "codex/codex_session.jsonl")
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    assert (lake_root / ".lock").read_text().endswith(" finished")
    left = lake_root / "summaries" / "sessions" / ".2025-12-10.md.k3j2.tmp"
    left.write_text("half a log")
    (lake_root / ".lock").write_text("pid 4242")     # what a holder killed with -9 leaves
    _night(lake_root, archive)
    assert not left.exists()


def test_after_a_clean_run_the_next_one_does_not_walk_the_summaries_for_temporary_files(tmp_path, monkeypatch):
    archive = copy_real(tmp_path, "codex/codex_session.jsonl")
    lake_root = tmp_path / "lake"
    _night(lake_root, archive)
    walked = []
    real_walk = os.walk

    def spy(top, *args, **kwargs):
        for dirpath, dirnames, names in real_walk(top, *args, **kwargs):
            walked.append(Path(dirpath).relative_to(lake_root).as_posix())
            yield dirpath, dirnames, names

    monkeypatch.setattr(os, "walk", spy)
    _night(lake_root, archive)
    assert "tables" in walked and "derived" in walked
    assert not [d for d in walked if d.startswith(("summaries", "store", "out"))]


def test_a_stage_not_run_for_a_failure_upstream_keeps_its_own_dependents_from_running(tmp_path, monkeypatch):
    import pipeline.stages.correlate

    archive = copy_real(tmp_path, *SAMPLES)

    def broken(lake, *, roots=None, sessions=None):
        raise OSError("disk full")

    monkeypatch.setattr(pipeline.stages.correlate, "correlate", broken)
    summary = run_nightly([archive], lake=Lake(tmp_path / "lake"), workers=1, tz="UTC")
    states = {s.stage: (s.status, s.error) for s in summary.stages}
    policy = next(name for name in states if name.startswith("plan:"))[len("plan:"):]
    assert states["correlate"] == ("failed", "OSError: disk full")
    assert states[f"plan:{policy}"] == ("skipped", "not run: correlate failed")
    assert states[f"apply:{policy}"] == ("skipped", f"not run: plan:{policy} was not run")
    monkeypatch.undo()
    again = run_nightly([archive], lake=Lake(tmp_path / "lake"), workers=1, tz="UTC")
    assert {s.stage: s.status for s in again.stages}[f"apply:{policy}"] == "ok"
    assert again.exit_code == 0
