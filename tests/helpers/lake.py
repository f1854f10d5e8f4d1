"""Helpers shared by the tests: the real samples (../shared/data/real), small lakes in tmp_path,
and SQL over a lake. Imported as ``from tests.helpers.lake import ...``."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from pipeline.core.lake import Lake
from pipeline.stages.ingest import ingest

REPO = Path(__file__).resolve().parents[2]


def _real_dir() -> Path:
    env = os.environ.get("CTXLAKE_REAL_DATA")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "data" / "real", REPO / ".." / "shared" / "data" / "real"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    raise RuntimeError("the real samples (../shared/data/real) are missing; set CTXLAKE_REAL_DATA")


REAL = _real_dir()


def copy_real(tmp_path: Path, *relative: str) -> Path:
    """Copy some real samples into ``tmp_path/archive`` (so tests may modify them)."""
    archive = tmp_path / "archive"
    for rel in relative:
        target = archive / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REAL / rel, target)
    return archive


def ingest_paths(tmp_path: Path, *paths: Path, **options) -> tuple[Lake, object]:
    lake = Lake(tmp_path / "lake")
    summary = ingest([Path(p) for p in paths], lake=lake, workers=1, **options)
    return lake, summary


def rows(lake: Lake, query: str, params: list | None = None) -> list[tuple]:
    with lake.connect() as con:
        return con.execute(query, params or []).fetchall()


def scalar(lake: Lake, query: str, params: list | None = None):
    return rows(lake, query, params)[0][0]


def claude_usage_calls(paths) -> dict[tuple, dict]:
    """Claude Code usage straight from the JSONL: once per (message.id, requestId) across all
    files, the line with the largest output_tokens (as ccusage counts it)."""
    import json

    calls: dict[tuple, dict] = {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            message = obj.get("message") or {}
            usage = message.get("usage")
            if obj.get("type") != "assistant" or not usage:
                continue
            key = (message["id"], obj["requestId"])
            if key not in calls or usage["output_tokens"] > calls[key]["usage"]["output_tokens"]:
                calls[key] = {"usage": usage, "model": message["model"], "ts": obj["timestamp"],
                              "sidechain": obj.get("isSidechain", False), "file": Path(path).name}
    return calls


# run-specific columns: the run's id and clock, nothing the engine decides
# (``sources.parts`` names the part files by the run that wrote them)
VOLATILE = {"run_id", "ingested_at", "started_at", "finished_at", "pid", "seconds", "parts"}
# the run log, the stage ledger and the usage store's source list record the run itself (its
# id, times), not its results (two local runs differ there too); their rows are compared as
# views, without those columns
RUN_FILES = ("runs.parquet", "sources.parquet", "ledger/", "ctxlake.duckdb",
             ".ctxlake.duckdb.views", ".lock", "tables/", "derived/usage_call_sources/")


def view_rows(root: Path) -> dict[str, list[str]]:
    """Every view of the lake: its rows (run-specific columns left out), sorted."""
    con = Lake(root).connect()
    try:
        views = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall()]
        out = {}
        for view in views:
            if view in ("runs", "committed_runs"):
                continue
            cols = [r[0] for r in con.execute(f'DESCRIBE "{view}"').fetchall()
                    if r[0] not in VOLATILE]
            select = ", ".join(f'"{c}"' for c in cols)
            out[view] = sorted(repr(row) for row in con.execute(
                f'SELECT {select} FROM "{view}"').fetchall())
        return out
    finally:
        con.close()


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file the run wrote for its results (derived tables, pruned outputs,
    the payload store, summaries), by path relative to the lake."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(RUN_FILES):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def assert_same_lake(local: Path, other: Path) -> None:
    local_rows, other_rows = view_rows(local), view_rows(other)
    assert sorted(local_rows) == sorted(other_rows)
    for view in local_rows:
        assert local_rows[view] == other_rows[view], view
    local_files, other_files = file_hashes(local), file_hashes(other)
    assert local_files == other_files
    assert any(name.startswith("out/") for name in local_files)
    assert any(name.startswith("derived/plans/") for name in local_files)
    assert any(name.startswith("summaries/recovery/") for name in local_files)
