"""``ctxlake status``: where the lake is, what it holds, the last runs and what each stage owes.

Where the lake is: its folder, or for an object-store lake its URL (``s3://...``) and, apart,
the local mirror folder the command read (size and counts are the mirror's, as the pull before
the command left it).

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
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import LakeNotFoundError
from pipeline.core.lake import Lake

if TYPE_CHECKING:
    from pipeline.core.ledger import Pending
    from pipeline.core.locations import Location
    from pipeline.core.remote import Mirror
    from pipeline.stages.results import RunSettings


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One run of the ``runs`` log, as ``status`` lists it."""

    run_id: str
    command: str
    status: str
    started_at: str | None          # ISO time
    seconds: float | None           # None while running (or when it was killed)
    exit_code: int | None
    sessions_done: int | None
    sessions_failed: int | None
    warnings: list[str]
    # the run's stage table as recorded (stages_json), kept as written: a lake keeps the runs
    # of older versions too
    stages: list[dict]

    @classmethod
    def of(cls, row: dict) -> RunRecord:
        """From a row of the ``runs`` table."""
        started, finished = row["started_at"], row["finished_at"]
        return cls(run_id=row["run_id"], command=row["command"], status=row["status"],
                   started_at=started.isoformat() if started else None,
                   seconds=round((finished - started).total_seconds(), 2)
                   if started and finished else None,
                   exit_code=row["exit_code"], sessions_done=row["sessions_done"],
                   sessions_failed=row["sessions_failed"], warnings=row["warnings"] or [],
                   stages=json.loads(row["stages_json"]) if row["stages_json"] else [])

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class LakeStatus:
    lake: str                      # the lake's folder, or its object-store URL
    mirror: str | None             # an object-store lake's local mirror folder (else None)
    size_bytes: int
    files: int                     # archive files the lake holds
    sessions: int
    busy: bool                     # a run holds the lake's lock (or object-store lease) now
    runs: list[RunRecord]          # the last runs, newest first
    pending: dict[str, Pending]    # per stage: what it owes now
    settings: RunSettings          # the settings the next run would use
    last_settings: dict | None     # those of the last finished run, as recorded
    locations: list[Location]      # the standard transcript folders a run without PATH reads
    lost_parts: list[str]          # table parts gone from tables/ (<table>/<part>): their rows
                                   # are missing until the next run reads their files again
    table_parts: dict[str, int]    # the tables' part files, their small sets, and how many
                                   # small sets a night lets pile up before it merges them

    def settings_changed(self) -> dict[str, Any] | None:
        """The last finished run's value of each setting that differs now (None: the same,
        or no run yet): :meth:`RunSettings.changed_from`."""
        return self.settings.changed_from(self.last_settings)

    def to_dict(self) -> dict:
        return {"lake": self.lake, "mirror": self.mirror, "size_bytes": self.size_bytes,
                "files": self.files, "sessions": self.sessions, "busy": self.busy,
                "runs": [run.to_dict() for run in self.runs],
                "pending": {name: owed.to_dict() for name, owed in self.pending.items()},
                "settings": self.settings.to_dict(), "last_settings": self.last_settings,
                "locations": [location.to_dict() for location in self.locations],
                "lost_parts": self.lost_parts, "table_parts": self.table_parts}


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
                runs: int = 5, remote: Mirror | None = None) -> LakeStatus:
    """The status of ``lake`` (see the module docstring); ``remote``: the mirror ``lake`` is
    the lake folder of, when the lake lives on an object store."""
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
    busy = _busy(lake) or (remote is not None and remote.leased_elsewhere())
    recent = [RunRecord.of(row) for row in reversed(log[-runs:] if runs else [])]
    if not busy:
        # "running" in the log with the lock free: killed (the next run records it so)
        recent = [dataclasses.replace(r, status="interrupted", warnings=[
            *r.warnings, "ended without a record (killed?): the next run finishes its work"])
            if r.status == "running" else r for r in recent]
    sources = lake.read_sources(("source_id",))
    return LakeStatus(
        lake=remote.location.url if remote else str(lake.root.resolve()),
        mirror=str(remote.folder) if remote else None, size_bytes=_size(lake.root),
        files=sources.num_rows, sessions=len(LakeInputs(lake).sessions()),
        busy=busy,
        runs=recent, pending=pending_work(lake, config_path=config_path, policies=policies, tz=tz),
        settings=settings, last_settings=_previous_settings(lake),
        locations=discover_locations(), lost_parts=sorted(lake.lost_parts()),
        table_parts=_table_parts(lake))


def _table_parts(lake: Lake) -> dict[str, int]:
    """The tables' part files, how many small part sets they make, and the count past which
    a night merges them (:class:`pipeline.stages.ingest.PartCompaction`)."""
    from pipeline.stages.ingest import PART_COMPACTION

    return {"files": len(lake.part_files()),
            "small_sets": len(PART_COMPACTION.small(lake.part_set_bytes())),
            "merged_past": PART_COMPACTION.max_small}
