"""The typed results of the nightly job (``ctxlake run``).

The CLI reads them by attribute; ``to_dict()`` is the ``--json`` output (a user contract: the
keys and values stay as they are). Each stage's own summary is reused as it is (ingest's
:class:`~pipeline.stages.ingest.IngestSummary`, apply's, summarize's, ...); the types here are
what the nightly job adds around them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.core.ledger import StageReport
    from pipeline.reports.html import HtmlSummary
    from pipeline.stages.apply import ApplySummary
    from pipeline.stages.correlate import CorrelateSummary
    from pipeline.stages.ingest import IngestSummary
    from pipeline.stages.plan import PlanSummary
    from pipeline.stages.summarize import SummarizeSummary


@dataclasses.dataclass(frozen=True)
class StageRun:
    """What one stage did in a run: a row of the run's stage table (the ``runs`` row keeps
    these as ``stages_json``)."""

    stage: str
    seconds: float
    done: int
    skipped: int
    failed: int
    removed: int
    status: str                     # ok | problems | failed | skipped
    error: str | None = None
    warning: str | None = None

    @classmethod
    def of(cls, report: StageReport) -> StageRun:
        return cls(report.stage, **report.figures())

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        for name in ("error", "warning"):
            if out[name] is None:
                del out[name]
        return out


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """The settings a nightly run works with (recorded with the run: a later run warns when
    they changed)."""

    time_zone: str
    policies: tuple[str, ...]
    out: str
    ignore_patterns: tuple[str, ...]
    version: str

    def to_dict(self) -> dict:
        return {"time_zone": self.time_zone, "policies": list(self.policies), "out": self.out,
                "ignore_patterns": list(self.ignore_patterns), "version": self.version}

    def changed_from(self, before: dict | None) -> dict[str, Any] | None:
        """None when ``before`` (a recorded run's settings) is missing or the same; else the
        recorded value of each of these settings that differs (possibly none, when only a
        setting this version no longer has differs)."""
        now = self.to_dict()
        if not before or before == now:
            return None
        return {key: before.get(key) for key, value in now.items() if before.get(key) != value}


def _dict_of(result) -> dict:
    """A stage's summary as JSON (``{}`` when the stage did not run)."""
    return {} if result is None else result.to_dict()


@dataclasses.dataclass(frozen=True)
class NightlySummary:
    lake: str
    run_id: str
    status: str                     # ok | problems | failed
    exit_code: int
    ingest: IngestSummary
    stages: list[StageRun]
    correlate: CorrelateSummary | None          # None: the stage owed nothing
    calibration_rows: int
    plans: list[PlanSummary]
    applied: dict[str, ApplySummary]            # per policy spec
    summaries: SummarizeSummary | None
    html: HtmlSummary | None        # the HTML report's refresh ([report] html = true)
    touched_sessions: int
    sessions_ignored: int
    out_dir: str
    seconds: float
    warnings: list[str]
    interrupted_runs: list[str]
    settings: RunSettings

    def to_dict(self) -> dict:
        return {"lake": self.lake, "run_id": self.run_id, "status": self.status,
                "exit_code": self.exit_code, "ingest": self.ingest.to_dict(),
                "stages": [stage.to_dict() for stage in self.stages],
                "correlate": _dict_of(self.correlate), "calibration_rows": self.calibration_rows,
                "plans": [plan.to_dict() for plan in self.plans],
                "applied": {spec: applied.to_dict() for spec, applied in self.applied.items()},
                "summaries": _dict_of(self.summaries), "html": _dict_of(self.html),
                "touched_sessions": self.touched_sessions,
                "sessions_ignored": self.sessions_ignored, "out_dir": self.out_dir,
                "seconds": self.seconds, "warnings": list(self.warnings),
                "interrupted_runs": list(self.interrupted_runs),
                "settings": self.settings.to_dict()}
