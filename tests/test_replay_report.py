"""The replay report: report.md with the comparison table, PNG charts, the CLI's --report."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.config import Config
from pipeline.demo.archive import write_demo_archive
from pipeline.stages.replay import POLICY_EVAL, replay
from pipeline.reports.replay_report import (
    choose_chart_session, comparison_table, markdown_table, write_report,
)
from tests.helpers.lake import ingest_paths

SIX = ["none", "microcompact", "payload_prune", "context_editing",
       "observation_masking(window=10)", "strategic"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    write_demo_archive(tmp / "archive", size_bytes=600_000, seed=3)
    lake, _ = ingest_paths(tmp, tmp / "archive")
    result = replay(lake, policies=SIX[1:], config=Config(), workers=1,
                    report_dir=tmp / "report")
    return lake, result, tmp / "report"


def test_the_demo_report_compares_the_six_policies_with_charts(demo):
    _, result, report_dir = demo
    text = (report_dir / "report.md").read_text()
    table_rows = [line for line in text.splitlines() if line.startswith("| ")]
    # the first table: header, separator, then one row per policy in the requested order
    first_cells = [line.split(" | ")[0][2:] for line in table_rows[:2 + len(SIX)]]
    assert first_cells == ["policy", "---"] + SIX
    for name in ("context_per_turn.png", "cost_vs_risk.png", "savings_distribution.png"):
        assert (report_dir / name).read_bytes().startswith(PNG_MAGIC)
        assert f"]({name})" in text
    assert "proxy for regret" in text and "## Estimate vs recorded usage" in text
    assert result.report.chart_session in text
    assert all(row["protected_violations"] == 0 for row in result.summary)


def test_the_report_is_the_same_bytes_when_written_again(demo, tmp_path):
    _, result, report_dir = demo
    again = write_report(result, tmp_path / "again")
    for path in sorted(report_dir.iterdir()):
        assert (tmp_path / "again" / path.name).read_bytes() == path.read_bytes(), path.name
    assert sorted(Path(p).name for p in again.charts) == [
        "context_per_turn.png", "cost_vs_risk.png", "savings_distribution.png"]


def test_the_comparison_table_formats_numbers_and_missing_costs():
    summary = [
        {"policy": "none", "sessions": 2, "turns": 12, "total_input_tokens": 1635,
         "tokens_saved_pct": 0.0, "median_tokens_saved_pct": 0.0,
         "median_peak_context_tokens": 535.0, "max_peak_context_tokens": 535,
         "cost_usd": None, "cost_saved_pct": None, "median_cost_saved_pct": None,
         "cost_uncached_saved_pct": None, "evictions": 0, "at_risk_evictions": 0,
         "protected_violations": 0},
        {"policy": "observation_masking(window=2)", "sessions": 2, "turns": 12,
         "total_input_tokens": 1101, "tokens_saved_pct": 32.66, "median_tokens_saved_pct": 32.66,
         "median_peak_context_tokens": 268.0, "max_peak_context_tokens": 268,
         "cost_usd": 0.00382665, "cost_saved_pct": -37.34, "median_cost_saved_pct": -37.34,
         "cost_uncached_saved_pct": 29.0, "evictions": 3, "at_risk_evictions": 1,
         "protected_violations": 0},
    ]
    headers, rows = comparison_table(summary)
    assert headers[:5] == ["policy", "sessions", "turns", "input tokens", "saved % (total)"]
    assert rows[0] == ("none", "2", "12", "1,635", "0.0", "0.0", "535", "535", "-", "-", "-",
                       "-", "0", "0", "0")
    assert rows[1][8:12] == ("0.0038", "-37.3", "-37.3", "29.0")
    headers, rows = comparison_table(summary, keys=("policy", "at_risk_evictions"), short=True)
    assert headers == ["policy", "at-risk (regret)"] and rows[1] == ("observation_masking(window=2)", "1")


def test_markdown_tables_right_align_numeric_columns():
    text = markdown_table(["policy", "tokens"], [("none", "1,635"), ("a|b", "-")])
    assert text.splitlines() == ["| policy | tokens |", "| --- | ---: |",
                                 "| none | 1,635 |", "| a\\|b | - |"]


def test_the_chart_session_is_the_longest_one_where_a_policy_evicted():
    def row(policy, sid, turns, evictions):
        base = {name: None for name in POLICY_EVAL.names}
        return base | {"policy": policy, "session_id": sid, "turns": turns,
                       "evictions": evictions}

    evals = pa.Table.from_pylist([
        row("none", "long", 50, 0), row("p", "long", 50, 0),
        row("none", "b", 9, 0), row("p", "b", 9, 2),
        row("none", "a", 9, 0), row("p", "a", 9, 1),
    ], schema=POLICY_EVAL)
    assert choose_chart_session(evals, ["none", "p"]) == "a"      # ties: by session id
    quiet = evals.filter(pa.compute.equal(evals.column("session_id"), "long"))
    assert choose_chart_session(quiet, ["none", "p"]) == "long"   # nothing evicted anywhere


def test_the_cli_writes_the_report_and_prints_where(demo, tmp_path):
    lake, result, _ = demo
    session = result.report.chart_session
    out = tmp_path / "cli-report"
    run = CliRunner().invoke(cli, ["--lake", str(lake.root), "replay", "--policy",
                                   "observation_masking(window=10)", "--report", str(out),
                                   "--chart-session", session, "--cache-ttl", "off"],
                             catch_exceptions=False)
    assert run.exit_code == 0, run.output
    assert f"report: {out / 'report.md'}" in run.output
    assert "cache no expiry" in run.output
    text = (out / "report.md").read_text()
    assert f"`{session}`" in text and "Prompt cache: no expiry" in text
