"""Nightly job (``ctxlake run``) bench: cold, nothing new, one appended session, archive size.

Each figure is a whole ``ctxlake run`` process (imports included), timed with its peak memory
(the whole process tree), on the deterministic demo archive:

- cold: a fresh lake over the archive (``MB/s`` = archive bytes / wall time);
- nothing new: the same run again;
- one appended session: a new Claude Code session file (a copy of one of the archive's
  sessions under a new id) and the run after it; then one line appended to an existing
  session and the run after that; then one new session with ids and times of its own
  (another session's copy with every id renamed and its times a day later: it shares no
  call with the lake, as most new sessions do not) and the run after that;
- warm at two sizes: the nothing-new run on a 200 MB and a 1 GB archive (ratio), so the cost
  of a night follows the new data, not the size of the archive; best of 5 each, the two
  sizes in turn.

Targets (issue "The nightly job"): nothing new <= 3% of cold (aim 0.5 s), one appended session
<= 5% of cold, warm 1 GB / 200 MB <= 1.2x, cold >= 40 MB/s with peak memory <= 1.5 GB.

Usage: ``.venv/bin/python bench/nightly_bench.py [--quick] [--size 500MB] [--seed 7]
[--pair 200MB,1GB]``. ``--quick``: 60 MB, pair 20 MB / 100 MB. Writes
``bench/results/nightly.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import RESULTS, cached_archive, run_measured  # noqa: E402
from pipeline.demo.archive import parse_size  # noqa: E402

CTXLAKE = [sys.executable, "-m", "pipeline.cli"]
TARGET_NOOP_SHARE = 0.03
TARGET_APPEND_SHARE = 0.05
TARGET_WARM_RATIO = 1.2
TARGET_COLD_MBPS = 40.0
TARGET_PEAK_MB = 1536.0
WARM_ROUNDS = 5


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.json*") if p.is_file()) + \
        sum(p.stat().st_size for p in folder.rglob("*.traj") if p.is_file())


def _run(lake: Path, archive: Path) -> dict:
    answer = run_measured([*CTXLAKE, "--lake", str(lake), "run", str(archive), "--tz", "UTC",
                           "--json"], env={**os.environ, "PYTHONHASHSEED": "0"})
    return {"wall_s": answer["wall_s"], "cpu_s": answer["cpu_s"],
            "peak_rss_tree_mb": answer["peak_rss_tree_mb"],
            "peak_pss_tree_mb": answer["peak_pss_tree_mb"],
            "status": answer["status"], "touched": answer["touched_sessions"],
            "stages": {s["stage"]: [s["done"], s["seconds"]] for s in answer["stages"]}}


def _claude_session(archive: Path, rank: int = 0) -> Path:
    """A mid-sized top-level Claude Code session file of the archive: the median by size,
    or ``rank`` places above it."""
    files = sorted(p for p in archive.rglob("*.jsonl") if "/claude/" in str(p)
                   and "agent-" not in p.name and "/subagents/" not in str(p))
    return sorted(files, key=lambda p: p.stat().st_size)[len(files) // 2 + rank]


def _new_session(archive: Path) -> Path:
    """A copy of a mid-sized Claude Code session of the archive, under a new session id."""
    source = _claude_session(archive)
    old = source.stem
    new = str(uuid.UUID(int=int(old.replace("-", ""), 16) ^ 0xFFFF))
    target = source.with_name(f"{new}.jsonl")
    target.write_text(source.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    return target


def _fresh_session(archive: Path) -> Path:
    """Another mid-sized Claude Code session of the archive copied as a session of its own:
    a new session id, new line and message ids and request ids, every time one day later. A
    new night's session shares nothing with the lake, where :func:`_new_session`'s copy keeps
    its original's calls (the usage dedup's keys) and times (its recovery id's second)."""
    from datetime import datetime, timedelta

    source = _claude_session(archive, 1)
    old = source.stem
    new = str(uuid.UUID(int=int(old.replace("-", ""), 16) ^ 0xFFFF0000))

    def renamed(value: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{new}/{value}"))

    def fresh(value):
        if isinstance(value, list):
            return [fresh(item) for item in value]
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if key in ("uuid", "parentUuid", "requestId", "leafUuid") and isinstance(item, str):
                item = renamed(item)
            elif key == "id" and isinstance(item, str) and item.startswith("msg_"):
                item = "msg_" + renamed(item).replace("-", "")
            elif key == "timestamp" and isinstance(item, str):
                when = datetime.fromisoformat(item.replace("Z", "+00:00")) + timedelta(days=1)
                item = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            elif key == "sessionId" and item == old:
                item = new
            else:
                item = fresh(item)
            out[key] = item
        return out

    lines = [json.dumps(fresh(json.loads(line)), ensure_ascii=False)
             for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    target = source.with_name(f"{new}.jsonl")
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def _append_line(path: Path) -> None:
    last = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
    last.update(uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, str(path))), type="user",
                message={"role": "user", "content": "one more thing: update the changelog"})
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(last) + "\n")


def measure(work: Path, size: int, seed: int) -> dict:
    archive = cached_archive(work, size, seed)
    scratch = work / f"scratch-{size}-{seed}"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(archive, scratch / "archive", symlinks=True)
    archive = scratch / "archive"
    lake = scratch / "lake"
    archive_bytes = _bytes(archive)
    cold = _run(lake, archive)
    noop = [_run(lake, archive) for _ in range(3)]
    added = _new_session(archive)
    nights = {"appended_session": _run(lake, archive)}
    _append_line(added)
    nights["appended_line"] = _run(lake, archive)
    _fresh_session(archive)
    nights["fresh_session"] = _run(lake, archive)
    noop_s = min(r["wall_s"] for r in noop)
    out = {"archive_mb": round(archive_bytes / 1e6, 1), "seed": seed, "cold": cold,
           "cold_mb_s": round(archive_bytes / 1e6 / cold["wall_s"], 1),
           "noop_s": [r["wall_s"] for r in noop], "noop_share": round(noop_s / cold["wall_s"], 4)}
    for name, night in nights.items():
        out[name] = night
        out[f"{name}_share"] = round(night["wall_s"] / cold["wall_s"], 4)
    shutil.rmtree(scratch, ignore_errors=True)
    return out


def warm_pair(work: Path, sizes: tuple[int, int], seed: int, rounds: int = WARM_ROUNDS) -> list[float]:
    """The nothing-new run on each of two archives (after a first run of each), best of
    ``rounds``, the two sizes taken in turn: a shared box's load drifts over a minute, and in
    turn both sizes meet the same drift (one size's runs all together, then the other's,
    compare two moments of the box as much as two sizes)."""
    lakes = []
    for size in sizes:
        archive = cached_archive(work, size, seed)
        lake = work / f"lake-warm-{size}-{seed}"
        shutil.rmtree(lake, ignore_errors=True)
        _run(lake, archive)
        lakes.append((lake, archive))
    times: list[list[float]] = [[] for _ in sizes]
    for _ in range(rounds):
        for i, (lake, archive) in enumerate(lakes):
            times[i].append(_run(lake, archive)["wall_s"])
    for lake, _ in lakes:
        shutil.rmtree(lake, ignore_errors=True)
    return [min(t) for t in times]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size", default=None)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pair", default=None, help="two sizes for the warm ratio")
    parser.add_argument("--work", default=str(Path(os.environ.get("TMPDIR", "/tmp")) / "ctxlake-nightly-bench"))
    args = parser.parse_args()
    size = parse_size(args.size or ("60MB" if args.quick else "500MB"))
    small, large = (parse_size(s) for s in (args.pair or ("20MB,100MB" if args.quick else "200MB,1GB")).split(","))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    result = {"main": measure(work, size, args.seed)}
    warm_small, warm_large = warm_pair(work, (small, large), args.seed)
    result["warm"] = {"small_mb": small // 2**20, "large_mb": large // 2**20,
                      "small_s": warm_small, "large_s": warm_large,
                      "ratio": round(warm_large / warm_small, 3)}
    m = result["main"]
    checks = [
        # memory: PSS of the process tree (a page shared by forked workers counted once; their
        # summed RSS counts it in every worker and is shown beside it)
        ("cold run", f"{m['cold']['wall_s']:.1f} s, {m['cold_mb_s']} MB/s, peak PSS "
         f"{m['cold']['peak_pss_tree_mb']:.0f} MB (RSS sum {m['cold']['peak_rss_tree_mb']:.0f})",
         m["cold_mb_s"] >= TARGET_COLD_MBPS and m["cold"]["peak_pss_tree_mb"] <= TARGET_PEAK_MB,
         f">= {TARGET_COLD_MBPS} MB/s, <= 1.5 GB"),
        ("nothing new", f"{min(m['noop_s']):.2f} s = {m['noop_share']:.1%} of cold",
         m["noop_share"] <= TARGET_NOOP_SHARE, "<= 3% (aim 0.5 s)"),
        *((label, f"{m[name]['wall_s']:.2f} s = {m[name + '_share']:.1%} of cold",
           m[name + "_share"] <= TARGET_APPEND_SHARE, "<= 5%")
          for label, name in (("one appended session", "appended_session"),
                              ("one appended line", "appended_line"),
                              ("one new session (own ids)", "fresh_session"))),
        (f"warm {result['warm']['large_mb']} MB vs {result['warm']['small_mb']} MB",
         f"{warm_large:.2f} s vs {warm_small:.2f} s = x{result['warm']['ratio']}",
         result["warm"]["ratio"] <= TARGET_WARM_RATIO, "<= x1.2"),
    ]
    print(f"nightly bench (archive {m['archive_mb']} MB, seed {args.seed}; load {os.getloadavg()[0]:.1f})")
    for name, figure, ok, target in checks:
        print(f"  {name:<28} {figure:<48} target {target:<22} {'met' if ok else 'MISSED'}")
    print("  cold stages (done, s): " + ", ".join(f"{k} {v[1]:.1f}" for k, v in m["cold"]["stages"].items()))
    for name in ("appended_session", "fresh_session"):
        print(f"  {name.replace('_', ' ')} stages (s): " + ", ".join(
            f"{k} {v[1]:.2f}" for k, v in m[name]["stages"].items()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    result["load_avg"] = os.getloadavg()
    (RESULTS / f"nightly{'-quick' if args.quick else ''}-{args.seed}.json").write_text(
        json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
