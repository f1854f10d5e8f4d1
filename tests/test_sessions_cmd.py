"""`ctxlake sessions [DATE]`: the list of recent days, one day's log, and the clear messages."""

from __future__ import annotations

import json

from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.errors import CtxlakeError, UsageError
from pipeline.core.lake import Lake


def _run(lake_root, *args):
    return CliRunner().invoke(cli, ["--lake", str(lake_root), "sessions", *args])


def _write_logs(root, days: dict[str, int]) -> None:
    folder = root / "summaries" / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    for day, count in days.items():
        blocks = [f"### {h:02d}:00\n- **Topic:** t{h}\n- **Messages:** 1 user / 1 assistant\n"
                  f"- **Est. tokens:** ~10" for h in range(count)]
        (folder / f"{day}.md").write_text("\n\n".join([f"# Session Log — {day}", *blocks]) + "\n",
                                          encoding="utf-8")


def test_without_logs_it_says_so_and_how_to_make_them(tmp_path):
    res = _run(tmp_path / "lake")
    assert res.exit_code == 0
    assert res.output == (f"No session logs yet in {tmp_path / 'lake' / 'summaries' / 'sessions'}.\n"
                          "Write them with: ctxlake summarize (the nightly `ctxlake run` does it too)\n")


def test_the_list_shows_the_14_most_recent_days_then_how_many_more_and_a_hint(tmp_path):
    days = {f"2025-11-{d:02d}": d % 3 for d in range(1, 21)}   # 20 days, 0..2 sessions each
    _write_logs(tmp_path, days)
    (tmp_path / "summaries" / "sessions" / "notes.md").write_text("not a log", encoding="utf-8")
    res = _run(tmp_path)
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert lines[0] == f"Session logs, most recent first ({tmp_path / 'summaries' / 'sessions'}):"
    assert lines[1:15] == [f"  2025-11-{d:02d}  {d % 3} session{'' if d % 3 == 1 else 's'}"
                           for d in range(20, 6, -1)]
    assert lines[15:] == ["... and 6 more days", "View one day with: ctxlake sessions YYYY-MM-DD"]


def test_a_short_list_has_no_more_days_line(tmp_path):
    _write_logs(tmp_path, {"2025-11-01": 1, "2025-11-02": 2})
    assert _run(tmp_path).output.splitlines()[1:] == [
        "  2025-11-02  2 sessions", "  2025-11-01  1 session",
        "View one day with: ctxlake sessions YYYY-MM-DD"]


def test_a_day_prints_its_log_and_a_long_log_its_last_50_lines(tmp_path):
    _write_logs(tmp_path, {"2025-11-01": 2, "2025-11-02": 20})
    short = (tmp_path / "summaries" / "sessions" / "2025-11-01.md").read_text(encoding="utf-8")
    assert _run(tmp_path, "2025-11-01").output == short
    long_lines = (tmp_path / "summaries" / "sessions" / "2025-11-02.md").read_text(
        encoding="utf-8").splitlines()
    assert len(long_lines) == 101
    res = _run(tmp_path, "2025-11-02")
    assert res.exit_code == 0
    assert res.output.splitlines() == ["... (51 earlier lines omitted)", *long_lines[-50:]]


def test_a_day_without_a_log_and_a_bad_date_are_clear_errors(tmp_path):
    _write_logs(tmp_path, {"2025-11-01": 1})
    res = _run(tmp_path, "2025-11-05")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {tmp_path / 'summaries' / 'sessions' / '2025-11-05.md'}: no session log for 2025-11-05\n"
        "hint: the latest log is 2025-11-01; list them with: ctxlake sessions\n")
    res = _run(tmp_path, "5 Nov")
    assert res.exit_code == 2
    assert res.output.startswith("Error: DATE must be YYYY-MM-DD, got '5 Nov'")


def test_json_output_for_the_list_and_for_a_day(tmp_path):
    _write_logs(tmp_path, {"2025-11-01": 1})
    data = json.loads(_run(tmp_path, "--json").output)
    assert data == {"days": [{"date": "2025-11-01", "sessions": 1}], "log_dir":
                    str(Lake(tmp_path).summaries_dir / "sessions"), "more_days": 0, "total_days": 1}
    day = json.loads(_run(tmp_path, "2025-11-01", "--json").output)
    assert (day["date"], day["omitted"], day["lines"][0]) == ("2025-11-01", 0, "# Session Log — 2025-11-01")
