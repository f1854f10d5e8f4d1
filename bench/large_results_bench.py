"""Nightly job on a Claude-only archive with many large tool results (bench/large_results_archive.py).

Each figure is a whole ``ctxlake run`` process (imports included) with the peak memory of its
process tree (``bench.common.run_measured``): cold on a fresh lake, nothing new, then one more
session written into the archive and the run after it. Then every pruned transcript under
``<lake>/out/<policy>/`` is restored with ``ctxlake restore`` and compared (sha256) with its
source, and ``ctxlake verify --json`` runs. ``--digest FILE`` writes the sha256 of every file
under the lake's ``out/``, ``summaries/`` and ``store/`` (to compare two builds of the code).

Targets: exit 0, nothing quarantined or held back, peak PSS <= 1.5 GB, every restore identical,
verify ok. Usage: ``.venv/bin/python bench/large_results_bench.py [--size 300MB] [--seed 7]
[--quick] [--work DIR] [--digest FILE] [--keep]``. Writes ``bench/results/large_results.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import RESULTS, folder_usage, machine_info, run_measured, write_result  # noqa: E402
from bench.large_results_archive import add_session, write_archive  # noqa: E402
from pipeline.demo.archive import parse_size  # noqa: E402

CTXLAKE = [sys.executable, "-m", "pipeline.cli"]
TARGET_PEAK_MB = 1536.0
ENV = {**os.environ, "PYTHONHASHSEED": "0"}


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _run(lake: Path, archive: Path) -> dict:
    a = run_measured([*CTXLAKE, "--lake", str(lake), "run", str(archive), "--tz", "UTC", "--json"], env=ENV)
    ing = a["ingest"]
    return {"wall_s": a["wall_s"], "cpu_s": a["cpu_s"], "exit_code": a["exit_code"], "status": a["status"],
            "peak_pss_tree_mb": a["peak_pss_tree_mb"], "peak_rss_tree_mb": a["peak_rss_tree_mb"],
            "peak_rss_max_process_mb": a["peak_rss_max_process_mb"],
            "ingest": {k: ing[k] for k in ("files_new", "files_appended", "files_unchanged", "lines",
                                           "records", "quarantined", "held_back", "seconds")},
            "touched": a["touched_sessions"],
            "stages": {s["stage"]: [s["done"], s["seconds"]] for s in a["stages"]},
            "applied": {k: {x: v[x] for x in ("files_written", "bytes_before", "bytes_after",
                                               "payloads_stored", "payloads_reused", "store_bytes_added")}
                        for k, v in a["applied"].items()}}


def restore_check(lake: Path, archive: Path) -> dict:
    """Restore every pruned transcript with ``ctxlake restore`` and compare it with its source."""
    checked, different, missing = 0, [], []
    scratch = lake.parent / "restored.tmp"
    for policy in sorted(p for p in (lake / "out").iterdir() if p.is_dir()):
        for pruned in sorted(policy.rglob("*.jsonl")):
            rel = pruned.relative_to(policy)
            source = archive / rel
            if not source.exists():
                missing.append(str(rel))
                continue
            subprocess.run([*CTXLAKE, "--lake", str(lake), "restore", str(pruned), "--out", str(scratch), "-q"],
                           check=True, env=ENV)
            checked += 1
            if _sha(scratch) != _sha(source):
                different.append(str(rel))
            scratch.unlink()
    return {"restored": checked, "different": different, "missing_source": missing}


def digest(lake: Path) -> dict:
    """sha256 of every file under out/, summaries/ and store/ (relative paths)."""
    out = {}
    for top in ("out", "summaries", "store"):
        for path in sorted((lake / top).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(lake))] = _sha(path)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="300MB")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="a 30 MB archive")
    parser.add_argument("--work", default=str(Path(os.environ.get("TMPDIR", "/tmp")) / "ctxlake-large-results"))
    parser.add_argument("--digest", type=Path, default=None, help="write the lake's file digests here")
    parser.add_argument("--keep", action="store_true", help="keep the lake (the archive is always kept)")
    args = parser.parse_args()
    size = parse_size("30MB" if args.quick else args.size)
    work = Path(args.work)
    archive = work / f"archive-{size}-{args.seed}"
    marker = archive / ".bench-complete"
    if not marker.exists():
        shutil.rmtree(archive, ignore_errors=True)
        built = write_archive(archive, size_bytes=size, seed=args.seed)
        marker.write_text(json.dumps(built))
    built = json.loads(marker.read_text())
    lake = work / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    archive_bytes, archive_files = folder_usage(archive / "projects")
    cold = _run(lake, archive)
    noop = _run(lake, archive)
    added = add_session(archive, seed=args.seed, index=built["sessions"])
    try:
        appended = _run(lake, archive)
        restore = restore_check(lake, archive)
        verify = json.loads(subprocess.run([*CTXLAKE, "--lake", str(lake), "verify", "--json"],
                                           capture_output=True, text=True, env=ENV).stdout)
        if args.digest:
            args.digest.write_text(json.dumps(digest(lake), indent=1, sort_keys=True) + "\n")
    finally:
        for path, _ in added:
            path.unlink()
        for path, _ in added:          # an emptied subagents/ folder of the added session
            for parent in (path.parent, path.parent.parent):
                if parent != archive / "projects" and parent.is_dir() and not any(parent.iterdir()):
                    parent.rmdir()
    result = {"archive_mb": round(archive_bytes / 1e6, 1), "archive_files": archive_files,
              "sessions": built["sessions"], "seed": args.seed, "cold": cold,
              "cold_mb_s": round(archive_bytes / 1e6 / cold["wall_s"], 1), "noop": noop,
              "appended": appended, "appended_mb": round(sum(n for _, n in added) / 1e6, 2),
              "restore": restore, "verify": {k: verify.get(k) for k in ("ok", "outputs", "outputs_restorable",
                                                                        "payloads", "locators", "problems")},
              "machine": machine_info()}
    if not args.keep:
        shutil.rmtree(lake, ignore_errors=True)
    checks = [
        ("exit codes", [r["exit_code"] for r in (cold, noop, appended)], all(r["exit_code"] == 0 for r in (cold, noop, appended))),
        ("quarantined / held back", [(r["ingest"]["quarantined"], r["ingest"]["held_back"]) for r in (cold, noop, appended)],
         all(r["ingest"]["quarantined"] == 0 and r["ingest"]["held_back"] == 0 for r in (cold, noop, appended))),
        ("cold", f"{cold['wall_s']:.1f} s, {result['cold_mb_s']} MB/s, peak PSS {cold['peak_pss_tree_mb']:.0f} MB",
         cold["peak_pss_tree_mb"] <= TARGET_PEAK_MB),
        ("nothing new", f"{noop['wall_s']:.2f} s, peak PSS {noop['peak_pss_tree_mb']:.0f} MB", noop["touched"] == 0),
        ("appended session", f"{appended['wall_s']:.2f} s ({result['appended_mb']} MB), peak PSS "
         f"{appended['peak_pss_tree_mb']:.0f} MB", appended["peak_pss_tree_mb"] <= TARGET_PEAK_MB),
        ("restore", f"{restore['restored']} restored, {len(restore['different'])} different",
         restore["restored"] > 0 and not restore["different"] and not restore["missing_source"]),
        ("verify", result["verify"], bool(result["verify"]["ok"])),
    ]
    result["checks"] = {name: {"figure": figure, "ok": ok} for name, figure, ok in checks}
    print(f"archive {result['archive_mb']} MB, {archive_files} files, {built['sessions']} sessions")
    for name, figure, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {name}: {figure}")
    for label, r in (("cold", cold), ("noop", noop), ("appended", appended)):
        print(f"  {label} stages: " + ", ".join(f"{k} {v[1]:.2f}s" for k, v in r["stages"].items()))
    write_result(RESULTS / ("large_results-quick.json" if args.quick else "large_results.json"), result)
    return 0 if all(ok for _, _, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
