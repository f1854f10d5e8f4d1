"""Progress bars draw on a terminal without failing on an unknown total, and stay quiet elsewhere."""

from __future__ import annotations

import io
import sys

from pipeline.reports import render


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


def test_the_sql_table_view_shows_backslashes_and_brackets_exactly_as_stored(tmp_path):
    from click.testing import CliRunner

    from pipeline.cli import cli
    from tests.helpers.lake import copy_real, ingest_paths

    lake, _ = ingest_paths(tmp_path, copy_real(tmp_path, "codex/codex_session.jsonl"))
    query = 'SELECT \'^\\[CRON\\]\' AS pattern, \'a[b]c\' AS "[col]"'
    result = CliRunner().invoke(cli, ["--lake", str(lake.root), "sql", query],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    cells = result.output.split()
    assert r"^\[CRON\]" in cells and "a[b]c" in cells and "[col]" in cells


def test_a_table_title_is_literal_text_too():
    table = render.table(["x"], [("[bold]y[/]",)], title="[red]t")
    out = io.StringIO()
    from rich.console import Console
    Console(file=out, width=80).print(table)
    assert "[red]t" in out.getvalue() and "[bold]y[/]" in out.getvalue()
