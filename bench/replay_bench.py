"""Replay bench: 4 policies (+ the none baseline) over the demo lake at 100 MB and 500 MB.

Targets (issue 7): replaying 4 policies over the 500 MB demo lake <= 60 s on this box (2 cores),
and the time at 100 MB vs 500 MB scaling linearly or better (time ratio <= size ratio).

Each archive is ``pipeline.demo.archive.write_demo_archive(size_bytes, seed)``, ingested once and cached
under ``--workdir/<size>mb`` (``--rebuild`` starts over; neither step is timed). Measured:
``replay(lake, policies=POLICIES)`` as the CLI runs it -- session listing, loading through
DuckDB, path/memory classification, planning each policy, the turn-by-turn walk with cache and
cost arithmetic, at-risk and protected checks, the sorted Parquet writes of ``policy_eval`` and
``replay_turns`` -- with the default process pool (up to 2 workers). Best of ``--repeat`` runs.

Usage: ``.venv/bin/python bench/replay_bench.py [--sizes 100 500] [--workdir DIR] [--quick]``
(``--quick``: 20 MB and 100 MB). Prints the figures and writes ``bench/results/replay.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    RESULTS, cached_lake, folder_bytes, machine_info, target_verdict, timed, write_result,
)
from pipeline.core.config import Config  # noqa: E402
from pipeline.core.lake import Lake  # noqa: E402
from pipeline.stages.replay import replay  # noqa: E402

TARGET_S = 60.0
POLICIES = ["microcompact", "payload_prune", "context_editing", "observation_masking(window=10)"]


def measure(workdir: Path, size_mb: int, seed: int, rebuild: bool, repeat: int,
            workers: int | None) -> dict:
    folder = workdir / f"{size_mb}mb"
    built = cached_lake(folder, size_mb=size_mb, seed=seed, rebuild=rebuild)
    lake = Lake(folder / "lake")
    archive_bytes = folder_bytes(folder / "archive")
    times = []
    loads = []
    result = None
    for _ in range(repeat):
        loads.append(round(os.getloadavg()[0], 2))    # other work on the box skews timings
        seconds, result = timed(lambda: replay(lake, policies=POLICIES, config=Config(),
                                               workers=workers))
        times.append(seconds)
    best = min(times)
    summary = {row["policy"]: {k: row[k] for k in (
        "turns", "total_input_tokens", "tokens_saved_pct", "cost_usd", "cost_saved_pct",
        "cost_uncached_saved_pct", "evictions", "at_risk_evictions", "protected_violations")}
        for row in result.summary}
    turns = summary["none"]["turns"]
    return {"size_mb": size_mb, "archive": built["archive"], "archive_bytes": archive_bytes,
            "files": built["files"], "ingest_s": built["ingest_s"], "sessions": result.sessions,
            "turns": turns, "replay_s": round(best, 3), "runs_s": [round(t, 3) for t in times],
            "load_avg_1min_before_runs": loads,
            "mb_per_s": round(archive_bytes / 1e6 / best, 1), "summary": summary}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--quick", action="store_true", help="20 MB and 100 MB only")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ctxlake-bench-replay"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "replay.json")
    args = parser.parse_args()
    sizes = [20, 100] if args.quick else sorted(args.sizes)

    runs = [measure(args.workdir, size, args.seed, args.rebuild, args.repeat, args.workers)
            for size in sizes]
    for run in runs:
        print(f"{run['size_mb']:4d} MB demo lake: {run['archive_bytes'] / 1e6:,.0f} MB, "
              f"{run['files']:,} files, {run['sessions']:,} sessions, {run['turns']:,} turns "
              f"(ingest {run['ingest_s']:.1f}s, not timed)")
        print(f"     replay none + {len(POLICIES)} policies: {run['replay_s']:.2f} s "
              f"(best of runs {run['runs_s']}; 1-min load before each "
              f"{run['load_avg_1min_before_runs']}), {run['mb_per_s']} MB/s")
        for policy, row in run["summary"].items():
            cost = "-" if row["cost_saved_pct"] is None else f"{row['cost_saved_pct']:.1f}"
            print(f"       {policy:32s} saved {row['tokens_saved_pct'] or 0:6.1f}% tokens, "
                  f"cost saved {cost:>6}% (cached), evictions {row['evictions']:7,d}, "
                  f"at-risk {row['at_risk_evictions']:6,d}, violations "
                  f"{row['protected_violations']}")
    result = {"policies": ["none", *POLICIES], "runs": runs, "target_s": TARGET_S,
              "machine": machine_info()}
    largest = runs[-1]
    if largest["size_mb"] >= 500:
        result["target_met"] = largest["replay_s"] <= TARGET_S
        print(f"500 MB: {largest['replay_s']:.2f} s, "
              f"{target_verdict(largest['replay_s'], TARGET_S)}")
    if len(runs) >= 2:
        small, big = runs[0], runs[-1]
        size_ratio = big["archive_bytes"] / small["archive_bytes"]
        time_ratio = big["replay_s"] / small["replay_s"]
        result["scaling"] = {"from_mb": small["size_mb"], "to_mb": big["size_mb"],
                             "size_ratio": round(size_ratio, 2),
                             "time_ratio": round(time_ratio, 2),
                             "linear_or_better": time_ratio <= size_ratio * 1.05}
        print(f"scaling {small['size_mb']} -> {big['size_mb']} MB: size x{size_ratio:.2f}, "
              f"time x{time_ratio:.2f} ({'linear or better' if time_ratio <= size_ratio * 1.05 else 'WORSE than linear'})")
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
