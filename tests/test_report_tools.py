"""``ctxlake report tools``: tool usage by tool, family, day and project."""

from __future__ import annotations

import json
import math
from datetime import date

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.errors import UsageError
from pipeline.reports.report_tools import tool_usage
from tests.helpers.lake import ingest_paths


def _tokens(text: str) -> int:
    """docs/policies.md estimate for ASCII text: ceil(len / 4)."""
    return math.ceil(len(text) / 4)


def _compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _pair(day: str, second: int, call_id: str, name: str, tool_input: dict, result: str, *,
          session: str, cwd: str, is_error: bool = False) -> list[dict]:
    stamp = f"{day}T10:00:{second:02d}Z"
    return [
        {"type": "assistant", "sessionId": session, "uuid": f"a-{call_id}", "timestamp": stamp,
         "cwd": cwd, "message": {"id": f"m-{call_id}", "role": "assistant", "model": "claude-x",
                                 "content": [{"type": "tool_use", "id": call_id, "name": name,
                                              "input": tool_input}]}},
        {"type": "user", "sessionId": session, "uuid": f"u-{call_id}", "timestamp": stamp,
         "cwd": cwd, "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": call_id, "content": result,
              "is_error": is_error}]}},
    ]


READ_IN = {"file_path": "/p1/a.py"}
BASH_IN = {"command": "make test"}
READ_OUT, BASH_OUT, FAIL_OUT = "x = 1\n" * 20, "ok " * 50, "exit 2"


@pytest.fixture
def lake(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    one = (_pair("2025-01-01", 1, "r1", "Read", READ_IN, READ_OUT, session="s1", cwd="/p1")
           + _pair("2025-01-01", 2, "r2", "Read", READ_IN, READ_OUT, session="s1", cwd="/p1")
           + _pair("2025-01-01", 3, "b1", "Bash", BASH_IN, FAIL_OUT, session="s1", cwd="/p1",
                   is_error=True))
    two = _pair("2025-01-02", 1, "b2", "Bash", BASH_IN, BASH_OUT, session="s2", cwd="/p2")
    for name, objs in (("s1.jsonl", one), ("s2.jsonl", two)):
        (archive / name).write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    built, _ = ingest_paths(tmp_path, archive)
    return built


def test_daily_rows_per_project_and_tool_with_tokens_bytes_and_errors(lake):
    result = tool_usage(lake)
    read_in, bash_in = _tokens(_compact(READ_IN)), _tokens(_compact(BASH_IN))
    got = [(r["day"], r["project"], r["tool_family"], r["tool_name"], r["calls"], r["results"],
            r["input_est_tokens"], r["result_est_tokens"], r["payload_bytes"], r["errors"])
           for r in result.daily]
    assert got == [
        (date(2025, 1, 1), "/p1", "read", "Read", 2, 2, 2 * read_in, 2 * _tokens(READ_OUT),
         2 * len(READ_OUT), 0),
        (date(2025, 1, 1), "/p1", "shell", "Bash", 1, 1, bash_in, _tokens(FAIL_OUT),
         len(FAIL_OUT), 1),
        (date(2025, 1, 2), "/p2", "shell", "Bash", 1, 1, bash_in, _tokens(BASH_OUT),
         len(BASH_OUT), 0),
    ]


def test_totals_by_family_and_tool_are_sorted_by_tokens_with_shares(lake):
    result = tool_usage(lake)
    read_total = 2 * (_tokens(_compact(READ_IN)) + _tokens(READ_OUT))
    shell_total = 2 * _tokens(_compact(BASH_IN)) + _tokens(FAIL_OUT) + _tokens(BASH_OUT)
    grand = read_total + shell_total
    # read: 2 * (ceil(24/4) + ceil(120/4)) = 72; shell: 2 * ceil(21/4) + ceil(6/4) + ceil(150/4) = 52
    assert (read_total, shell_total) == (72, 52)
    assert result.totals["est_tokens"] == grand
    assert [(r["tool_family"], r["est_tokens"], r["share"]) for r in result.by_family] == [
        ("read", 72, round(72 / 124, 4)), ("shell", 52, round(52 / 124, 4))]
    assert [(r["tool_name"], r["calls"], r["errors"]) for r in result.by_tool] == [
        ("Read", 2, 0), ("Bash", 2, 1)]


def test_since_and_until_bound_the_days_inclusively(lake):
    only_two = tool_usage(lake, since=date(2025, 1, 2))
    assert [(r["day"], r["tool_name"]) for r in only_two.daily] == [(date(2025, 1, 2), "Bash")]
    only_one = tool_usage(lake, until=date(2025, 1, 1))
    assert {r["day"] for r in only_one.daily} == {date(2025, 1, 1)}
    assert tool_usage(lake, since=date(2025, 1, 3)).daily == []
    with pytest.raises(UsageError):
        tool_usage(lake, since=date(2025, 1, 2), until=date(2025, 1, 1))


def test_one_projects_usage_has_its_own_totals_and_shares(lake):
    only_p2 = tool_usage(lake, project="/p2")
    bash = _tokens(_compact(BASH_IN)) + _tokens(BASH_OUT)
    assert [(r["day"], r["project"], r["tool_name"]) for r in only_p2.daily] == [
        (date(2025, 1, 2), "/p2", "Bash")]
    assert only_p2.totals["est_tokens"] == bash
    assert [(r["tool_name"], r["calls"], r["est_tokens"], r["share"]) for r in only_p2.by_tool] == [
        ("Bash", 1, bash, 1.0)]
    assert tool_usage(lake, project="/elsewhere").by_family == []


def test_the_cli_prints_json_and_tables(lake):
    runner = CliRunner()
    result = runner.invoke(cli, ["--lake", str(lake.root), "report", "tools", "--since",
                                 "2025-01-02", "--json"], catch_exceptions=False)
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert (data["since"], data["totals"]["calls"], data["by_tool"][0]["tool_name"]) == (
        "2025-01-02", 1, "Bash")
    text = runner.invoke(cli, ["--lake", str(lake.root), "report", "tools"],
                         catch_exceptions=False).output
    assert "tools by family" in text and "per day and project" in text and "Read" in text
