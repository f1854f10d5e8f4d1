"""``ctxlake status``: where the lake is, what it holds, the last runs and what each stage owes.

Nothing is written: the pending work is what the stage ledger says the next ``run`` would do
with the same settings (:func:`pipeline.stages.nightly.pending_work`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
from pathlib import Path

from pipeline.core.errors import LakeNotFoundError
from pipeline.core.lake import Lake


@dataclasses.dataclass
class LakeStatus:
    lake: str
    size_bytes: int
    files: int                     # archive files the lake holds
    sessions: int
    busy: bool                     # a run holds the lake's lock right now
    runs: list[dict]               # the last runs, newest first
    pending: dict[str, dict]       # per stage: todo, removed, full
    settings: dict                 # the settings the next run would use
    last_settings: dict | None     # those of the last finished run
    locations: list[dict]          # the standard transcript folders a run without PATH reads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _size(root: Path) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _busy(lake: Lake) -> bool:
    path = lake.root / ".lock"
    if not path.is_file() or path.is_symlink():
        return False
    with open(path, "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def lake_status(lake: Lake, *, config_path: Path | None = None,
                policies: tuple[str, ...] | None = None, tz: str | None = None,
                runs: int = 5) -> LakeStatus:
    """The status of ``lake`` (see the module docstring)."""
    from pipeline.stages.nightly import LakeInputs, NightlySettings, _previous_settings, pending_work
    from pipeline.core.config import load_config
    from pipeline.stages.nightly import DEFAULT_POLICIES
    from pipeline.core.locations import discover_locations
    from pipeline.stages.usage import resolve_timezone

    if not lake.exists():
        raise LakeNotFoundError("no lake here yet", path=str(lake.root),
                                hint="run `ctxlake run PATH` (or `ctxlake demo`) first, or pass "
                                     "--lake / set CTXLAKE_HOME")
    settings = NightlySettings(load_config(config_path), tuple(policies or DEFAULT_POLICIES),
                               resolve_timezone(tz), lake.root / "out", None).describe()
    log = lake.read_runs().to_pylist()
    recent = []
    for row in reversed(log[-runs:] if runs else []):
        seconds = None
        if row["started_at"] and row["finished_at"]:
            seconds = round((row["finished_at"] - row["started_at"]).total_seconds(), 2)
        recent.append({"run_id": row["run_id"], "command": row["command"], "status": row["status"],
                       "started_at": row["started_at"].isoformat() if row["started_at"] else None,
                       "seconds": seconds, "exit_code": row["exit_code"],
                       "sessions_done": row["sessions_done"],
                       "sessions_failed": row["sessions_failed"],
                       "warnings": row["warnings"] or [],
                       "stages": json.loads(row["stages_json"]) if row["stages_json"] else []})
    sources = lake.read_sources()
    return LakeStatus(
        lake=str(lake.root.resolve()), size_bytes=_size(lake.root), files=sources.num_rows,
        sessions=len(LakeInputs(lake).sessions()), busy=_busy(lake), runs=recent,
        pending=pending_work(lake, config_path=config_path, policies=policies, tz=tz),
        settings=settings, last_settings=_previous_settings(lake),
        locations=[location.to_dict() for location in discover_locations()])
