"""--engine ray on a real local Ray instance: the same tables, outputs and replay rows as the
local engine, on the real samples and a small demo archive; a killed task is retried by Ray
and leaves the same result.

Ray is the optional extra ``ctxlake[ray]`` (in the dev extra, so ``make test`` runs these);
without it the module is skipped. One Ray instance (2 CPUs, no dashboard) serves the module
and is shut down after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

ray = pytest.importorskip("ray")

from pipeline.stages import apply, recover, session_engine  # noqa: E402
from pipeline.cli import cli  # noqa: E402
from pipeline.core.lake import Lake  # noqa: E402

from tests.helpers.lake import REAL, assert_same_lake, view_rows  # noqa: E402
from tests.helpers.s3 import bucket, s3_endpoint  # noqa: E402, F401 (fixtures)

SWEEP_CONFIG = """\
[sweeps]
masking = ["observation_masking(window=3)", "observation_masking(window=10)"]
"""


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    # address="local": a new instance of this process's own, even when another test process
    # (pytest-xdist) has one running, which ray.init() alone would join
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 1024 * 1024)
    yield
    ray.shutdown()


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def invoke_local(*args: str, env: dict | None = None) -> str:
    """The local engine as a user runs it: its own process (this one has Ray initialised, and
    a process connected to Ray must not fork the local engine's process pools)."""
    ctxlake = Path(sys.executable).with_name("ctxlake")
    done = subprocess.run([str(ctxlake), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def demo_lakes(tmp_path_factory):
    """A 3 MB demo archive run by the nightly job twice: local engine and Ray."""
    from pipeline.demo.archive import write_demo_archive

    tmp = tmp_path_factory.mktemp("ray-demo")
    write_demo_archive(tmp / "demo", size_bytes=3_000_000, seed=11)
    (tmp / "ctxlake.toml").write_text(SWEEP_CONFIG)
    outputs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(apply, "ENGINE_TASK_BYTES", 512 * 1024)   # apply: several Ray tasks
        for engine, run in (("local", invoke_local), ("ray", invoke)):
            outputs[engine] = json.loads(run(
                "--lake", str(tmp / engine), "--engine", engine, "run", str(tmp / "demo"),
                "--tz", "UTC", "--config", str(tmp / "ctxlake.toml"), "--json"))
    return tmp, outputs


def test_run_on_ray_writes_the_same_tables_and_outputs_as_local_on_the_real_samples(
        tmp_path, monkeypatch):
    # small session chunks and file runs, so plan and apply run as several Ray tasks even on
    # these short samples
    monkeypatch.setattr(session_engine, "CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(apply, "ENGINE_TASK_BYTES", 64 * 1024)
    # and summarize's recovery documents as Ray tasks too (12 sessions)
    monkeypatch.setattr(recover, "PARALLEL_MIN_DOCUMENTS", 4)
    invoke_local("--lake", str(tmp_path / "local"), "run", str(REAL), "--tz", "UTC")
    invoke("--lake", str(tmp_path / "ray"), "--engine", "ray", "run", str(REAL), "--tz", "UTC")
    assert_same_lake(tmp_path / "local", tmp_path / "ray")
    assert len(view_rows(tmp_path / "ray")["sessions"]) == 12


def test_run_on_ray_into_an_s3_lake_writes_the_driver_hosts_mirror_and_pushes_it_like_local(
        tmp_path, bucket, monkeypatch):
    # Ray's tasks write parts into the driver's mirror by absolute path (tasks on the driver's
    # host; a multi-node cluster puts the mirror on the shared filesystem with --mirror)
    name, _ = bucket
    invoke_local("--lake", str(tmp_path / "local"), "run", str(REAL), "--tz", "UTC")
    monkeypatch.setattr(session_engine, "CHUNK_BYTES", 64 * 1024)   # several Ray tasks
    invoke("--lake", f"s3://{name}/lake", "--mirror", str(tmp_path / "m1"), "--engine", "ray",
           "run", str(REAL), "--tz", "UTC")
    assert_same_lake(tmp_path / "local", tmp_path / "m1" / "lake")
    invoke("--lake", f"s3://{name}/lake", "--mirror", str(tmp_path / "m2"), "status")
    assert_same_lake(tmp_path / "local", tmp_path / "m2" / "lake")


def test_ingest_and_run_on_ray_match_local_on_a_demo_archive(demo_lakes):
    tmp, outputs = demo_lakes
    assert_same_lake(tmp / "local", tmp / "ray")
    local, other = outputs["local"], outputs["ray"]
    assert local["ingest"]["records"] == other["ingest"]["records"] > 1000
    # the demo's ingest is several chunks, so several Ray tasks wrote parts
    assert len(list((tmp / "ray" / "tables" / "records").glob("2*.parquet"))) >= 2
    # apply's counts (files, bytes, payloads stored and reused) are the local engine's
    for name, summary in local["applied"].items():
        assert {**summary, "seconds": 0, "out": ""} == {**other["applied"][name], "seconds": 0,
                                                        "out": ""}
    assert local["applied"] and all(s["files_written"] > 10 for s in other["applied"].values())


def test_replay_sweep_on_ray_gives_the_same_rows_and_summary_as_local(demo_lakes):
    tmp, _ = demo_lakes
    summaries = {}
    for engine, run in (("local", invoke_local), ("ray", invoke)):
        summaries[engine] = json.loads(run(
            "--lake", str(tmp / engine), "--engine", engine, "replay", "--sweep", "masking",
            "--policy", "microcompact", "--config", str(tmp / "ctxlake.toml"), "--json"))
    assert summaries["local"] == summaries["ray"]
    assert [row["policy"] for row in summaries["ray"]["summary"]] == [
        "none", "microcompact", "observation_masking(window=3)",
        "observation_masking(window=10)"]
    for name in ("policy_eval", "replay_turns"):
        local = {p.name: p.read_bytes() for p in (tmp / "local" / "derived" / name).iterdir()}
        other = {p.name: p.read_bytes() for p in (tmp / "ray" / "derived" / name).iterdir()}
        assert len(local) == 4
        assert local == other


def run_with_one_ray_task_killed(tmp_path: Path, monkeypatch, point: str) -> None:
    """``run`` on the real samples, locally, then on Ray with the first Ray worker to pass the
    crash point ``point`` SIGKILLed there (its task is retried by Ray)."""
    invoke_local("--lake", str(tmp_path / "local"), "run", str(REAL), "--tz", "UTC")
    marker = tmp_path / "killed-once"
    monkeypatch.setenv("CTXLAKE_CRASH_AT", point)
    monkeypatch.setenv("CTXLAKE_CRASH_ONCE", str(marker))
    invoke("--lake", str(tmp_path / "ray"), "--engine", "ray", "run", str(REAL), "--tz", "UTC")
    assert marker.exists()          # a Ray worker did die there


def test_a_killed_ray_ingest_task_is_retried_and_leaves_the_same_lake(tmp_path, monkeypatch):
    # the worker dies after writing its parts
    run_with_one_ray_task_killed(tmp_path, monkeypatch, "ingest:chunk")
    assert_same_lake(tmp_path / "local", tmp_path / "ray")


def test_a_killed_ray_session_task_is_retried_and_leaves_the_same_plans(tmp_path, monkeypatch):
    # the worker dies with a planned chunk in hand
    monkeypatch.setattr(session_engine, "CHUNK_BYTES", 64 * 1024)
    run_with_one_ray_task_killed(tmp_path, monkeypatch, "engine:session_chunk")
    assert_same_lake(tmp_path / "local", tmp_path / "ray")


def test_the_config_engine_and_address_make_a_ray_engine_joining_that_cluster():
    from pipeline.stages import engine as engines
    from pipeline.core.config import config_from_dict

    chosen = engines.resolve(None, config_from_dict({"engine": "ray", "ray_address": "auto"}))
    assert isinstance(chosen, engines.RayEngine)
    assert chosen.describe() == {"engine": "ray", "ray_address": "auto"}


def test_a_killed_ray_apply_task_is_retried_and_leaves_the_same_outputs_and_store(
        tmp_path, monkeypatch):
    # the worker dies with its files' payloads and temp outputs written; its retry writes
    # them again and the first attempt's temp outputs are gone
    monkeypatch.setattr(apply, "ENGINE_TASK_BYTES", 64 * 1024)
    run_with_one_ray_task_killed(tmp_path, monkeypatch, "engine:apply_files")
    assert_same_lake(tmp_path / "local", tmp_path / "ray")
    assert not [p for p in (tmp_path / "ray" / "out").rglob(".ctxlake-*.tmp")]


def _processes_under(folder: Path) -> list[str]:
    """Command lines of the running processes that name ``folder`` (a Ray instance's) in
    their command line or their environment (Ray's agents retitle themselves, e.g.
    ``ray::DashboardAgent``, but keep the ``RAY_TMPDIR`` they were started with); zombies
    (ended, not yet reaped) left out."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().split(b"\0")
            state = (proc / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and (str(folder) in cmdline
                              or f"RAY_TMPDIR={folder}".encode() in environ):
            found.append(cmdline)
    return found


def test_a_command_that_starts_its_own_ray_instance_runs_on_it_and_stops_it_at_exit(tmp_path):
    import tempfile

    invoke_local("--lake", str(tmp_path / "lake"), "run", str(REAL), "--tz", "UTC")
    local = json.loads(invoke_local("--lake", str(tmp_path / "lake"), "replay", "--policy",
                                    "microcompact", "--json"))
    # a short folder of its own for the instance (Ray's socket paths must stay short), so
    # its processes can be told from any other instance on the box
    ray_tmp = Path(tempfile.mkdtemp(prefix="ctxr", dir="/tmp"))
    try:
        other = json.loads(invoke_local(
            "--lake", str(tmp_path / "lake"), "--engine", "ray", "replay", "--policy",
            "microcompact", "--json", env={"RAY_TMPDIR": str(ray_tmp)}))
        # it did start an instance there (ray.init in the start thread), and none of its
        # processes outlived the command
        sessions = list(ray_tmp.glob("ray/session_2*"))
        assert sessions
        # a batch instance: no autoscaler monitor, log monitor or dashboard API server
        # (each would have left its log there)
        logs = {path.name for path in sessions[0].glob("logs/*")}
        assert "raylet.out" in logs
        assert logs & {"monitor.log", "monitor.out", "log_monitor.log", "dashboard.log"} == set()
        for _ in range(100):          # workers notice their raylet's end within moments
            if not _processes_under(ray_tmp):
                break
            time.sleep(0.1)
        assert _processes_under(ray_tmp) == []
    finally:
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)
    assert other == local


def test_a_command_joining_a_running_instance_disconnects_at_exit_and_leaves_it_running(tmp_path):
    invoke_local("--lake", str(tmp_path / "lake"), "run", str(REAL), "--tz", "UTC")
    local = json.loads(invoke_local("--lake", str(tmp_path / "lake"), "replay", "--policy",
                                    "microcompact", "--json"))
    # this module's instance, joined by its address as a cluster is
    address = ray.get_runtime_context().gcs_address
    joined = json.loads(invoke_local("--lake", str(tmp_path / "lake"), "--engine", "ray",
                                     "--ray-address", address, "replay", "--policy",
                                     "microcompact", "--json"))
    assert joined == local
    # the command's driver is gone from the instance, which still runs tasks
    assert ray.get(ray.remote(lambda: "up").remote(), timeout=60) == "up"
    jobs = ray._private.state.state.job_table()
    assert len(jobs) >= 2       # this process's and the command's
    own = ray.get_runtime_context().get_job_id()
    assert [job["JobID"] for job in jobs if not job["IsDead"] and job["JobID"] != own] == []
