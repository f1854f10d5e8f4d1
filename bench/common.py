"""Helpers shared by the bench scripts: the cached demo archive + lake, folder sizes, timing,
machine facts and the result file.

Not a bench itself (``bench/run.py`` runs ``*_bench.py`` only). A script imports it after
putting the repository on ``sys.path`` (``from bench.common import ...``), as it does for
``pipeline``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
PAGE = os.sysconf("SC_PAGE_SIZE")

T = TypeVar("T")


def compile_package() -> None:
    """Compile ``pipeline/`` to bytecode, as ``pip install`` does for an installed package: in
    an editable checkout under ``PYTHONDONTWRITEBYTECODE`` (set on this box) every measured
    process would otherwise compile every module it imports (~0.35 s a process, which a
    deployed nightly job does not pay)."""
    import compileall

    compileall.compile_dir(str(REPO / "pipeline"), quiet=1)


compile_package()


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """(seconds, result) of ``fn()``, wall clock."""
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def write_demo(archive: Path, size_bytes: int, seed: int) -> str:
    """Write ``pipeline.demo.archive``'s deterministic archive into ``archive``; returns how it was
    made (the ``archive`` figure of the result files)."""
    from pipeline.demo.archive import write_demo_archive

    write_demo_archive(archive, size_bytes=size_bytes, seed=seed)
    return f"pipeline.demo.archive.write_demo_archive(size_bytes={size_bytes}, seed={seed})"


def cached_archive(root: Path, size: int, seed: int) -> Path:
    """The demo archive of ``size`` bytes and ``seed`` under ``root``, written once (a marker
    file says it is complete; a half-written one is written again)."""
    import shutil

    from pipeline.demo.archive import write_demo_archive

    archive = root / f"archive-{size}-{seed}"
    marker = archive / ".bench-complete"
    if not marker.exists():
        shutil.rmtree(archive, ignore_errors=True)
        write_demo_archive(archive, size_bytes=size, seed=seed)
        marker.write_text("ok")
    return archive


def cached_lake(workdir: Path, *, size_mb: int, seed: int, rebuild: bool,
                write_archive: Callable[[Path, int, int], str] = write_demo,
                after_ingest: Callable[[Path], dict] | None = None) -> dict:
    """The archive (``workdir/archive``) and its ingested lake (``workdir/lake``), built once.

    ``workdir/built.json`` marks a finished build and holds its figures, returned here:
    ``archive`` (what ``write_archive(archive, size_bytes, seed)`` said), ``generator``
    (``pipeline.demo.archive.GENERATOR``), ``build_s``, ``ingest_s``, ``files``, ``lines``, and the
    keys ``after_ingest(lake_dir)`` returns (more setup, e.g. plans). ``rebuild``, a missing
    marker or one from another demo generator (other bytes) starts from an empty ``workdir``.
    None of this is a measured figure: the benches time what comes after.
    """
    from pipeline.demo.archive import GENERATOR
    from pipeline.stages.ingest import ingest
    from pipeline.core.lake import Lake

    archive, lake_dir = workdir / "archive", workdir / "lake"
    marker = workdir / "built.json"
    if marker.exists() and json.loads(marker.read_text(encoding="utf-8")).get("generator") != GENERATOR:
        rebuild = True
    if rebuild and workdir.exists():
        shutil.rmtree(workdir)
    if not marker.exists():
        if workdir.exists():
            shutil.rmtree(workdir)
        archive.mkdir(parents=True)
        build_s, how = timed(lambda: write_archive(archive, size_mb * 1024 * 1024, seed))
        ingest_s, summary = timed(lambda: ingest([archive], lake=Lake(lake_dir)))
        figures = {"archive": how, "generator": GENERATOR,
                   "build_s": round(build_s, 2), "ingest_s": round(ingest_s, 2),
                   "files": summary.files, "lines": summary.lines}
        if after_ingest is not None:
            figures.update(after_ingest(lake_dir))
        marker.write_text(json.dumps(figures), encoding="utf-8")
    return json.loads(marker.read_text(encoding="utf-8"))


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it."""
    from pipeline.stages.engine import descendant_pids

    return [root, *descendant_pids([root])]


def _rss_pss(pid: int, *, with_pss: bool = True) -> tuple[int, int]:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            rss = int(handle.read().split()[1]) * PAGE
    except OSError:
        return 0, 0
    if not with_pss:
        return rss, 0
    pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    pss = int(line.split()[1]) * 1024
                    break
    except OSError:
        pss = rss
    return rss, pss


def run_measured(command: list[str], *, env: dict | None = None) -> dict:
    """Run ``command`` (which prints a JSON object as its last line); return that object plus
    wall time, CPU time and peak memory of its whole process tree (RSS sampled every 50 ms,
    PSS every 500 ms) and of its largest process."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = {"rss": 0, "pss": 0, "procs": 0}
    stop = threading.Event()

    def sample() -> None:
        # the sampler shares 2 cores with what it measures: the process list is rescanned and
        # PSS (smaps_rollup walks page tables) read every 10th tick only; RSS every 50 ms
        tick, pids = 0, [proc.pid]
        while not stop.is_set():
            if tick % 10 == 0:
                pids = _descendants(proc.pid)
            rss = pss = 0
            for pid in pids:
                r, p = _rss_pss(pid, with_pss=tick % 10 == 0)
                rss += r
                pss += p
            peak["rss"] = max(peak["rss"], rss)
            peak["pss"] = max(peak["pss"], pss)
            peak["procs"] = max(peak["procs"], len(pids))
            tick += 1
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []
    readers = [threading.Thread(target=lambda: out_chunks.append(proc.stdout.read())),
               threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()))]
    for reader in readers:
        reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    stop.set()
    sampler.join()
    for reader in readers:
        reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(b"".join(err_chunks).decode(errors="replace"))
        raise SystemExit(f"{command[:4]} failed with exit code {proc.returncode}")
    text = b"".join(out_chunks).decode().strip()
    try:
        answer = json.loads(text)            # a whole (indented) JSON document
    except ValueError:
        answer = json.loads(text.splitlines()[-1])
    answer.update(wall_s=round(wall, 3), peak_rss_tree_mb=round(peak["rss"] / 2**20, 1),
                  peak_pss_tree_mb=round(peak["pss"] / 2**20, 1),
                  peak_rss_max_process_mb=round(usage.ru_maxrss / 1024, 1),
                  cpu_s=round(usage.ru_utime + usage.ru_stime, 2), processes=peak["procs"])
    return answer


def folder_usage(folder: Path) -> tuple[int, int]:
    """(bytes, files) of every file below ``folder``."""
    total = count = 0
    for path in folder.rglob("*"):
        if path.is_file():
            total += path.stat().st_size
            count += 1
    return total, count


def folder_bytes(folder: Path) -> int:
    """Bytes of every file below ``folder``."""
    return folder_usage(folder)[0]


def target_verdict(seconds: float, target_s: float) -> str:
    """``target <= N s: met|MISSED (share of budget)``, as the benches print it."""
    return (f"target <= {target_s:.0f} s: {'met' if seconds <= target_s else 'MISSED'} "
            f"({seconds / target_s:.2f} of budget)")


def machine_info(**extra: Any) -> dict:
    """The machine a result was measured on (cores, Python, platform), plus ``extra``."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), **extra}


def write_result(out: Path, result: dict) -> None:
    """Write ``result`` as sorted, indented JSON to ``out`` and say so."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out}")
