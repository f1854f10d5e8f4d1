"""Correlation bench: ``correlate()`` plus a full ``tool_links`` materialisation on a ~500 MB lake.

Target (issue 3): correlation over the 500 MB demo lake <= 10 s on this box (2 cores).

The archive is ``pipeline.demo.archive.write_demo_archive`` when that module exists; otherwise many
copies of the real samples (../shared/data/real) with rewritten session ids and file names, so
every copy is a distinct session. The archive and lake are cached under ``--workdir`` (built
once; ``--rebuild`` starts over). Measured:

- ``correlate_s``: ``correlate(lake)`` (path extraction + classification in Python, the
  ``tool_paths`` write, and the status summary over ``tool_links``);
- ``tool_links_s``: materialising every ``tool_links`` row (``COPY ... TO parquet``), which
  runs the pairing, path lists and the later-reference ASOF join;
- ``total_s`` = both, compared with the 10 s target.

Usage: ``.venv/bin/python bench/correlate_bench.py [--size-mb 500] [--workdir DIR]``.
Prints the figures and writes ``bench/results/correlate.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    REPO, RESULTS, cached_lake, folder_bytes, machine_info, target_verdict, timed, write_demo,
    write_result,
)
from pipeline.stages.correlate import correlate  # noqa: E402
from pipeline.core.lake import Lake  # noqa: E402
from pipeline.text.memory import MemoryRoots  # noqa: E402

REAL = REPO.parent / "shared" / "data" / "real"
TARGET_S = 10.0
_SESSION_ID = re.compile(rb'"(?:sessionId|session_id)"\s*:\s*"([^"]+)"'
                         rb'|"type"\s*:\s*"session_meta"\s*,\s*"payload"\s*:\s*\{\s*"id"\s*:\s*"([^"]+)"')


def _sample_files() -> list[Path]:
    return sorted(p for p in REAL.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))


def build_copies_archive(out: Path, size_bytes: int) -> str:
    """Copies of the real samples, each with its own session ids and file names."""
    samples = [(p, p.read_bytes()) for p in _sample_files()]
    per_copy = sum(len(data) for _, data in samples)
    copies = max(1, -(-size_bytes // per_copy))
    for number in range(copies):
        folder = out / f"copy{number:05d}"
        for path, data in samples:
            ids = {m.group(1) or m.group(2) for m in _SESSION_ID.finditer(data)}
            for old in sorted(ids, key=len, reverse=True):
                data = data.replace(old, old + f"-c{number:05d}".encode())
            target = folder / path.parent.name / f"c{number:05d}_{path.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return f"{copies} copies of the {len(samples)} real samples"


def build_archive(out: Path, size_bytes: int, seed: int) -> str:
    if importlib.util.find_spec("pipeline.demo.archive") is None:
        return build_copies_archive(out, size_bytes)
    return write_demo(out, size_bytes, seed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ctxlake-bench-correlate"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--copies", action="store_true",
                        help="use copies of the real samples even when pipeline.demo.archive exists")
    parser.add_argument("--out", type=Path, default=None,
                        help="default bench/results/correlate.json (correlate-copies.json "
                             "with --copies)")
    args = parser.parse_args()
    if args.out is None:
        name = "correlate-copies.json" if args.copies else "correlate.json"
        args.out = RESULTS / name

    workdir = args.workdir / f"{args.size_mb}mb{'-copies' if args.copies else ''}"
    write_archive = (lambda out, size, _seed: build_copies_archive(out, size)) if args.copies \
        else build_archive
    built = cached_lake(workdir, size_mb=args.size_mb, seed=args.seed, rebuild=args.rebuild,
                        write_archive=write_archive)
    archive_bytes = folder_bytes(workdir / "archive")
    lake = Lake(workdir / "lake")

    correlate_s, summary = timed(lambda: correlate(lake, roots=MemoryRoots()))

    con = lake.connect()
    try:
        target = workdir / "tool_links.parquet"
        tool_links_s, _ = timed(lambda: con.execute(
            f"COPY (SELECT * FROM tool_links) TO '{target}' (FORMAT parquet)"))
        links, with_later = con.execute(
            f"SELECT count(*), count(later_ref_seq) FROM read_parquet('{target}')").fetchall()[0]
        sessions = con.execute("SELECT count(*) FROM sessions").fetchall()[0][0]
    finally:
        con.close()
    total_s = correlate_s + tool_links_s

    result = {
        "archive": built["archive"],
        "archive_bytes": archive_bytes,
        "files": built["files"],
        "sessions": sessions,
        "tool_calls": summary.calls,
        "calls_parsed": summary.calls_parsed,
        "paths": summary.paths,
        "paths_by_class": summary.by_class,
        "tool_links": links,
        "links_with_later_ref": with_later,
        "statuses": summary.statuses,
        "correlate_s": round(correlate_s, 3),
        "tool_links_s": round(tool_links_s, 3),
        "total_s": round(total_s, 3),
        "target_s": TARGET_S,
        "target_met": total_s <= TARGET_S,
        "calls_per_s": round(summary.calls / correlate_s) if correlate_s else None,
        "ingest_s": built["ingest_s"],
        "machine": machine_info(),
    }
    print(f"archive: {result['archive']}, {archive_bytes / 1e6:,.0f} MB, {built['files']:,} files, "
          f"{sessions:,} sessions (ingest {built['ingest_s']:.1f}s, not timed here)")
    print(f"tool calls {summary.calls:,} (parsed in Python {summary.calls_parsed:,}), paths "
          f"{summary.paths:,} {summary.by_class}")
    print(f"tool_links rows {links:,}: {summary.statuses}; with a later reference {with_later:,}")
    print(f"correlate()            {correlate_s:7.3f} s  ({result['calls_per_s']:,} calls/s)")
    print(f"tool_links to parquet  {tool_links_s:7.3f} s")
    print(f"total                  {total_s:7.3f} s  {target_verdict(total_s, TARGET_S)}")
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
