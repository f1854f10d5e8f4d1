"""Ray engine bench: ``ctxlake run`` and ``ctxlake replay --sweep`` with ``--engine local`` vs
``--engine ray`` over the 200 MB demo, and the per-session costs behind a sweep estimate.

Target (issue "Scale out on Ray"): ``--engine ray`` within 1.5x of the local engine on this box
(what Ray costs on one machine: its start, its worker processes, moving Arrow slices).

Each figure is a whole CLI process (imports included) on a fresh copy of the lake, timed with
:func:`bench.common.run_measured`; the modes run interleaved, ``--repeat`` rounds, median kept
(the box is shared: other processes load it):

- ``local``: the default engine (forked process pools, up to 2 workers);
- ``ray-start``: ``--engine ray``, which starts a local Ray instance in the process (about 5 s
  of Ray start and shutdown per command on this box);
- ``ray-joined``: ``--engine ray --ray-address auto`` against an instance started once with
  ``ray start --head --block --num-cpus 2`` (how a cluster is used: it is up before the
  night's run; the bench ends it by its pid).

Replay runs a sweep of ``SWEEP`` (8 settings + the ``none`` baseline) and the single setting
``microcompact``; the difference gives the cost of one setting per session and per GB, used for
the extrapolation printed at the end (50 settings over 50 GB on 1, 8 and 64 workers).

``--compare-map-groups``: instead, plan (``payload_prune``) over the lake of the demo on one
Ray instance (2 CPUs, started once, not timed) two ways, each from the lake (listing and
loading the sessions included), ``--repeat`` rounds, median kept, and checks that both give the
same plan rows: the engine's tasks over session chunks (``run_session_chunks``), and Ray Data
``from_arrow(...).groupby("session_id").map_groups(..., batch_format="pyarrow")`` over one
table holding the three session tables (a ``kind`` column tells them apart; Ray Data has one
dataset per group-by, plan needs all three). Needs ``pip install 'ray[data]'`` (pandas).
Writes ``bench/results/ray_map_groups.json``.

Usage: ``.venv/bin/python bench/ray_bench.py [--size 200MB] [--seed 7] [--repeat 3]
[--workdir DIR] [--quick] [--compare-map-groups]`` (``--quick``: 40 MB, 1 round). Writes
``bench/results/ray.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import RESULTS, cached_archive, machine_info, run_measured, write_result  # noqa: E402
from pipeline.demo.archive import parse_size  # noqa: E402

CTXLAKE = [sys.executable, "-m", "pipeline.cli"]
RAY = str(Path(sys.executable).with_name("ray"))
TARGET_RATIO = 1.5
SWEEP = [f"observation_masking(window={w})" for w in (2, 3, 5, 8, 10, 15, 20, 30)]
MODES = {"local": ["--engine", "local"], "ray-start": ["--engine", "ray"],
         "ray-joined": ["--engine", "ray", "--ray-address", "auto"]}
ESTIMATE_GB, ESTIMATE_SETTINGS, ESTIMATE_WORKERS = 50, 50, (1, 8, 64)


def _measure(args: list[str]) -> dict:
    main = "from pipeline.cli import main; main()"
    return run_measured([sys.executable, "-c", main, *args],
                        env={**os.environ, "PYTHONHASHSEED": "0", "RAY_USAGE_STATS_ENABLED": "0"})


def _round(root: Path, archive: Path, config: Path, mode: str) -> dict:
    lake = root / f"lake-{mode}"
    shutil.rmtree(lake, ignore_errors=True)
    base = ["--lake", str(lake), *MODES[mode]]
    run = _measure([*base, "run", str(archive), "--tz", "UTC", "--json"])
    sweep = _measure([*base, "replay", "--sweep", "bench", "--config", str(config), "--json"])
    single = _measure([*base, "replay", "--policy", "microcompact", "--json"])
    started = time.perf_counter()     # the process start and a lake opened: no work
    subprocess.run([sys.executable, "-c", "from pipeline.cli import main; main()", "--lake",
                    str(lake), "sql", "SELECT 1 AS one"], check=True, capture_output=True)
    startup_s = round(time.perf_counter() - started, 3)
    return {"run_s": run["wall_s"], "run_cpu_s": run["cpu_s"],
            "ingest_s": run["ingest"]["seconds"], "sessions": sweep["sessions"],
            "stages": {s["stage"]: s["seconds"] for s in run["stages"]},
            "sweep_s": sweep["wall_s"], "sweep_cpu_s": sweep["cpu_s"],
            "single_s": single["wall_s"], "single_cpu_s": single["cpu_s"],
            "startup_s": startup_s,
            "peak_rss_tree_mb": max(run["peak_rss_tree_mb"], sweep["peak_rss_tree_mb"])}


def _estimate(local: dict, size: int) -> dict:
    """50 settings over 50 GB on W workers, from the local engine's CPU seconds: ingest CPU
    per GB and one setting's replay CPU per GB both divide over the workers; the driver's
    part (listing and loading sessions through DuckDB, writing the files; the single-setting
    replay's wall time minus the process start and one setting's CPU) stays serial."""
    gb = size / 1e9
    scale = ESTIMATE_GB / gb
    ingest_cpu = local["ingest_s"] * 2          # both cores busy during ingest
    per_setting_cpu = max(local["sweep_cpu_s"] - local["single_cpu_s"], 0.0) / (len(SWEEP) - 1)
    driver = max(local["single_s"] - local["startup_s"] - per_setting_cpu / 2, 0.0)
    out = {"per_setting_cpu_s_per_gb": round(per_setting_cpu / gb, 2),
           "per_setting_cpu_ms_per_session": round(1000 * per_setting_cpu / local["sessions"], 2),
           "ingest_cpu_s_per_gb": round(ingest_cpu / gb, 2),
           "driver_s_per_gb": round(driver / gb, 2)}
    for workers in ESTIMATE_WORKERS:
        seconds = (ingest_cpu * scale + per_setting_cpu * scale * ESTIMATE_SETTINGS) / workers \
            + driver * scale
        out[f"sweep_{ESTIMATE_SETTINGS}x{ESTIMATE_GB}gb_{workers}_workers_min"] = round(seconds / 60, 1)
    return out


COMPARE_POLICY = "payload_prune"


def _plan_rows_sorted(table) -> list:
    return sorted(repr(row) for row in table.sort_by([("session_id", "ascending")]).to_pylist())


def _plan_with_tasks(lake, config, engine):
    """The engine's way: session chunks as Ray tasks (what ``--engine ray plan`` runs)."""
    import functools

    import pyarrow as pa

    from pipeline.stages.plan import _plan_chunk
    from pipeline.stages.session_engine import run_session_chunks

    resolved = [config.resolve(COMPARE_POLICY)]
    run = run_session_chunks(lake, config, functools.partial(_plan_chunk, policies=resolved),
                             engine=engine)
    return pa.concat_tables([r.plans[resolved[0].name] for r in run.results])


def _plan_with_map_groups(lake, config):
    """Ray Data: the driver loads the sessions as the engine does, puts the three tables in
    one (``kind`` column; columns of the others null), groups it by session and plans each
    group in ``map_groups`` (pyarrow batches)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import ray.data

    from pipeline.stages.session_engine import (
        LoadedSessions, _slices, list_sessions, load_sessions, memory_classifier,
    )

    resolved = [config.resolve(COMPARE_POLICY)]
    rows = list_sessions(lake, config)
    loaded = load_sessions(lake, rows, config, all_sessions=True)
    wanted = {r.session_id: r for r in loaded.rows if r.ignored_by is None}
    schemas = {kind: getattr(loaded, kind).schema for kind in ("messages", "calls", "results")}
    parts = []
    for kind, schema in schemas.items():
        table = getattr(loaded, kind)
        table = table.filter(pc.is_in(table.column("session_id"),
                                      pa.array(sorted(wanted), pa.string())))
        parts.append(table.rename_columns([c if c == "session_id" else f"{kind}.{c}"
                                           for c in table.column_names])
                     .append_column("kind", pa.array([kind] * table.num_rows, pa.string())))
    combined = pa.concat_tables(parts, promote_options="default")
    read_paths = {sid: loaded.read_paths.get(sid, []) for sid in wanted}

    def plan_group(group: pa.Table) -> pa.Table:
        from pipeline.stages.plan import PLANS_SCHEMA, _plan_chunk

        sid = group.column("session_id")[0].as_py()
        tables = {}
        for kind, schema in schemas.items():
            rows_of = group.filter(pc.equal(group.column("kind"), kind))
            tables[kind] = pa.table({name: rows_of.column(name if name == "session_id"
                                                          else f"{kind}.{name}")
                                     for name in schema.names}).cast(schema) \
                .sort_by([("seq", "ascending")])
        row = wanted[sid]
        one = LoadedSessions([row], tables["messages"], tables["calls"], tables["results"],
                             {kind: _slices(t) for kind, t in tables.items()},
                             {sid: read_paths[sid]} if read_paths[sid] else {})
        result = _plan_chunk(one, [row], memory_classifier(config), None, policies=resolved)
        return result.plans[resolved[0].name].cast(PLANS_SCHEMA)

    dataset = ray.data.from_arrow(combined).groupby("session_id").map_groups(
        plan_group, batch_format="pyarrow")
    return pa.concat_tables(ray.get(dataset.to_arrow_refs()))


def compare_map_groups(args, archive: Path, size: int) -> int:
    import ray

    from pipeline.core.config import load_config
    from pipeline.core.lake import Lake
    from pipeline.stages.engine import RayEngine

    lake_root = args.workdir / "lake-compare"
    if not (lake_root / "out").exists():
        shutil.rmtree(lake_root, ignore_errors=True)
        subprocess.run([*CTXLAKE, "--lake", str(lake_root), "run", str(archive), "--tz", "UTC",
                        "--quiet"], check=True)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        lake, config = Lake(lake_root), load_config(None)
        engine = RayEngine()
        ways = {"tasks": lambda: _plan_with_tasks(lake, config, engine),
                "map_groups": lambda: _plan_with_map_groups(lake, config)}
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        rows: dict[str, list] = {}
        for name, way in ways.items():      # one untimed round: workers started, imports done
            rows[name] = _plan_rows_sorted(way())
        same = rows["tasks"] == rows["map_groups"]
        for index in range(max(args.repeat, 1)):
            for name, way in ways.items():
                started = time.perf_counter()
                way()
                seconds[name].append(round(time.perf_counter() - started, 3))
                print(f"round {index + 1} {name:<10} {seconds[name][-1]:6.2f} s", flush=True)
    finally:
        ray.shutdown()
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    faster = min(medians, key=medians.get)
    print(f"plan ({COMPARE_POLICY}, {len(rows['tasks'])} plan rows, same rows: {same}): tasks "
          f"{medians['tasks']:.2f} s, map_groups {medians['map_groups']:.2f} s "
          f"(x{medians['map_groups'] / medians['tasks']:.2f}); faster: {faster}")
    write_result(RESULTS / "ray_map_groups.json", {
        "machine": machine_info(load_average=os.getloadavg()), "archive_bytes": size,
        "seed": args.seed, "repeat": args.repeat, "policy": COMPARE_POLICY,
        "plan_rows": len(rows["tasks"]), "same_rows": same, "seconds": seconds,
        "medians": medians, "faster": faster})
    return 0 if same else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="200MB")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ctxlake-bench-ray"))
    parser.add_argument("--quick", action="store_true", help="40 MB, one round")
    parser.add_argument("--compare-map-groups", action="store_true",
                        help="plan as Ray tasks vs Ray Data map_groups (needs ray[data])")
    args = parser.parse_args()
    size = parse_size("40MB" if args.quick else args.size)
    repeat = 1 if args.quick else args.repeat
    args.workdir.mkdir(parents=True, exist_ok=True)
    archive = cached_archive(args.workdir, size, args.seed)
    if args.compare_map_groups:
        return compare_map_groups(args, archive, size)
    config = args.workdir / "ctxlake.toml"
    config.write_text("[sweeps]\nbench = [" + ", ".join(json.dumps(s) for s in SWEEP) + "]\n")
    # the joined mode's instance: a head in the foreground (--block), ended by its pid
    head = subprocess.Popen([RAY, "start", "--head", "--block", "--num-cpus", "2",
                             "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(120):
        if subprocess.run([RAY, "status"], capture_output=True).returncode == 0:
            break
        time.sleep(0.5)
    rounds: dict[str, list[dict]] = {mode: [] for mode in MODES}
    try:
        for index in range(repeat):
            for mode in MODES:
                rounds[mode].append(_round(args.workdir, archive, config, mode))
                r = rounds[mode][-1]
                print(f"round {index + 1} {mode:<10} run {r['run_s']:6.2f} s  sweep "
                      f"{r['sweep_s']:6.2f} s  single {r['single_s']:6.2f} s", flush=True)
    finally:
        head.send_signal(signal.SIGINT)      # how --block is told to stop the instance
        try:
            head.wait(timeout=90)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
    medians = {mode: {key: round(statistics.median(r[key] for r in runs), 3)
                      for key in ("run_s", "run_cpu_s", "ingest_s", "sweep_s", "sweep_cpu_s",
                                  "single_s", "single_cpu_s", "startup_s", "sessions")}
               for mode, runs in rounds.items()}
    ratios = {mode: {"run": round(m["run_s"] / medians["local"]["run_s"], 2),
                     "sweep": round(m["sweep_s"] / medians["local"]["sweep_s"], 2)}
              for mode, m in medians.items() if mode != "local"}
    estimate = _estimate(medians["local"], size)
    for mode, ratio in ratios.items():
        for what, value in ratio.items():
            verdict = "met" if value <= TARGET_RATIO else "MISSED"
            print(f"{mode:<10} {what:<5} x{value:.2f} of local (target <= x{TARGET_RATIO}: {verdict})")
    print("estimate:", json.dumps(estimate))
    write_result(RESULTS / "ray.json", {
        "machine": machine_info(load_average=os.getloadavg()), "archive_bytes": size,
        "seed": args.seed, "repeat": repeat, "sweep": SWEEP, "rounds": rounds,
        "medians": medians, "ratios": ratios, "target_ratio": TARGET_RATIO,
        "estimate": estimate})
    return 0


if __name__ == "__main__":
    sys.exit(main())
