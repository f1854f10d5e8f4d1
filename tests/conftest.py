"""Shared fixtures: the real samples in ../shared/data/real and small lakes in tmp_path."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from pipeline.stages.ingest import ingest
from pipeline.core.lake import Lake

REPO = Path(__file__).resolve().parent.parent


def _real_dir() -> Path:
    env = os.environ.get("CTXLAKE_REAL_DATA")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "data" / "real", REPO / ".." / "shared" / "data" / "real"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    raise RuntimeError("the real samples (../shared/data/real) are missing; set CTXLAKE_REAL_DATA")


REAL = _real_dir()


def pytest_configure(config) -> None:
    """No test reads or writes the real per-user folders: for the whole session HOME,
    XDG_DATA_HOME and XDG_CONFIG_HOME point into a temporary folder (the same for every test,
    so a module-scoped lake and the tests using it see the same home), and CTXLAKE_HOME /
    CTXLAKE_CONFIG are unset (a test sets them when it means to)."""
    home = Path(tempfile.mkdtemp(prefix="ctxlake-test-home-"))
    config._ctxlake_home = home
    os.environ["HOME"] = str(home)
    os.environ["XDG_DATA_HOME"] = str(home / ".local" / "share")
    os.environ["XDG_CONFIG_HOME"] = str(home / ".config")
    os.environ.pop("CTXLAKE_HOME", None)
    os.environ.pop("CTXLAKE_CONFIG", None)


def pytest_unconfigure(config) -> None:
    home = getattr(config, "_ctxlake_home", None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def private_home(tmp_path_factory, monkeypatch) -> Path:
    """A fresh home of this test's own (HOME and the XDG folders inside it)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    return home


@pytest.fixture
def real_dir() -> Path:
    return REAL


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
    con = lake.connect()
    try:
        return con.execute(query, params or []).fetchall()
    finally:
        con.close()


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
