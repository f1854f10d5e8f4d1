"""Progress bars draw on a terminal without failing on an unknown total, and stay quiet elsewhere."""

from __future__ import annotations

import io
import sys

from pipeline import render


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_every_progress_bar_accepts_unknown_and_known_totals_on_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    with render.stage_progress() as stage:
        for name in ("ingest", "plan"):
            update = stage(name)
            update(0, 0)
            update(5, 10)
            update(10, 10)
    with render.byte_progress("ingest") as update:
        update(0, 0)
        update(1024, 2048)
    with render.step_progress("sessions") as update:
        update(0, 0)
        update(3, 3)
    assert "plan" in sys.stderr.getvalue()


def test_progress_is_quiet_when_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with render.stage_progress() as stage:
        assert stage("ingest") is None
    with render.byte_progress("ingest") as update:
        assert update is None
    assert sys.stderr.getvalue() == ""
