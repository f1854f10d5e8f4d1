"""Helpers shared by the tests: the real samples (../shared/data/real), small lakes in tmp_path,
and SQL over a lake. Imported as ``from tests.helpers.lake import ...``."""

from __future__ import annotations

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
