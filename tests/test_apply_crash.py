"""apply killed at any moment, then run again, ends exactly like an uninterrupted run; write
errors (full disk, read-only folder) leave only the file concerned unpruned.

How the kills are made: ``pipeline.core.store.crash_point`` counts the write steps of a run (each
store write is split in two with a step between the halves, then the link; each output temp
file is split likewise, then the rename) and sends SIGKILL to the process at step
``CTXLAKE_TEST_CRASH_AT``. Each trial forks a child that runs ``apply`` armed with a step
drawn at random (fixed seed) from all the steps of an uninterrupted run, so the kill lands
inside store writes, between a payload and its manifest, inside an output's temp file, just
before and just after renames. A few more trials kill a separate ``python`` process with SIGKILL
after a random delay (wherever it happens to be, including while reading the lake).
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.lake import REPO, copy_real, ingest_paths
from pipeline.core import store as store_module
from pipeline.stages.apply import apply_policy
from pipeline.core.lake import Lake
from pipeline.stages.restore import restore, verify
from pipeline.core.schema import EVICTIONS
from pipeline.core.store import crash_points_passed
from test_apply import hand_evictions

SAMPLES = ["claude_code/claude_session.jsonl", "claude_code/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",
           "codex/codex_session.jsonl", "gemini/gemini_session.json",
           "swe_agent/6e44b9__sweagenttestrepo-1c2844.traj"]
POLICY = "crashy"


def _mixed_evictions(lake: Lake) -> pa.Table:
    """Large results pruned (payload + locator stored), small ones cleared."""
    cleared = hand_evictions(lake, policy=POLICY, action="clear").to_pylist()
    pruned = hand_evictions(lake, policy=POLICY, action="prune").to_pylist()
    mixed = [p if len(p["replacement"]) < 400 else c for c, p in zip(cleared, pruned)]
    return pa.Table.from_pylist(mixed, schema=EVICTIONS)


def _snapshot(lake_root: Path, out: Path) -> dict[str, tuple[int, bytes]]:
    files = {}
    for base, tag in ((out, "out"), (lake_root / "store", "store")):
        for path in sorted(base.rglob("*")):
            if path.is_file() or path.is_symlink():
                files[f"{tag}/{path.relative_to(base)}"] = (path.stat().st_mode & 0o777,
                                                           path.read_bytes())
    return files


@pytest.fixture(scope="module")
def crash_setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("crash")
    archive = copy_real(base, *SAMPLES)
    lake, _ = ingest_paths(base, archive)
    table = _mixed_evictions(lake)
    pq.write_table(table, base / "evictions.parquet")
    reference = base / "reference"
    shutil.copytree(lake.root, reference / "lake")
    summary = apply_policy(Lake(reference / "lake"), policy=POLICY, out=reference / "out",
                           evictions=table)
    assert summary.problems == [] and summary.files_pruned == len(SAMPLES)
    steps = crash_points_passed()
    return dict(base=base, archive=archive, lake=lake, table=table, steps=steps,
                expected=_snapshot(reference / "lake", reference / "out"))


def _trial_dir(setup, name: str) -> tuple[Lake, Path]:
    trial = setup["base"] / name
    shutil.copytree(setup["lake"].root, trial / "lake")
    return Lake(trial / "lake"), trial / "out"


def _child(lake_root: str, out: str, crash_at: int, table: pa.Table) -> None:
    os.environ["CTXLAKE_TEST_CRASH_AT"] = str(crash_at)
    apply_policy(Lake(lake_root), policy=POLICY, out=out, evictions=table)
    os._exit(0)


def _crash_at(lake: Lake, out: Path, step: int, table: pa.Table) -> int:
    child = multiprocessing.get_context("fork").Process(
        target=_child, args=(str(lake.root), str(out), step, table))
    child.start()
    child.join(60)
    return child.exitcode


def _finish_and_compare(setup, lake: Lake, out: Path, *, extra_manifests: int = 0) -> None:
    """Run apply to the end; outputs and store must equal the uninterrupted run's.

    After a failed run the store may also hold the restore manifest of the unpruned copy
    written then (``extra_manifests``): harmless, content-addressed, never different bytes.
    """
    summary = apply_policy(lake, policy=POLICY, out=out, evictions=setup["table"])
    assert summary.problems == []
    got = _snapshot(lake.root, out)
    extra = sorted(set(got) - set(setup["expected"]))
    assert len(extra) == extra_manifests and all(k.startswith("store/manifests/") for k in extra)
    assert {k: v for k, v in got.items() if k not in extra} == setup["expected"]
    assert verify(lake, out=out).problems == []


def test_apply_killed_at_24_random_write_steps_then_rerun_matches_an_uninterrupted_run(
        crash_setup):
    steps = crash_setup["steps"]
    assert steps > 60          # store writes, links, temp outputs and renames of 5 files
    rng = random.Random(20261130)
    chosen = sorted(rng.sample(range(1, steps + 1), 24))
    for step in chosen:
        lake, out = _trial_dir(crash_setup, f"step-{step}")
        assert _crash_at(lake, out, step, crash_setup["table"]) == -signal.SIGKILL, step
        _finish_and_compare(crash_setup, lake, out)


def test_apply_killed_twice_in_a_row_still_converges(crash_setup):
    rng = random.Random(7)
    for trial in range(2):
        lake, out = _trial_dir(crash_setup, f"twice-{trial}")
        first = rng.randint(1, crash_setup["steps"])
        assert _crash_at(lake, out, first, crash_setup["table"]) == -signal.SIGKILL
        # the second run redoes finished work as no-ops: it has fewer steps than the first
        second = rng.randint(1, max(1, crash_setup["steps"] - first))
        code = _crash_at(lake, out, second, crash_setup["table"])
        assert code in (-signal.SIGKILL, 0)
        _finish_and_compare(crash_setup, lake, out)


CHILD_SCRIPT = """
import sys
import pyarrow.parquet as pq
from pipeline.stages.apply import apply_policy
from pipeline.core.lake import Lake
table = pq.read_table(sys.argv[4])
print("ready", flush=True)
apply_policy(Lake(sys.argv[1]), policy=sys.argv[2], out=sys.argv[3], evictions=table)
print("done", flush=True)
"""


def _start_child(setup, lake: Lake, out: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("CTXLAKE_TEST_CRASH_AT", None)
    proc = subprocess.Popen([sys.executable, "-c", CHILD_SCRIPT, str(lake.root), POLICY,
                             str(out), str(setup["base"] / "evictions.parquet")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout.readline() == b"ready\n"   # imports done: apply starts now
    return proc


def test_apply_killed_with_sigkill_after_random_delays_then_rerun_matches(crash_setup):
    lake, out = _trial_dir(crash_setup, "timed-probe")
    proc = _start_child(crash_setup, lake, out)
    started = time.perf_counter()
    assert proc.stdout.readline() == b"done\n"
    duration = time.perf_counter() - started
    proc.wait()
    proc.stdout.close()
    rng = random.Random(99)
    for trial in range(5):
        lake, out = _trial_dir(crash_setup, f"timed-{trial}")
        proc = _start_child(crash_setup, lake, out)
        time.sleep(rng.uniform(0.05, 0.95) * duration)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        _finish_and_compare(crash_setup, lake, out)


# --------------------------------------------------------------------------------------
# write errors
# --------------------------------------------------------------------------------------
# found only in the Codex sample's payloads (Codex's shell output footer)
CODEX_MARKER = b"Wall time"


def test_a_full_disk_in_the_store_leaves_that_file_unpruned_and_the_rest_done(
        crash_setup, monkeypatch):
    lake, out = _trial_dir(crash_setup, "enospc-store")
    real_write = store_module._write_all

    def full_disk_for_codex(fd, data):
        if CODEX_MARKER in bytes(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(fd, data)

    monkeypatch.setattr(store_module, "_write_all", full_disk_for_codex)
    summary = apply_policy(lake, policy=POLICY, out=out, evictions=crash_setup["table"])
    source = crash_setup["archive"] / "codex" / "codex_session.jsonl"
    assert [(p.path, p.kind) for p in summary.problems] == [(str(source), "store")]
    problem = summary.problems[0]
    assert "No space left on device" in problem.error and "left unpruned" in problem.error
    assert problem.sessions and problem.output == str(out / POLICY / "codex" /
                                                      "codex_session.jsonl")
    assert (out / POLICY / "codex" / "codex_session.jsonl").read_bytes() == source.read_bytes()
    expected = crash_setup["expected"]
    for rel in SAMPLES:
        if not rel.startswith("codex/"):
            assert (out / POLICY / rel).read_bytes() == expected[f"out/{POLICY}/{rel}"][1]
    assert (summary.files_pruned, summary.files_failed) == (len(SAMPLES) - 1, 1)
    # the unpruned copy still restores (to itself) and the store holds no half file
    assert restore(out / POLICY / "codex" / "codex_session.jsonl",
                   store=lake.store_dir).data == source.read_bytes()
    assert not [p for p in lake.store_dir.rglob(".tmp-*")]
    monkeypatch.undo()
    _finish_and_compare(crash_setup, lake, out, extra_manifests=1)


def test_a_full_disk_while_writing_an_output_fails_only_that_output(crash_setup, monkeypatch):
    lake, out = _trial_dir(crash_setup, "enospc-out")
    import pipeline.stages.apply as apply_module

    real_write = apply_module._write_all

    def full_disk_for_gemini(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(".ctxlake-gemini"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(fd, data)

    monkeypatch.setattr(apply_module, "_write_all", full_disk_for_gemini)
    summary = apply_policy(lake, policy=POLICY, out=out, evictions=crash_setup["table"])
    assert [(p.kind, p.output) for p in summary.problems] == \
        [("write", str(out / POLICY / "gemini" / "gemini_session.json"))]
    assert "No space left" in summary.problems[0].error
    assert not (out / POLICY / "gemini").exists() or \
        list((out / POLICY / "gemini").iterdir()) == []
    assert summary.files_pruned == len(SAMPLES) - 1
    monkeypatch.undo()
    _finish_and_compare(crash_setup, lake, out)


def test_a_read_only_output_folder_fails_only_its_files(crash_setup, monkeypatch):
    lake, out = _trial_dir(crash_setup, "read-only")
    locked = out / POLICY / "swe_agent"
    real_open = os.open

    def read_only_folder(path, flags, *args, **kwargs):
        if Path(str(path)).parent == locked and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_folder)
    summary = apply_policy(lake, policy=POLICY, out=out, evictions=crash_setup["table"])
    assert [(p.kind, p.path.rsplit("/", 2)[-2]) for p in summary.problems] == \
        [("write", "swe_agent")]
    assert "Read-only file system" in summary.problems[0].error
    assert summary.files_pruned == len(SAMPLES) - 1
    assert sorted(p.name for p in (out / POLICY).iterdir()) == [".ctxlake-output", "claude_code",
                                                                "codex", "gemini", "swe_agent"]
    monkeypatch.undo()
    _finish_and_compare(crash_setup, lake, out)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_a_chmod_read_only_output_folder_fails_only_its_files(crash_setup):
    lake, out = _trial_dir(crash_setup, "chmod")
    locked = out / POLICY / "codex"
    locked.mkdir(parents=True)
    locked.chmod(0o555)
    try:
        summary = apply_policy(lake, policy=POLICY, out=out, evictions=crash_setup["table"])
    finally:
        locked.chmod(0o755)
    assert [p.kind for p in summary.problems] == ["write"]
    assert summary.files_pruned == len(SAMPLES) - 1


def test_a_symlink_planted_at_the_store_folder_leaves_every_file_unpruned(crash_setup, tmp_path):
    lake, out = _trial_dir(crash_setup, "symlinked-store")
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir()
    lake.store_dir.symlink_to(elsewhere, target_is_directory=True)
    summary = apply_policy(lake, policy=POLICY, out=out, evictions=crash_setup["table"])
    assert sorted(p.kind for p in summary.problems) == ["store"] * len(SAMPLES)
    assert all("refusing a symlink" in p.error for p in summary.problems)
    assert list(elsewhere.iterdir()) == []
    for rel in SAMPLES:   # every output is an unpruned byte copy
        assert (out / POLICY / rel).read_bytes() == (crash_setup["archive"] / rel).read_bytes()
    assert summary.files_pruned == 0
