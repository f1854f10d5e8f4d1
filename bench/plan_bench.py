"""Plan bench: every policy over the ~500 MB demo lake, in one ``plan_many`` pass.

Target (issue 4): planning all policies for the 500 MB demo lake <= 20 s on this box (2 cores).

The archive is ``pipeline.demo.archive.write_demo_archive(size_bytes, seed)``; archive and lake are
cached under ``--workdir`` (built once; ``--rebuild`` starts over; neither is timed). Measured:

- ``plan_s``: ``plan_many(lake, policies=ALL)`` as the CLI runs it (session listing, batched
  loading through DuckDB, path/memory classification, every policy, sorted Parquet writes),
  with the default process pool (up to 2 workers);
- a single-process breakdown (``--breakdown``): loading the sessions vs running each policy.

Usage: ``.venv/bin/python bench/plan_bench.py [--size-mb 500] [--workdir DIR] [--breakdown]``.
Prints the figures and writes ``bench/results/plan.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    RESULTS, cached_lake, folder_bytes, machine_info, target_verdict, timed, write_result,
)
from pipeline.core.config import Config  # noqa: E402
from pipeline.core.lake import Lake  # noqa: E402
from pipeline.stages.plan import plan_many, plan_session_input  # noqa: E402
from pipeline.stages.session_engine import (  # noqa: E402
    CHUNK_BYTES, _batches, list_sessions, load_sessions, memory_classifier, session_inputs,
)

TARGET_S = 20.0
ALL_POLICIES = ["none", "microcompact", "payload_prune", "context_editing",
                "observation_masking", "strategic", "tail_protect+microcompact",
                "payload_prune+microcompact"]


def breakdown(lake: Lake, config: Config) -> dict:
    """Single process: time to load every session vs time of each policy over them."""
    resolved = [config.resolve(p) for p in ALL_POLICIES]
    rows = [r for r in list_sessions(lake, config) if r.ignored_by is None]
    per_policy = {p.name: 0.0 for p in resolved}
    started = time.perf_counter()
    loaded = load_sessions(lake, rows)
    load_s = time.perf_counter() - started
    classifier = memory_classifier(config)
    inputs_s = view_s = 0.0
    for chunk in _batches(rows, CHUNK_BYTES):
        started = time.perf_counter()
        inputs = session_inputs(loaded, chunk, classifier)
        inputs_s += time.perf_counter() - started
        started = time.perf_counter()
        for session in inputs:
            session.view()
        view_s += time.perf_counter() - started
        for policy in resolved:
            started = time.perf_counter()
            for session in inputs:
                plan_session_input(session, policy)
            per_policy[policy.name] += time.perf_counter() - started
    return {"load_s": round(load_s, 3), "inputs_s": round(inputs_s, 3),
            "index_s": round(view_s, 3),
            "policies_s": {k: round(v, 3) for k, v in per_policy.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ctxlake-bench-plan"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--breakdown", action="store_true",
                        help="also time loading vs each policy in one process")
    parser.add_argument("--out", type=Path, default=RESULTS / "plan.json")
    args = parser.parse_args()

    workdir = args.workdir / f"{args.size_mb}mb"
    built = cached_lake(workdir, size_mb=args.size_mb, seed=args.seed, rebuild=args.rebuild)
    lake = Lake(workdir / "lake")
    archive_bytes = folder_bytes(workdir / "archive")
    config = Config()

    plan_s, summaries = timed(lambda: plan_many(lake, policies=ALL_POLICIES, config=config,
                                                workers=args.workers))

    result = {
        "archive": built["archive"], "archive_bytes": archive_bytes, "files": built["files"],
        "ingest_s": built["ingest_s"], "policies": ALL_POLICIES,
        "sessions": summaries[0].sessions,
        "per_policy": {s.policy: {"plans": s.plans, "evictions": s.evictions,
                                  "tokens_saved": s.tokens_saved, "bytes_saved": s.bytes_saved,
                                  "preserved": s.preserved} for s in summaries},
        "plan_s": round(plan_s, 3), "target_s": TARGET_S, "target_met": plan_s <= TARGET_S,
        "mb_per_s": round(archive_bytes / 1e6 / plan_s, 1),
        "machine": machine_info(),
    }
    print(f"archive: {built['archive']}, {archive_bytes / 1e6:,.0f} MB, {built['files']:,} files, "
          f"{result['sessions']:,} sessions planned (ingest {built['ingest_s']:.1f}s, not timed)")
    for s in summaries:
        print(f"  {s.policy:28s} plans {s.plans:7,d}  evictions {s.evictions:7,d}  tokens saved "
              f"{s.tokens_saved:12,d}  preserved {s.preserved:5,d}")
    print(f"plan_many({len(ALL_POLICIES)} policies)  {plan_s:7.3f} s  ({result['mb_per_s']} MB/s) "
          f"{target_verdict(plan_s, TARGET_S)}")
    if args.breakdown:
        result["breakdown_single_process"] = breakdown(lake, config)
        b = result["breakdown_single_process"]
        print(f"single process: load {b['load_s']:.2f}s, lists+paths {b['inputs_s']:.2f}s, "
              f"index {b['index_s']:.2f}s, " + ", ".join(
            f"{k} {v:.2f}s" for k, v in b["policies_s"].items()))
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
