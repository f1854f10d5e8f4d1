"""Report bench: ``ctxlake report daily`` over the ~500 MB demo lake, warm.

Target (issue 6): a daily report over the 500 MB demo lake, warm, <= 0.5 s on this box
(2 cores). For scale, the issue quotes a popular Rust tool that re-reads the whole archive:
~1.7 s on 537 MB here. ``ctxlake report estimator`` (leave-one-session-out refits) over the
same lake: <= 15 s.

Setup (cached under ``--workdir``, not timed; ``--rebuild`` starts over): the archive is
``pipeline.demo.archive.write_demo_archive(size_bytes, seed)``, ingested, then ``summarize`` runs once
(as the nightly job does), which also writes ``derived/model_prices``, then ``refresh_usage``
(the nightly usage stage: ``derived/usage_*``). "Warm" means that
state plus the OS file cache and an already-imported Python process.

Measured:
- ``report_first_s``: the first ``usage_report(period="day")`` in a fresh process state
  (connection, views, price coverage check, the report query);
- ``report_warm_s``: median of ``--repeat`` further calls (each opens its own connection,
  exactly as the CLI does), and the min/max;
- ``report_breakdown_warm_s``: the same with ``--breakdown``;
- ``cli_s``: wall time of ``ctxlake report daily --json`` as a subprocess (Python start-up,
  imports and the report), median of 3;
- ``summarize_s``: one full ``summarize`` of the lake (the nightly stage), for reference;
- ``estimator_s``: one ``estimator_report`` (loads the recorded calls, then one refit per
  held-out session of every model), in-process, cold: no token counts remembered yet, so the
  output of the models on a real tokenizer's basis (Claude, OpenAI) is counted in full;
- ``calibrate_s``: the nightly calibrate stage (counts what is new, remembers the counts,
  fits and stores ``token_calibration``);
- ``estimator_warm_s``: the estimator report again after it, as after a nightly run.

Usage: ``.venv/bin/python bench/report_bench.py [--size-mb 500] [--workdir DIR] [--repeat 7]``.
Prints the figures and writes ``bench/results/report.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    REPO, RESULTS, cached_lake, folder_bytes, machine_info, timed, write_result,
)
from pipeline.stages.calibrate import calibrate, estimator_report  # noqa: E402
from pipeline.core.lake import Lake  # noqa: E402
from pipeline.stages.summarize import summarize  # noqa: E402
from pipeline.stages.usage import refresh_usage, usage_report  # noqa: E402

TARGET_S = 0.5
ESTIMATOR_TARGET_S = 15.0
PEER_S, PEER_MB = 1.7, 537


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ctxlake-bench-report"))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()

    workdir = args.workdir / f"{args.size_mb}mb"
    built = cached_lake(workdir, size_mb=args.size_mb, seed=args.seed, rebuild=args.rebuild)
    lake = Lake(workdir / "lake")
    size = folder_bytes(workdir / "archive")

    summarize_s, summary = timed(lambda: summarize(lake, tz="UTC"))
    # the nightly usage stage: the reports then read the stored usage (issue 15)
    refresh_s, _refreshed = timed(lambda: refresh_usage(lake))

    load_before = os.getloadavg()[0]
    first_s, report = timed(lambda: usage_report(lake, period="day", tz="UTC"))
    warm = [timed(lambda: usage_report(lake, period="day", tz="UTC"))[0] for _ in range(args.repeat)]
    breakdown = [timed(lambda: usage_report(lake, period="day", tz="UTC", breakdown=True))[0]
                 for _ in range(max(3, args.repeat // 2))]
    cli = []
    env = dict(os.environ, CTXLAKE_HOME=str(lake.root))
    command = [str(REPO / ".venv" / "bin" / "ctxlake"), "report", "daily", "--tz", "UTC", "--json"]
    for _ in range(3):
        cli.append(timed(lambda: subprocess.run(command, check=True, env=env,
                                                stdout=subprocess.DEVNULL))[0])

    shutil.rmtree(lake.derived_dir / "token_counts", ignore_errors=True)   # cold, every run
    estimator_s, estimator = timed(lambda: estimator_report(lake))
    calibrate_s, _table = timed(lambda: calibrate(lake))
    estimator_warm_s, _warm = timed(lambda: estimator_report(lake))

    data = report.to_dict()
    warm_s = statistics.median(warm)
    result = {
        "archive_bytes": size, "archive_mb": round(size / 1024 / 1024, 1), "build": built,
        "days": len(data["rows"]), "api_calls": data["totals"]["api_calls"],
        "total_tokens": data["totals"]["total_tokens"], "cost_usd": data["totals"]["cost_usd"],
        "unpriced_models": data["unpriced_models"],
        "report_first_s": round(first_s, 3),
        "report_warm_s": round(warm_s, 3),
        "report_warm_min_s": round(min(warm), 3), "report_warm_max_s": round(max(warm), 3),
        "report_breakdown_warm_s": round(statistics.median(breakdown), 3),
        "cli_s": round(statistics.median(cli), 3),
        "summarize_s": round(summarize_s, 2), "refresh_usage_s": round(refresh_s, 2),
        "estimator_s": round(estimator_s, 2), "estimator_target_s": ESTIMATOR_TARGET_S,
        "estimator_within_target": estimator_s <= ESTIMATOR_TARGET_S,
        "calibrate_s": round(calibrate_s, 2), "estimator_warm_s": round(estimator_warm_s, 2),
        "estimator_calls": estimator.n_calls,
        "estimator_folds": sum(r.n_sessions for r in estimator.models
                               if r.direction == "prompt"
                               and r.evaluation == "leave-one-session-out"),
        "summarize": {k: v for k, v in summary.to_dict().items()
                      if k not in ("ignored_session_ids", "lake", "log_dir", "recovery_dir")},
        "target_s": TARGET_S, "within_target": warm_s <= TARGET_S,
        "peer_s_per_mb": round(PEER_S / PEER_MB, 5),
        "warm_s_per_mb": round(warm_s / (size / 1024 / 1024), 5),
        "speedup_vs_peer_scaled": round((PEER_S / PEER_MB) * (size / 1024 / 1024) / warm_s, 1),
        # other work on the box inflates every figure: the 1-minute load average
        "machine": machine_info(load_avg_1m=[round(load_before, 2), round(os.getloadavg()[0], 2)]),
    }
    print(f"demo archive: {result['archive_mb']} MB, {result['days']} days, "
          f"{result['api_calls']:,} API calls, {result['total_tokens']:,} tokens, "
          f"${result['cost_usd']:,.2f}")
    print(f"daily report: first {first_s:.3f} s, warm median {warm_s:.3f} s "
          f"(min {min(warm):.3f}, max {max(warm):.3f}; target <= {TARGET_S} s: "
          f"{'OK' if result['within_target'] else 'MISSED'})")
    print(f"  (1-minute load average during the runs: {load_before:.1f} -> {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores)")
    print(f"  with --breakdown: {result['report_breakdown_warm_s']:.3f} s; "
          f"CLI process (start-up included): {result['cli_s']:.3f} s")
    print(f"  peer (re-reads the archive): {PEER_S} s on {PEER_MB} MB -> "
          f"{result['speedup_vs_peer_scaled']}x faster per MB")
    print(f"summarize (nightly stage, full): {summarize_s:.2f} s "
          f"({summary.days_written + summary.days_unchanged} days, "
          f"{summary.recovery_written + summary.recovery_unchanged} recovery documents)")
    print(f"estimator report: {estimator_s:.2f} s for {estimator.n_calls:,} recorded calls, "
          f"{result['estimator_folds']:,} leave-one-session-out folds (target <= "
          f"{ESTIMATOR_TARGET_S:g} s: {'OK' if result['estimator_within_target'] else 'MISSED'}); "
          f"cold (no token counts remembered)")
    print(f"  calibrate stage (counts and remembers them): {calibrate_s:.2f} s; "
          f"estimator report after it: {estimator_warm_s:.2f} s")
    write_result(RESULTS / "report.json", result)


if __name__ == "__main__":
    main()
