"""Ingest bench: throughput, memory and incrementality of ``pipeline.stages.ingest.ingest``.

Measured in one run, on deterministic demo archives (``pipeline.demo.archive.write_demo_archive``,
cached under ``bench/results/archive-<size>-<seed>/``, which git ignores):

(a) cold ingest of the main archive (``--size``, default 500MB) into a fresh lake: MB/s,
    seconds, and the peak memory of the whole process tree (the ingest runs in a child
    process; its worker processes are its children). Memory is sampled from /proc every 50 ms
    as the sum of RSS (and of PSS, which counts pages shared after fork once) over the tree;
    ``wait4`` adds the kernel's exact peak RSS of the largest single process.
(b) DuckDB ``read_ndjson_objects`` over the same JSONL files (every byte parsed as JSON, no
    Parquet written): MB/s, and the ratio ingest/raw.
(c) a warm re-run on the same lake with nothing new: seconds.
(d) peak memory of cold ingests of a 200MB and a 1GB archive, and their ratio (memory must
    be bounded by a batch, not by the archive).
(e) 1000 lines appended to 4 files, then a re-run: lines ingested must equal lines appended
    (the appended bytes are removed again afterwards, so the cached archive stays intact).

Targets: cold >= 100 MB/s with Parquet written; peak memory <= 1.5 GB; peak memory of the
1GB archive within 20% of the 200MB one; warm re-run <= 2 s.

Usage: ``.venv/bin/python bench/ingest_bench.py [--size 500MB] [--seed 7] [--quick]
[--profile]``. ``--quick`` uses 20MB / 10MB / 50MB archives (a smoke run, not a
measurement). ``--profile`` adds a cProfile of a single-process ingest of the main archive
(``bench/results/ingest-profile.txt``). Prints a table and writes
``bench/results/ingest.json`` (``ingest-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402

from bench.common import run_measured  # noqa: E402
from pipeline.demo.archive import GENERATOR, MARKER, parse_size, write_demo_archive  # noqa: E402

RESULTS = REPO / "bench" / "results"
TARGET_COLD_MBPS = 100.0
TARGET_PEAK_MB = 1536.0
TARGET_RSS_GROWTH = 1.20
TARGET_WARM_S = 2.0
APPENDED_LINES = 1000
APPENDED_FILES = 4


# ---------------------------------------------------------------------------------------
# Archives (cached)
# ---------------------------------------------------------------------------------------
def size_label(size: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def archive_is_intact(folder: Path) -> bool:
    """Same generator, and the marker's manifest matches the files on disk (sizes)."""
    marker = folder / MARKER
    if not marker.exists():
        return False
    manifest = orjson.loads(marker.read_bytes())
    if manifest.get("generator") != GENERATOR:
        return False
    listed = manifest["files"]
    for item in listed:
        path = folder / item["path"]
        if not path.is_file() or path.stat().st_size != item["bytes"]:
            return False
    return True


def cached_archive(size: int, seed: int) -> tuple[Path, float | None]:
    folder = RESULTS / f"archive-{size_label(size)}-{seed}"
    if archive_is_intact(folder):
        return folder, None
    started = time.perf_counter()
    write_demo_archive(folder, size_bytes=size, seed=seed)
    return folder, time.perf_counter() - started


def archive_files(folder: Path, suffix: str | None = None) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER
                  and (suffix is None or p.name.endswith(suffix)))


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------
# Child processes with memory sampling
# ---------------------------------------------------------------------------------------
def run_child(args: list[str]) -> dict:
    """Run this script as a child; return its JSON answer plus wall time and peak memory."""
    return run_measured([sys.executable, __file__, *args])


def _cpu_self_and_children() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", required=True, choices=("ingest", "raw"))
    parser.add_argument("--archive", type=Path, required=True)
    parser.add_argument("--lake", type=Path)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    if args.child == "ingest":
        from pipeline.stages.ingest import ingest
        from pipeline.core.lake import Lake

        before = _cpu_self_and_children()
        summary = ingest([args.archive], lake=Lake(args.lake), workers=args.workers)
        answer = {k: v for k, v in summary.to_dict().items()
                  if k not in ("problems", "unrecognized", "superseded")}
        # CPU of ingest() itself and its (joined) worker processes, without interpreter start
        answer["ingest_cpu_s"] = round(_cpu_self_and_children() - before, 2)
    else:
        import duckdb

        files = [str(p) for p in archive_files(args.archive, ".jsonl")]
        con = duckdb.connect()
        started = time.perf_counter()
        rows, nbytes = con.execute(
            "SELECT count(*), sum(strlen(CAST(json AS VARCHAR))) FROM read_ndjson_objects("
            "$files, maximum_object_size = 268435456, ignore_errors = true)",
            {"files": files}).fetchone()
        answer = {"seconds": round(time.perf_counter() - started, 3), "rows": rows,
                  "json_bytes": int(nbytes or 0), "files": len(files),
                  "bytes": sum(os.path.getsize(f) for f in files)}
    print(json.dumps(answer))
    return 0


# ---------------------------------------------------------------------------------------
# Appending lines
# ---------------------------------------------------------------------------------------
def append_lines(archive: Path, marker_held: set[str]) -> tuple[list[tuple[Path, int, int]], int]:
    """Append APPENDED_LINES valid Claude records over APPENDED_FILES files.

    Returns (path, original size, original mtime_ns) per file, to undo it afterwards.
    """
    candidates = [p for p in archive_files(archive / "claude", ".jsonl")
                  if "/subagents/" not in p.as_posix() and not p.name.startswith("agent-")
                  and p.relative_to(archive).as_posix() not in marker_held]
    candidates.sort(key=lambda p: (-p.stat().st_size, p.as_posix()))
    chosen = candidates[:APPENDED_FILES]
    undo = []
    per_file = APPENDED_LINES // len(chosen)
    written = 0
    for index, path in enumerate(chosen):
        st = path.stat()
        undo.append((path, st.st_size, st.st_mtime_ns))
        data = path.read_bytes()
        last = None
        for line in reversed(data.rstrip(b"\n").split(b"\n")[-50:]):
            rec = orjson.loads(line)
            if rec.get("type") == "user" and isinstance(rec.get("message", {}).get("content"), str):
                last = rec
                break
        if last is None:
            last = {"type": "user", "sessionId": path.stem, "message": {"role": "user"}}
        count = per_file if index < len(chosen) - 1 else APPENDED_LINES - written
        lines = []
        for n in range(count):
            rec = dict(last, uuid=f"00000000-bench-0000-0000-{index:04d}{n:08d}",
                       message={"role": "user", "content": f"appended line {n} by the ingest bench"})
            lines.append(orjson.dumps(rec))
        with open(path, "ab") as handle:
            handle.write(b"\n".join(lines) + b"\n")
        written += count
    return undo, written


def undo_append(undo: list[tuple[Path, int, int]]) -> None:
    for path, size, mtime_ns in undo:
        os.truncate(path, size)
        os.utime(path, ns=(mtime_ns, mtime_ns))


# ---------------------------------------------------------------------------------------
# Profile
# ---------------------------------------------------------------------------------------
def profile_ingest(archive: Path, out: Path) -> list[tuple[str, float, float]]:
    from pipeline.stages.ingest import ingest
    from pipeline.core.lake import Lake

    with tempfile.TemporaryDirectory(prefix="ctxlake-bench-profile-") as tmp:
        profiler = cProfile.Profile(time.process_time)   # CPU time: robust to other load
        profiler.enable()
        ingest([archive], lake=Lake(Path(tmp) / "lake"), workers=1)
        profiler.disable()
    buffer = io.StringIO()
    stats = pstats.Stats(profiler, stream=buffer).sort_stats("tottime")
    stats.print_stats(40)
    stats.sort_stats("cumulative").print_stats(40)
    out.write_text(buffer.getvalue())
    top = []
    for (filename, line, name), (cc, nc, tt, ct, callers) in stats.stats.items():
        top.append((f"{Path(filename).name}:{line}:{name}", round(tt, 2), round(ct, 2)))
    top.sort(key=lambda t: -t[1])
    return top[:15]


# ---------------------------------------------------------------------------------------
# The bench
# ---------------------------------------------------------------------------------------
def mb(n: int) -> float:
    return n / 1e6


def main() -> int:
    if "--child" in sys.argv:
        return child_main(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="500MB", help="main archive size (default 500MB)")
    parser.add_argument("--pair", default="200MB,1GB", help="the two sizes compared for memory")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=None, help="ingest workers (default: all cores)")
    parser.add_argument("--quick", action="store_true", help="small archives: a smoke run")
    parser.add_argument("--profile", action="store_true", help="also cProfile a 1-process ingest")
    parser.add_argument("--out", type=Path, default=None,
                        help="default bench/results/ingest.json (ingest-quick.json with --quick)")
    args = parser.parse_args()
    if args.quick:
        args.size, args.pair = "20MB", "10MB,50MB"
    if args.out is None:
        args.out = RESULTS / ("ingest-quick.json" if args.quick else "ingest.json")
    size = parse_size(args.size)
    pair = [parse_size(s) for s in args.pair.split(",")]
    workers = ["--workers", str(args.workers)] if args.workers else []
    RESULTS.mkdir(parents=True, exist_ok=True)
    n_workers = min(args.workers or os.cpu_count() or 1, os.cpu_count() or 1)
    load_before = os.getloadavg()[0]
    if load_before > 0.5 * (os.cpu_count() or 1):
        print(f"warning: load average {load_before:.1f} on {os.cpu_count()} cores: other work "
              "competes for the CPU, wall-clock figures will be low (CPU-second figures are not)",
              flush=True)

    archive, generated_s = cached_archive(size, args.seed)
    marker = orjson.loads((archive / MARKER).read_bytes())
    archive_bytes = sum(item["bytes"] for item in marker["files"])
    jsonl_bytes = sum(p.stat().st_size for p in archive_files(archive, ".jsonl"))
    print(f"archive {archive.relative_to(REPO)}: {mb(archive_bytes):,.1f} MB, "
          f"{len(marker['files']):,} files "
          f"({'generated in %.1f s' % generated_s if generated_s else 'cached'})", flush=True)

    scratch = Path(tempfile.mkdtemp(prefix="ctxlake-bench-ingest-"))
    result: dict = {}
    try:
        lake = scratch / "lake"
        # (a) cold
        cold = run_child(["--child", "ingest", "--archive", str(archive), "--lake", str(lake), *workers])
        cold["mb_per_s"] = round(mb(archive_bytes) / cold["seconds"], 1)
        cold["mb_per_s_wall"] = round(mb(archive_bytes) / cold["wall_s"], 1)
        # CPU seconds of the whole tree: robust to other load on the box
        cold["mb_per_cpu_s"] = round(mb(archive_bytes) / cold["ingest_cpu_s"], 1)
        cold["upper_bound_mb_per_s_idle"] = round(cold["mb_per_cpu_s"] * n_workers, 1)
        cold["lake_mb"] = round(mb(folder_bytes(lake)), 1)
        print(f"(a) cold ingest: {cold['seconds']:.2f} s in ingest() ({cold['wall_s']:.2f} s wall), "
              f"{cold['mb_per_s']:.1f} MB/s, peak tree RSS {cold['peak_rss_tree_mb']:.0f} MB "
              f"(PSS {cold['peak_pss_tree_mb']:.0f} MB), lake {cold['lake_mb']:.0f} MB; "
              f"{cold['ingest_cpu_s']:.1f} CPU s in ingest() = {cold['mb_per_cpu_s']:.1f} MB per CPU s "
              f"(at most {cold['upper_bound_mb_per_s_idle']:.0f} MB/s on {n_workers} idle cores)", flush=True)
        # (b) raw DuckDB
        raw = run_child(["--child", "raw", "--archive", str(archive)])
        raw["mb_per_s"] = round(mb(raw["bytes"]) / raw["seconds"], 1)
        ratio = round(cold["mb_per_s"] / raw["mb_per_s"], 3)
        print(f"(b) raw read_ndjson_objects: {raw['seconds']:.2f} s, {raw['mb_per_s']:.1f} MB/s over "
              f"{mb(raw['bytes']):,.0f} MB of JSONL; ingest/raw = {ratio:.3f}", flush=True)
        # (c) warm
        warm = run_child(["--child", "ingest", "--archive", str(archive), "--lake", str(lake), *workers])
        print(f"(c) warm re-run: {warm['seconds']:.2f} s in ingest() ({warm['wall_s']:.2f} s wall), "
              f"{warm['files_unchanged']}/{warm['files']} files unchanged, {warm['lines']} lines", flush=True)
        # (e) appended lines
        undo, appended = append_lines(archive, set(marker.get("held_back_files", [])))
        try:
            grown = run_child(["--child", "ingest", "--archive", str(archive), "--lake", str(lake), *workers])
        finally:
            undo_append(undo)
        append_ok = grown["lines"] == appended and grown["records"] == appended \
            and grown["files_appended"] == len(undo)
        print(f"(e) appended {appended} lines to {len(undo)} files: ingested {grown['lines']} lines "
              f"({grown['records']} records, {grown['files_appended']} files appended) in "
              f"{grown['seconds']:.2f} s: {'ok' if append_ok else 'MISMATCH'}", flush=True)
        shutil.rmtree(lake)
        # (d) memory vs archive size
        pair_runs = []
        for pair_size in pair:
            folder, gen_s = cached_archive(pair_size, args.seed)
            pair_lake = scratch / f"lake-{size_label(pair_size)}"
            run = run_child(["--child", "ingest", "--archive", str(folder), "--lake", str(pair_lake), *workers])
            run["archive_mb"] = round(mb(folder_bytes(folder)), 1)
            run["mb_per_s"] = round(run["archive_mb"] / run["seconds"], 1)
            run["generated_s"] = round(gen_s, 1) if gen_s else None
            pair_runs.append(run)
            shutil.rmtree(pair_lake)
            print(f"(d) {size_label(pair_size)}: peak tree RSS {run['peak_rss_tree_mb']:.0f} MB "
                  f"(PSS {run['peak_pss_tree_mb']:.0f} MB, largest process {run['peak_rss_max_process_mb']:.0f} MB), "
                  f"{run['mb_per_s']:.1f} MB/s", flush=True)
        growth = round(pair_runs[1]["peak_rss_tree_mb"] / pair_runs[0]["peak_rss_tree_mb"], 3)
        growth_pss = round(pair_runs[1]["peak_pss_tree_mb"] / pair_runs[0]["peak_pss_tree_mb"], 3)
        peak = max([cold["peak_rss_tree_mb"]] + [r["peak_rss_tree_mb"] for r in pair_runs])
        profile_top = None
        if args.profile:
            profile_top = profile_ingest(archive, RESULTS / "ingest-profile.txt")
            print("profile (1 process, top by own time; full listing in bench/results/ingest-profile.txt):")
            for name, own, cumulative in profile_top:
                print(f"    {own:8.2f} s own {cumulative:8.2f} s cum  {name}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    targets = [
        ("cold ingest MB/s (Parquet written)", cold["mb_per_s"], f">= {TARGET_COLD_MBPS:g}",
         cold["mb_per_s"] >= TARGET_COLD_MBPS),
        ("peak memory, tree RSS MB (max of all runs)", peak, f"<= {TARGET_PEAK_MB:g}", peak <= TARGET_PEAK_MB),
        (f"peak RSS {size_label(pair[1])} / {size_label(pair[0])}", growth, f"<= {TARGET_RSS_GROWTH:g}",
         growth <= TARGET_RSS_GROWTH),
        ("warm re-run s (ingest())", warm["seconds"], f"<= {TARGET_WARM_S:g}", warm["seconds"] <= TARGET_WARM_S),
        ("appended lines ingested", grown["lines"], f"== {appended}", append_ok),
    ]
    print()
    print(f"{'figure':<44} {'value':>10}  {'target':<10} result")
    for name, value, target, ok in targets:
        print(f"{name:<44} {value:>10}  {target:<10} {'met' if ok else 'MISSED'}")
    print(f"{'ingest / raw read_ndjson_objects':<44} {ratio:>10}  {'(info)':<10}")
    print(f"{'cold wall s (incl. interpreter start)':<44} {cold['wall_s']:>10}  {'(info)':<10}")
    print(f"{'warm wall s (incl. interpreter start)':<44} {warm['wall_s']:>10}  {'(info)':<10}")
    print(f"{'peak PSS ratio (shared pages once)':<44} {growth_pss:>10}  {'(info)':<10}")
    print(f"{'cold MB per CPU second (ingest + workers)':<44} {cold['mb_per_cpu_s']:>10}  {'(info)':<10}")
    print(f"{'cold MB/s upper bound on idle cores':<44} {cold['upper_bound_mb_per_s_idle']:>10}  {'(info)':<10}")
    print(f"{'load average before / after':<44} {load_before:>5.1f} /{os.getloadavg()[0]:>3.1f}  {'(info)':<10}")

    import duckdb

    result = {
        "archive": {"path": str(archive.relative_to(REPO)), "bytes": archive_bytes,
                    "jsonl_bytes": jsonl_bytes, "files": len(marker["files"]), "seed": args.seed,
                    "generated_s": round(generated_s, 1) if generated_s else None},
        "cold": cold, "raw_duckdb": raw, "ingest_over_raw": ratio, "warm": warm,
        "append": {"appended": appended, "files": len(undo), "run": grown, "ok": append_ok},
        "memory_pair": {size_label(s): r for s, r in zip(pair, pair_runs)},
        "memory_growth_rss": growth, "memory_growth_pss": growth_pss,
        "targets": [{"figure": n, "value": v, "target": t, "met": ok} for n, v, t, ok in targets],
        "quick": args.quick,
        "load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2),
        "profile_top_own_time": profile_top,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "duckdb": duckdb.__version__, "platform": platform.platform()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
