"""Apply bench: write the pruned mirrors of ``payload_prune`` and ``microcompact`` for the
~500 MB demo archive, every removed byte stored first.

Target (issue 5): apply of ``payload_prune`` + ``microcompact`` on the 500 MB demo archive
<= 30 s on this box (2 cores). Both policies are applied one after the other into an empty
outputs folder and an empty store (cold: nothing to reuse), and the sum is the figure held
against the target. The chain ``payload_prune+microcompact`` is timed as well, and a second
run of ``payload_prune`` (no-op: every output and payload already in place), and ``verify``
over everything written.

The archive is ``pipeline.demo.archive.write_demo_archive(size_bytes, seed)``; archive, lake and plans
are cached under ``--workdir`` (built once; ``--rebuild`` starts over; not timed).

Usage: ``.venv/bin/python bench/apply_bench.py [--size-mb 500] [--workdir DIR]``.
Prints the figures (bytes before/after per policy, store size) and writes
``bench/results/apply.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    RESULTS, cached_lake, folder_usage, machine_info, target_verdict, timed, write_result,
)
from pipeline.stages.apply import apply_policy  # noqa: E402
from pipeline.core.config import Config  # noqa: E402
from pipeline.core.lake import Lake  # noqa: E402
from pipeline.stages.plan import plan_many  # noqa: E402
from pipeline.stages.restore import verify  # noqa: E402

TARGET_S = 30.0
TIMED = ["payload_prune", "microcompact"]
CHAIN = "payload_prune+microcompact"


def plan_timed_policies(lake_dir: Path) -> dict:
    """Setup after the ingest (not timed): the plans apply reads."""
    plan_s, plans = timed(lambda: plan_many(Lake(lake_dir), policies=TIMED + [CHAIN],
                                            config=Config()))
    return {"plan_s": round(plan_s, 2), "evictions": {p.policy: p.evictions for p in plans}}


def run(lake: Lake, policy: str, out: Path) -> dict:
    seconds, summary = timed(lambda: apply_policy(lake, policy=policy, out=out))
    return {"seconds": round(seconds, 3), "files": summary.files,
            "files_pruned": summary.files_pruned, "files_written": summary.files_written,
            "files_up_to_date": summary.files_up_to_date, "evictions": summary.evictions,
            "values_replaced": summary.values_replaced, "bytes_before": summary.bytes_before,
            "bytes_after": summary.bytes_after, "payloads_stored": summary.payloads_stored,
            "payloads_reused": summary.payloads_reused,
            "store_bytes_added": summary.store_bytes_added, "problems": len(summary.problems)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ctxlake-bench-apply"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "apply.json")
    args = parser.parse_args()

    workdir = args.workdir / f"{args.size_mb}mb"
    built = cached_lake(workdir, size_mb=args.size_mb, seed=args.seed, rebuild=args.rebuild,
                        after_ingest=plan_timed_policies)
    lake = Lake(workdir / "lake")
    out = workdir / "out"
    for stale in (out, lake.store_dir):
        if stale.exists():
            shutil.rmtree(stale)

    load_at_start = os.getloadavg()
    runs = {}
    for policy in TIMED:
        runs[policy] = run(lake, policy, out)
    timed_s = sum(runs[p]["seconds"] for p in TIMED)
    store_after_timed = folder_usage(lake.store_dir)
    runs[CHAIN] = run(lake, CHAIN, out)
    rerun = run(lake, "payload_prune", out)
    verify_s, report = timed(lambda: verify(lake, out=out))
    store_bytes, store_files = folder_usage(lake.store_dir)

    result = {
        "archive": built["archive"], "files": built["files"],
        "not_timed": {k: built[k] for k in ("build_s", "ingest_s", "plan_s")},
        "evictions_planned": built["evictions"],
        "runs": runs, "timed_policies": TIMED, "timed_s": round(timed_s, 3),
        "target_s": TARGET_S, "target_met": timed_s <= TARGET_S,
        "store_after_timed": {"bytes": store_after_timed[0], "files": store_after_timed[1]},
        "store_total": {"bytes": store_bytes, "files": store_files},
        "rerun_no_op": rerun,
        "verify": {"seconds": round(verify_s, 3), "ok": report.ok, "outputs": report.outputs,
                   "payloads": report.payloads, "locators": report.locators,
                   "problems": len(report.problems)},
        # other jobs on the box slow every figure: the 1/5/15-minute load averages
        "machine": machine_info(load_avg_at_start=[round(x, 2) for x in load_at_start]),
    }
    print(f"load average at start: {load_at_start[0]:.1f} (2 cores; figures scale with it)")
    print(f"archive: {built['archive']}, {built['files']:,} files (build {built['build_s']}s, "
          f"ingest {built['ingest_s']}s, plan {built['plan_s']}s: not timed)")
    for policy, r in runs.items():
        saved = r["bytes_before"] - r["bytes_after"]
        print(f"  apply {policy:28s} {r['seconds']:7.2f} s  files {r['files']:,} "
              f"({r['files_pruned']:,} pruned)  values {r['values_replaced']:,}  bytes "
              f"{r['bytes_before']:,} -> {r['bytes_after']:,} (-{saved / max(1, r['bytes_before']):.1%})"
              f"  store +{r['store_bytes_added']:,} B in {r['payloads_stored']:,} files"
              f"  problems {r['problems']}")
    print(f"store after {' + '.join(TIMED)}: {store_after_timed[0]:,} bytes in "
          f"{store_after_timed[1]:,} files; after the chain too: {store_bytes:,} bytes in "
          f"{store_files:,} files")
    print(f"re-apply payload_prune (no-op): {rerun['seconds']:.2f} s, "
          f"{rerun['files_written']} files written, {rerun['payloads_stored']} payloads stored")
    print(f"verify: {verify_s:.2f} s, {report.outputs:,} outputs, {report.payloads:,} payloads, "
          f"ok={report.ok}")
    print(f"apply {' + '.join(TIMED)}: {timed_s:.2f} s, {target_verdict(timed_s, TARGET_S)}")
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
