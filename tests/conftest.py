"""Shared fixtures and session hooks; the helpers the tests import are in tests/helpers/."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.helpers.lake import REAL


def pytest_configure(config) -> None:
    """No test reads or writes the real per-user folders: for the whole session HOME,
    XDG_DATA_HOME and XDG_CONFIG_HOME point into a temporary folder (the same for every test,
    so a module-scoped lake and the tests using it see the same home), and CTXLAKE_HOME /
    CTXLAKE_CONFIG are unset (a test sets them when it means to).

    Lakes here are thrown away: CTXLAKE_FSYNC=0 makes no fsync or syncfs (a syncfs flushes
    every dirty page of /tmp, the other worker's too). The kill tests kill processes, not the
    machine, and a killed process loses nothing the page cache holds, so they test the same
    commit order; tests/test_store.py sets it back to test the flushes themselves."""
    home = Path(tempfile.mkdtemp(prefix="ctxlake-test-home-"))
    config._ctxlake_home = home
    os.environ["HOME"] = str(home)
    os.environ["XDG_DATA_HOME"] = str(home / ".local" / "share")
    os.environ["XDG_CONFIG_HOME"] = str(home / ".config")
    os.environ.pop("CTXLAKE_HOME", None)
    os.environ.pop("CTXLAKE_CONFIG", None)
    os.environ["CTXLAKE_FSYNC"] = "0"


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
