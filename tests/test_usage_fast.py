"""The period reports' pure-Python path (``derived/usage_summary/buckets.json``): the same
JSON bytes as the DuckDB path for every report and breakdown, no DuckDB or pyarrow import,
and never used when stale (a new ingest, config prices)."""

from __future__ import annotations

import json
import subprocess
from datetime import date
import sys
from pathlib import Path

import pytest

from pipeline.core.errors import UsageError
from pipeline.reports import render
from pipeline.demo.archive import write_demo_archive
from pipeline.stages.ingest import ingest
from pipeline.core.lake import Lake
from pipeline.stages.summarize import summarize
from pipeline.stages.usage import SUMMARY, read_summary, refresh_usage, usage_report
from tests.helpers.lake import REAL, ingest_paths
from tests.test_recover import ClaudeTranscript

PERIODS = ("day", "week", "month", "session")
BREAKDOWNS = (None, "model", "agent", "project", "format")
OPTIONS = (
    {"tz": "UTC"},
    {"tz": "America/New_York", "since": "2025-01-01", "until": "2026-12-31", "order": "desc"},
    {"tz": "Asia/Kolkata", "project": "e", "limit": 2},
    {"tz": "Asia/Kathmandu", "until": "2026-11-10"},
)


def _refreshed(lake: Lake) -> Lake:
    summarize(lake, tz="UTC")
    refresh_usage(lake)
    return lake


def _both_paths(lake: Lake, **options) -> tuple[str, str]:
    """(fast JSON, DuckDB JSON) of one report: the DuckDB one with the summary file moved away."""
    folder = Path(lake.root) / "derived" / SUMMARY
    assert read_summary(lake.root) is not None
    fast = usage_report(lake, **options)
    saved = {path: path.read_bytes() for path in folder.glob("*.json")}
    for path in saved:
        path.unlink()
    try:
        slow = usage_report(lake, **options)
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
    assert (fast.source, slow.source) == ("stored", "stored")
    return render.to_json(fast.to_dict()), render.to_json(slow.to_dict())


def _assert_every_report_agrees(lake: Lake) -> int:
    compared = 0
    for period in PERIODS:
        for breakdown in BREAKDOWNS:
            for options in OPTIONS:
                fast, slow = _both_paths(lake, period=period, breakdown=breakdown, **options)
                assert fast == slow, (period, breakdown, options)
                compared += 1
    return compared


@pytest.mark.parametrize("sample", ["claude_code", "codex", "gemini", "swe_agent", "mini_swe_agent"])
def test_the_fast_path_gives_the_duckdb_bytes_for_every_report_on_the_real_samples(tmp_path, sample):
    lake, _ = ingest_paths(tmp_path, REAL / sample)
    _refreshed(lake)
    assert _assert_every_report_agrees(lake) == len(PERIODS) * len(BREAKDOWNS) * len(OPTIONS)
    rows = json.loads(_both_paths(lake, period="day", tz="UTC")[0])["rows"]
    assert rows and sum(r["total_tokens"] for r in rows) > 0   # something was counted


def test_the_fast_path_gives_the_duckdb_bytes_for_every_report_on_a_demo_archive(tmp_path, monkeypatch):
    write_demo_archive(tmp_path / "archive", size_bytes=3 * 1024 * 1024, seed=11)
    lake = Lake(tmp_path / "lake")
    ingest([tmp_path / "archive"], lake=lake, workers=1)
    monkeypatch.setenv("TZ", "Asia/Kathmandu")   # the machine's zone: its day sums are stored too
    _refreshed(lake)
    assert sorted(read_summary(lake.root).days) == ["Asia/Kathmandu", "UTC"]
    _assert_every_report_agrees(lake)
    data = json.loads(_both_paths(lake, period="day", tz="UTC", breakdown="format")[0])
    formats = {g["format"] for row in data["rows"] for g in row["breakdown"]}
    assert {"claude_code", "codex_cli", "gemini_cli"} <= formats


def test_weeks_may_start_on_any_day_and_both_paths_name_and_count_them_alike(tmp_path):
    write_demo_archive(tmp_path / "archive", size_bytes=2 * 1024 * 1024, seed=5)
    lake = Lake(tmp_path / "lake")
    ingest([tmp_path / "archive"], lake=lake, workers=1)
    _refreshed(lake)
    monday = json.loads(_both_paths(lake, period="week", tz="UTC")[0])
    for start, iso in (("sunday", 7), ("wednesday", 3)):
        for options in OPTIONS:
            fast, slow = _both_paths(lake, period="week", start_of_week=start, breakdown="model", **options)
            assert fast == slow, (start, options)
        data = json.loads(_both_paths(lake, period="week", tz="UTC", start_of_week=start)[0])
        assert data["start_of_week"] == start
        assert {date.fromisoformat(r["week"]).isoweekday() for r in data["rows"] if r["week"]} == {iso}
        # the same calls, cut at other days: the totals do not move
        assert data["totals"] == monday["totals"] and data["rows"] != monday["rows"]
    assert monday["start_of_week"] == "monday"
    with pytest.raises(UsageError, match="unknown start of week 'sun'"):
        usage_report(lake, period="week", start_of_week="sun")


def test_a_report_on_a_current_lake_imports_neither_duckdb_nor_pyarrow(tmp_path):
    lake, _ = ingest_paths(tmp_path, REAL / "claude_code")
    _refreshed(lake)
    probe = ("import sys\n"
             "from click.testing import CliRunner\n"
             "from pipeline.cli import cli\n"
             f"result = CliRunner().invoke(cli, ['--lake', {str(lake.root)!r}, 'report', 'daily', "
             "'--json', '--tz', 'UTC'], catch_exceptions=False)\n"
             "assert result.exit_code == 0, result.output\n"
             "print(sorted(m for m in ('duckdb', 'pyarrow', 'polars') if m in sys.modules))\n"
             "print(result.output)")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout
    first, report = out.split("\n", 1)
    assert first == "[]"
    assert json.loads(report)["usage_source"] == "stored"


def test_an_ingest_after_the_refresh_makes_the_summary_stale_and_the_report_exact(tmp_path):
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-one", start="2026-01-05T10:00:00")
    t.user("go")
    t.say("a", usage={"input_tokens": 1_000, "output_tokens": 10})
    t.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    _refreshed(lake)
    assert usage_report(lake, period="day", tz="UTC").totals.input_tokens == 1_000
    other = ClaudeTranscript("sess-two", start="2026-01-05T11:00:00")
    other.user("more")
    other.say("b", usage={"input_tokens": 500, "output_tokens": 5})
    other.write(archive)
    ingest([archive], lake=lake, workers=1)
    assert read_summary(lake.root) is None                     # sources.parquet was replaced
    report = usage_report(lake, period="day", tz="UTC")
    assert (report.source, report.totals.input_tokens) == ("messages", 1_500)
    refresh_usage(lake)
    assert read_summary(lake.root) is not None
    assert usage_report(lake, period="day", tz="UTC").totals.input_tokens == 1_500


def test_config_prices_bypass_the_summary(tmp_path):
    from pipeline.core.config import load_config

    lake, _ = ingest_paths(tmp_path, REAL / "claude_code")
    _refreshed(lake)
    config_file = tmp_path / "ctxlake.toml"
    config_file.write_text('[prices."claude-sonnet-4-5-20250929"]\ninput = 1.0\noutput = 2.0\n',
                           encoding="utf-8")
    report = usage_report(lake, period="day", tz="UTC", config=load_config(config_file))
    assert report.source == "rows"
    assert "config prices for claude-sonnet-4-5-20250929" in report.price_source


def test_the_summary_file_is_private(tmp_path):
    lake, _ = ingest_paths(tmp_path, REAL / "codex")
    _refreshed(lake)
    folder = Path(lake.root) / "derived" / SUMMARY
    modes = {path.name: path.stat().st_mode & 0o777 for path in folder.iterdir()}
    assert (modes, folder.stat().st_mode & 0o777) == (
        {"buckets.json": 0o600, "day_rows.json": 0o600, "days.json": 0o600}, 0o700)


def _stored_usage(lake: Lake) -> dict:
    """The stored usage tables (by file) and the JSON summary (bytes) of ``lake``."""
    import pyarrow.parquet as pq

    from pipeline.stages.usage import BUCKETS, CALL_ROWS, PRICED_CALLS

    derived = Path(lake.root) / "derived"
    files = sorted(path for name in (CALL_ROWS, PRICED_CALLS, BUCKETS)
                   for path in (derived / name).glob("*.parquet"))
    tables = {str(path.relative_to(derived)): pq.read_table(path) for path in files}
    return {**tables, **{path.name: path.read_bytes() for path in (derived / SUMMARY).glob("*.json")}}


def _assert_same_usage(one: dict, other: dict) -> None:
    assert sorted(one) == sorted(other)
    for name, table in other.items():
        assert one[name] == table if name.endswith(".json") else one[name].equals(table), name


def test_a_partial_refresh_drops_the_rows_of_a_source_gone_from_the_lake_as_a_full_refresh_does(tmp_path):
    """A session whose file left the lake without being named (its rows found stale among
    the stored ones) is rewritten by a refresh of another session: the same tables as a
    full refresh, without its calls."""
    import pyarrow.parquet as pq

    from pipeline.stages.usage import CALL_ROWS

    archive = tmp_path / "archive"
    write_demo_archive(archive, size_bytes=2 * 1024 * 1024, seed=5)
    lake = Lake(tmp_path / "lake")
    ingest([archive], lake=lake, workers=1)
    _refreshed(lake)

    def sessions() -> set[str]:
        return {sid for path in (Path(lake.root) / "derived" / CALL_ROWS).glob("*.parquet")
                for sid in pq.read_table(path, columns=["session_id"]).column(0).to_pylist()}

    gone = max((p for p in archive.rglob("*.jsonl") if "/claude/" in str(p) and "agent-" not in p.name
                and p.stem in sessions()), key=lambda p: p.stat().st_size)
    gone.unlink()
    extra = ClaudeTranscript("sess-appended", start="2026-11-03T09:00:00", cwd="/home/me/extra")
    extra.user("go")
    extra.say("a", usage={"input_tokens": 250_000, "output_tokens": 900})
    extra.write(archive)
    ingest([archive], lake=lake, workers=1)
    partial = refresh_usage(lake, sessions=["sess-appended"])
    assert gone.stem not in sessions() and "sess-appended" in sessions()
    after_partial = _stored_usage(lake)
    full = refresh_usage(lake)
    assert full.rows == partial.rows
    _assert_same_usage(after_partial, _stored_usage(lake))


def test_a_partial_refresh_after_an_append_stores_exactly_what_a_full_refresh_stores(tmp_path):
    from pipeline.stages.usage import CALL_ROWS

    write_demo_archive(tmp_path / "archive", size_bytes=2 * 1024 * 1024, seed=5)
    lake = Lake(tmp_path / "lake")
    ingest([tmp_path / "archive"], lake=lake, workers=1)
    _refreshed(lake)
    extra = ClaudeTranscript("sess-appended", start="2026-11-03T09:00:00", cwd="/home/me/extra")
    extra.user("go")
    extra.say("a", usage={"input_tokens": 250_000, "output_tokens": 900, "cache_read_input_tokens": 5_000})
    extra.write(tmp_path / "archive")
    ingest([tmp_path / "archive"], lake=lake, workers=1)
    partial = refresh_usage(lake, sessions=["sess-appended"])
    assert partial.sessions == 1

    after_partial = _stored_usage(lake)
    full = refresh_usage(lake)
    assert (full.sessions, full.rows) == (None, partial.rows)
    after_full = _stored_usage(lake)
    assert sum(name.startswith(f"{CALL_ROWS}/all.b") for name in after_full) == 16
    _assert_same_usage(after_partial, after_full)
    day = usage_report(lake, period="day", tz="UTC", since="2026-11-03", until="2026-11-03",
                       project="extra").to_dict()
    assert (day["totals"]["input_tokens"], day["totals"]["cost_usd"]) == (
        250_000, (200_000 * 3 + 50_000 * 6 + 900 * 15 + 5_000 * 0.3) / 1e6)
