"""Usage bench: a warm ``ctxlake report daily --json`` (whole process) against re-reading the
archive, its growth with the archive, and ``ctxlake --version``.

Targets (issue 15), on the demo archive (seed 7):
- a warm ``report daily --json`` on the 500 MB lake, whole process, >= 5x faster than reading
  the archive afresh: ccusage v20 ``daily --offline --json`` over the same archive when it is
  installed (``--ccusage PATH``, else ``<workdir>/ccusage`` is filled with ``npm install
  ccusage@20.0.24`` when npm is there), else a cold ingest of the same files;
- its time at 1 GB vs 200 MB <= 1.1x;
- ``ctxlake --version`` <= 0.15 s.

Setup (cached under ``--workdir``, not timed): the archive, its ingest, ``summarize`` (which
writes ``derived/model_prices``) and ``refresh_usage`` (the nightly usage stage, timed once
for reference). "Warm" means that state and the OS file cache; every timed run is a new
process. ccusage is pointed at the archive's Claude, Codex and Gemini folders
(``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``, ``HOME`` with ``.gemini`` linked to the archive's).

Also checked (not timed): ccusage's and ctxlake's daily figures, day by day, for Claude, Codex
and Gemini (``ccusage <agent> daily``).

Usage: ``.venv/bin/python bench/usage_bench.py [--sizes 200,500,1024] [--repeat 7]
[--ccusage PATH] [--workdir DIR] [--quick]``. Prints the figures and writes
``bench/results/usage.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, RESULTS, cached_lake, folder_bytes, machine_info, write_result  # noqa: E402
from pipeline.stages.usage import read_summary, refresh_usage  # noqa: E402

SPEEDUP_TARGET = 5.0
GROWTH_TARGET = 1.1
VERSION_TARGET_S = 0.15
CCUSAGE_VERSION = "20.0.24"
CTXLAKE = REPO / ".venv" / "bin" / "ctxlake"


def _after_ingest(lake_dir: Path) -> dict:
    from pipeline.core.lake import Lake
    from pipeline.stages.summarize import summarize
    from pipeline.stages.usage import refresh_usage

    lake = Lake(lake_dir)
    summarize(lake, tz="UTC")
    started = time.perf_counter()
    refreshed = refresh_usage(lake)
    return {"refresh_usage_s": round(time.perf_counter() - started, 2), "usage_rows": refreshed.rows}


def _run(command: list[str], env: dict | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _median_runs(command, env=None, repeat=7, warmup=1) -> list[float]:
    for _ in range(warmup):
        _run(command, env)
    return [_run(command, env) for _ in range(repeat)]


def _ccusage(path: str | None, workdir: Path) -> Path | None:
    if path:
        return Path(path)
    scratch = workdir / "ccusage"
    binary = scratch / "node_modules" / ".bin" / "ccusage"
    if binary.exists():
        return binary
    if shutil.which("npm") is None:
        return None
    scratch.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "install", "--silent", f"ccusage@{CCUSAGE_VERSION}"], cwd=scratch, check=True)
    return binary if binary.exists() else None


def _ccusage_env(archive: Path, home: Path) -> dict:
    home.mkdir(parents=True, exist_ok=True)
    link = home / ".gemini"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(archive / "gemini")
    return dict(os.environ, CLAUDE_CONFIG_DIR=str(archive / "claude"),
                CODEX_HOME=str(archive / "codex"), HOME=str(home))


AGENTS = {"claude": "claude_code", "codex": "codex_cli", "gemini": "gemini_cli"}


def _days_agree(ccusage: Path, env: dict, lake_dir: Path) -> dict:
    """ccusage's days against ctxlake's rows of the same format, per agent: tokens exactly,
    cost to the cent and to 1e-6. ccusage's Gemini ``outputTokens`` leaves the thinking
    tokens out (it prices them as output): compared with ctxlake's ``output_tokens -
    reasoning_tokens`` (ctxlake's output includes reasoning, as Codex's does in both)."""
    ours_out = subprocess.run([str(CTXLAKE), "--lake", str(lake_dir), "report", "daily", "--json",
                               "--tz", "UTC", "--breakdown", "format"],
                              check=True, capture_output=True, text=True).stdout
    ours: dict = {}
    for row in json.loads(ours_out)["rows"]:
        for group in row["breakdown"]:
            ours[(group["format"], row["date"])] = group
    result = {}
    for agent, fmt in AGENTS.items():
        out = subprocess.run([str(ccusage), agent, "daily", "--offline", "--json"], env=env,
                             check=True, capture_output=True, text=True).stdout
        theirs = {row.get("date") or row.get("period"): row for row in json.loads(out)["daily"]}
        tokens_equal = cents_equal = micros_equal = 0
        differing = []
        for day, row in sorted(theirs.items()):
            mine = ours.get((fmt, day))
            if mine is None:
                differing.append(day)
                continue
            output = mine["output_tokens"] - (mine["reasoning_tokens"] if agent == "gemini" else 0)
            if (row["inputTokens"], row["outputTokens"], row["cacheCreationTokens"], row["cacheReadTokens"]) == \
                    (mine["input_tokens"], output, mine["cache_write_tokens"], mine["cache_read_tokens"]):
                tokens_equal += 1
            cost = row.get("totalCost", row.get("costUSD"))
            if mine["cost_usd"] is not None and round(cost, 2) == round(mine["cost_usd"], 2):
                cents_equal += 1
            else:
                differing.append(day)
            if mine["cost_usd"] is not None and abs(round(cost, 6) - mine["cost_usd"]) < 1e-9:
                micros_equal += 1
        extra = sorted(d for (f, d) in ours if f == fmt and d not in theirs)
        result[agent] = {"days": len(theirs), "tokens_equal": tokens_equal, "cost_equal_to_the_cent": cents_equal,
                         "cost_equal_to_1e-6": micros_equal, "cost_differs_on": differing,
                         "days_only_in_ctxlake": extra}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,500,1024", help="demo sizes in MB; 500 is the reference")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--ccusage", default=None, help="a ccusage v20 binary (default: npm install)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ctxlake-bench-usage"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--quick", action="store_true", help="20 and 100 MB only")
    args = parser.parse_args()
    sizes = [20, 100] if args.quick else [int(s) for s in args.sizes.split(",")]
    reference = 500 if 500 in sizes else sizes[len(sizes) // 2]

    # a pip-installed ctxlake has its bytecode compiled; an editable install under
    # PYTHONDONTWRITEBYTECODE=1 would recompile pipeline/*.py in every timed process
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "pipeline")], check=True,
                   stdout=subprocess.DEVNULL)
    version = _median_runs([str(CTXLAKE), "--version"], repeat=args.repeat)
    result: dict = {"version_s": round(statistics.median(version), 3),
                    "version_target_s": VERSION_TARGET_S,
                    "version_within_target": statistics.median(version) <= VERSION_TARGET_S,
                    "sizes": {}}
    ccusage = _ccusage(args.ccusage, args.workdir)
    lakes = {}
    for size in sizes:
        workdir = args.workdir / f"{size}mb"
        built = cached_lake(workdir, size_mb=size, seed=args.seed, rebuild=args.rebuild,
                            after_ingest=_after_ingest)
        if read_summary(workdir / "lake") is None:   # built before the summary existed
            from pipeline.core.lake import Lake
            refresh_usage(Lake(workdir / "lake"))
        lakes[size] = (workdir / "lake", workdir / "archive", built)
    # the timed runs alternate between the sizes (and ccusage), so that other work on the box
    # weighs on each of them alike
    commands = {size: [str(CTXLAKE), "--lake", str(lake_dir), "report", "daily", "--json", "--tz", "UTC"]
                for size, (lake_dir, _archive, _built) in lakes.items()}
    env = _ccusage_env(lakes[reference][1], args.workdir / "ccusage-home") if ccusage else None
    peer = [str(ccusage), "daily", "--offline", "--json"] if ccusage else None
    for command in commands.values():
        _run(command)
    if peer:
        _run(peer, env)
    times: dict = {size: [] for size in sizes}
    peer_times: list[float] = []
    load_before = os.getloadavg()[0]
    for _ in range(args.repeat):
        for size in sizes:
            times[size].append(_run(commands[size]))
        if peer:
            peer_times.append(_run(peer, env))
    load_after = os.getloadavg()[0]
    for size in sizes:
        lake_dir, archive, built = lakes[size]
        daily = times[size]
        entry = {"archive_mb": round(folder_bytes(archive) / 1024 / 1024, 1), "build": built,
                 "daily_s": round(statistics.median(daily), 3),
                 "daily_min_s": round(min(daily), 3), "daily_max_s": round(max(daily), 3),
                 "cold_ingest_s": built["ingest_s"],
                 "load_avg_1m": [round(load_before, 2), round(load_after, 2)]}
        if peer and size == reference:
            entry["ccusage_s"] = round(statistics.median(peer_times), 3)
            entry["ccusage_min_s"] = round(min(peer_times), 3)
            entry["ccusage_max_s"] = round(max(peer_times), 3)
            entry["days_vs_ccusage"] = _days_agree(ccusage, env, lake_dir)
        result["sizes"][str(size)] = entry
        print(f"{size} MB: report daily --json {entry['daily_s']:.3f} s (min {entry['daily_min_s']:.3f}, "
              f"max {entry['daily_max_s']:.3f}); cold ingest {entry['cold_ingest_s']} s; "
              f"refresh_usage {built['refresh_usage_s']} s for {built['usage_rows']:,} call rows"
              + (f"; ccusage daily --offline --json {entry['ccusage_s']:.3f} s" if "ccusage_s" in entry else ""))
    print(f"(1-minute load average {load_before:.1f} -> {load_after:.1f} on {os.cpu_count()} cores)")
    ref = result["sizes"][str(reference)]
    baseline, against = (ref["ccusage_s"], f"ccusage {CCUSAGE_VERSION}") if "ccusage_s" in ref \
        else (ref["cold_ingest_s"], "a cold ingest")
    speedup = baseline / ref["daily_s"]
    if "ccusage_s" in ref:   # the fastest runs: the least disturbed by other work on the box
        result["speedup_of_fastest_runs"] = round(ref["ccusage_min_s"] / ref["daily_min_s"], 1)
    result.update(reference_mb=reference, speedup=round(speedup, 1), speedup_against=against,
                  speedup_target=SPEEDUP_TARGET, speedup_within_target=speedup >= SPEEDUP_TARGET,
                  machine=machine_info())
    small, large = str(min(sizes)), str(max(sizes))
    growth = result["sizes"][large]["daily_s"] / result["sizes"][small]["daily_s"]
    result["growth_of_fastest_runs"] = round(
        result["sizes"][large]["daily_min_s"] / result["sizes"][small]["daily_min_s"], 2)
    result.update(growth=round(growth, 2), growth_sizes=[int(small), int(large)],
                  growth_target=GROWTH_TARGET, growth_within_target=growth <= GROWTH_TARGET)
    print(f"speed-up at {reference} MB against {against}: {speedup:.1f}x (target >= {SPEEDUP_TARGET:g}x: "
          f"{'met' if speedup >= SPEEDUP_TARGET else 'MISSED'})"
          + (f"; fastest runs {result['speedup_of_fastest_runs']}x" if "speedup_of_fastest_runs" in result else ""))
    print(f"{large} MB vs {small} MB: x{growth:.2f} (target <= {GROWTH_TARGET}: "
          f"{'met' if growth <= GROWTH_TARGET else 'MISSED'}); fastest runs x{result['growth_of_fastest_runs']}")
    print(f"ctxlake --version: {result['version_s']:.3f} s (target <= {VERSION_TARGET_S} s: "
          f"{'met' if result['version_within_target'] else 'MISSED'})")
    for agent, agree in ref.get("days_vs_ccusage", {}).items():
        print(f"{agent} days vs ccusage: tokens equal on {agree['tokens_equal']}/{agree['days']}, "
              f"cost equal to the cent on {agree['cost_equal_to_the_cent']}/{agree['days']} "
              f"(to 1e-6 on {agree['cost_equal_to_1e-6']}; differs on: "
              f"{', '.join(agree['cost_differs_on']) or 'none'}; days only in ctxlake: "
              f"{', '.join(agree['days_only_in_ctxlake']) or 'none'})")
    write_result(RESULTS / "usage.json", result)


if __name__ == "__main__":
    main()
