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
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """(seconds, result) of ``fn()``, wall clock."""
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def write_demo(archive: Path, size_bytes: int, seed: int) -> str:
    """Write ``pipeline.demo``'s deterministic archive into ``archive``; returns how it was
    made (the ``archive`` figure of the result files)."""
    from pipeline.demo import write_demo_archive

    write_demo_archive(archive, size_bytes=size_bytes, seed=seed)
    return f"pipeline.demo.write_demo_archive(size_bytes={size_bytes}, seed={seed})"


def cached_lake(workdir: Path, *, size_mb: int, seed: int, rebuild: bool,
                write_archive: Callable[[Path, int, int], str] = write_demo,
                after_ingest: Callable[[Path], dict] | None = None) -> dict:
    """The archive (``workdir/archive``) and its ingested lake (``workdir/lake``), built once.

    ``workdir/built.json`` marks a finished build and holds its figures, returned here:
    ``archive`` (what ``write_archive(archive, size_bytes, seed)`` said), ``generator``
    (``pipeline.demo.GENERATOR``), ``build_s``, ``ingest_s``, ``files``, ``lines``, and the
    keys ``after_ingest(lake_dir)`` returns (more setup, e.g. plans). ``rebuild``, a missing
    marker or one from another demo generator (other bytes) starts from an empty ``workdir``.
    None of this is a measured figure: the benches time what comes after.
    """
    from pipeline.demo import GENERATOR
    from pipeline.ingest import ingest
    from pipeline.lake import Lake

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
