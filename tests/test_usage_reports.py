"""Usage reports as ccusage users know them: one call counted once across the lake (resumed
copies), materialised usage, weekly and 5-hour blocks, breakdowns, order/limit, the compact
layout, config prices, 1-hour cache writes, recorded vs computed cost, and where transcripts
live. Expected figures are worked out here from the raw JSON."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from click.testing import CliRunner
from rich.console import Console

from pipeline.reports import render
from pipeline.cli import cli
from pipeline.core.config import config_from_dict
from pipeline.core.errors import ConfigError
from pipeline.stages.ingest import ingest
from pipeline.core.locations import discover_locations
from pipeline.reports.prices import reference_cost
from pipeline.stages.summarize import summarize
from pipeline.stages.usage import (BurnRate, Projection, blocks_report, refresh_usage, table_rows,
                                   usage_report)
from tests.helpers.lake import REAL, claude_usage_calls, ingest_paths, rows
from tests.test_recover import ClaudeTranscript

CLAUDE = REAL / "claude_code"
SAMPLE = CLAUDE / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
RESUMED_ID = "9d1e0c55-0000-4000-8000-000000000001"


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path, objects) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objects),
                    encoding="utf-8")


def _cost(call: dict, one_hour: int = 0) -> Decimal:
    u = call["usage"]
    when = datetime.fromisoformat(call["ts"].replace("Z", "+00:00"))
    return reference_cost(call["model"], when, input_tokens=u["input_tokens"],
                          output_tokens=u["output_tokens"],
                          cache_write_tokens=u["cache_creation_input_tokens"],
                          cache_read_tokens=u["cache_read_input_tokens"],
                          cache_write_1h_tokens=one_hour)


def _per_day(calls) -> dict[str, dict]:
    out: dict[str, dict] = defaultdict(lambda: defaultdict(int))
    cost: dict[str, Decimal] = defaultdict(Decimal)
    for call in calls.values():
        u, day = call["usage"], call["ts"][:10]
        out[day]["input_tokens"] += u["input_tokens"]
        out[day]["output_tokens"] += u["output_tokens"]
        out[day]["cache_write_tokens"] += u["cache_creation_input_tokens"]
        out[day]["cache_read_tokens"] += u["cache_read_input_tokens"]
        out[day]["api_calls"] += 1
        cost[day] += _cost(call)
    return {day: {**values, "cost_usd": float(cost[day].quantize(Decimal("0.000001")))}
            for day, values in out.items()}


def _report_days(report: dict) -> dict[str, dict]:
    keys = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens",
            "api_calls", "cost_usd")
    return {row["date"]: {k: row[k] for k in keys} for row in report["rows"]}


def _resumed_archive(tmp_path):
    """The real sample plus a resumed session's file: the sample's lines copied (same
    message.id/requestId and times, the new sessionId), then one new call of its own."""
    archive = tmp_path / "archive" / "projects" / "sample"
    archive.mkdir(parents=True)
    shutil.copy2(SAMPLE, archive / SAMPLE.name)
    copied = [dict(obj, sessionId=RESUMED_ID) for obj in _lines(SAMPLE)]
    last = next(o for o in reversed(copied) if o.get("type") == "assistant")
    new_call = json.loads(json.dumps(last))
    new_call.update(uuid="resumed-1", timestamp="2025-09-03T02:10:00.000Z", requestId="req_resumed_1")
    new_call["message"]["id"] = "msg_resumed_1"
    _write(archive / f"{RESUMED_ID}.jsonl", [*copied, new_call])
    return tmp_path / "archive", archive


# ---------------------------------------------------------------------------------------
# 1. usage counted once across the lake
# ---------------------------------------------------------------------------------------
def test_a_resumed_copy_of_a_real_session_leaves_daily_totals_and_cost_unchanged(tmp_path):
    root, folder = _resumed_archive(tmp_path)
    lake, _ = ingest_paths(tmp_path, root)
    files = sorted(folder.glob("*.jsonl"))
    once = claude_usage_calls(files)
    only_sample = claude_usage_calls([SAMPLE])
    # the copy really repeats every call of the sample: counted per file, it would double
    assert set(only_sample) < set(once) and len(once) == len(only_sample) + 1
    expected = _per_day(once)
    assert _report_days(usage_report(lake, period="day", tz="UTC").to_dict()) == expected
    # the same from the materialised rows (the nightly job's refresh), exactly
    refresh_usage(lake)
    materialised = usage_report(lake, period="day", tz="UTC").to_dict()
    assert materialised["usage_source"] == "stored"
    assert _report_days(materialised) == expected
    # the copy changes nothing against the sample alone, except its one new call
    sample_days = _per_day(only_sample)
    new = _per_day({k: v for k, v in once.items() if k not in only_sample})
    assert expected["2025-09-03"]["input_tokens"] == (sample_days["2025-09-03"]["input_tokens"]
                                                     + new["2025-09-03"]["input_tokens"])


def test_copied_calls_stay_with_the_first_session_by_time_then_file_path_and_sessions_stay_whole(tmp_path):
    root, folder = _resumed_archive(tmp_path)
    lake, _ = ingest_paths(tmp_path, root)
    refresh_usage(lake)
    report = usage_report(lake, period="session", tz="UTC").to_dict()
    by_id = {row["session_id"]: row for row in report["rows"]}
    sample = claude_usage_calls([SAMPLE])
    # the copies carry the original times, and so does the resumed file's first call: the
    # file path decides, as ccusage 20 orders files ("1af7..." before "9d1e...")
    assert by_id[SAMPLE.stem]["api_calls"] == len(sample)
    assert by_id[SAMPLE.stem]["output_tokens"] == sum(c["usage"]["output_tokens"] for c in sample.values())
    assert by_id[RESUMED_ID]["api_calls"] == 1   # only its own new call
    # the transcripts are untouched: both sessions keep every message row
    counts = dict(rows(lake, "SELECT session_id, n_messages FROM sessions ORDER BY 1"))
    assert counts[RESUMED_ID] == counts[SAMPLE.stem] + 1


def test_a_gemini_copy_with_the_same_message_ids_is_counted_once(tmp_path):
    path = REAL / "gemini" / "gemini_session.json"
    archive = tmp_path / "archive"
    (archive / "a" / "chats").mkdir(parents=True)
    (archive / "b" / "chats").mkdir(parents=True)
    shutil.copy2(path, archive / "a" / "chats" / path.name)
    copy = json.loads(path.read_text(encoding="utf-8"))
    copy["sessionId"] = "11111111-2222-4333-8444-555555555555"
    (archive / "b" / "chats" / path.name).write_text(json.dumps(copy), encoding="utf-8")
    lake, _ = ingest_paths(tmp_path, archive)
    tokens = [m["tokens"] for m in copy["messages"] if m.get("tokens")]
    totals = usage_report(lake, period="day", tz="UTC").to_dict()["totals"]
    assert (totals["api_calls"], totals["total_tokens"]) == (len(tokens), sum(t["total"] for t in tokens))
    assert rows(lake, "SELECT count(*) FROM sessions WHERE format = 'gemini_cli'") == [(2,)]


# ---------------------------------------------------------------------------------------
# 2. materialised, incremental usage
# ---------------------------------------------------------------------------------------
def test_refreshing_only_the_changed_session_gives_what_a_full_computation_gives(tmp_path):
    archive = tmp_path / "archive"
    a = ClaudeTranscript("sess-a", start="2025-12-09T10:00:00")
    a.user("go").say("one", usage={"input_tokens": 100, "output_tokens": 10})
    b = ClaudeTranscript("sess-b", start="2025-12-10T10:00:00")
    b.user("go").say("two", usage={"input_tokens": 200, "output_tokens": 20})
    a.write(archive)
    b.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    first = refresh_usage(lake)
    assert (first.sessions, first.rows) == (None, 2)
    b.say("three", usage={"input_tokens": 300, "output_tokens": 30})
    b.write(archive)
    ingest([archive], lake=lake, workers=1)
    # sources changed since the refresh: the report does not trust the stored rows
    stale = usage_report(lake, period="session", tz="UTC").to_dict()
    assert stale["usage_source"] == "messages"
    refreshed = refresh_usage(lake, sessions=["sess-b"])
    assert (refreshed.sessions, refreshed.rows) == (1, 3)
    current = usage_report(lake, period="session", tz="UTC").to_dict()
    assert current["usage_source"] == "stored"
    strip = lambda d: {k: v for k, v in d.items() if k != "usage_source"}  # noqa: E731
    assert strip(current) == strip(stale)
    assert [(r["session_id"], r["input_tokens"]) for r in current["rows"]] == [("sess-a", 100), ("sess-b", 500)]
    # refreshing a session of a current lake keeps every other session's rows as stored
    again = refresh_usage(lake, sessions=["sess-a"])
    assert (again.sessions, again.rows) == (1, 3)
    assert strip(usage_report(lake, period="session", tz="UTC").to_dict()) == strip(current)


def test_stored_15_minute_sums_give_every_time_zone_the_same_days_as_the_calls(tmp_path):
    # 18:14 and 18:16 UTC fall on both sides of midnight in Kathmandu (+05:45)
    lake = _timed_lake(tmp_path, ["2025-12-09T18:14:00", "2025-12-09T18:16:00", "2025-12-09T18:29:59",
                                  "2025-12-10T23:59:00", "2025-12-11T00:01:00"])
    zones = ("Asia/Kathmandu", "Asia/Kolkata", "America/St_Johns", "UTC")
    computed = {(z, p): usage_report(lake, period=p, tz=z).to_dict() for z in zones for p in ("day", "session")}
    refresh_usage(lake)
    for (zone, period), expected in computed.items():
        stored = usage_report(lake, period=period, tz=zone).to_dict()
        assert (stored.pop("usage_source"), expected.pop("usage_source")) == ("stored", "messages")
        assert stored == expected
    kathmandu = computed[("Asia/Kathmandu", "day")]
    assert [(r["date"], r["api_calls"]) for r in kathmandu["rows"]] == [
        ("2025-12-09", 1), ("2025-12-10", 2), ("2025-12-11", 2)]


def test_a_report_on_a_refreshed_lake_imports_neither_pyarrow_nor_rich(tmp_path):
    lake, _ = ingest_paths(tmp_path, CLAUDE)
    summarize(lake, tz="UTC")
    refresh_usage(lake)
    probe = ("import sys\nfrom click.testing import CliRunner\nfrom pipeline.cli import cli\n"
             f"res = CliRunner().invoke(cli, ['--lake', {str(lake.root)!r}, 'report', 'daily', "
             "'--json', '--tz', 'UTC'], catch_exceptions=False)\n"
             "assert res.exit_code == 0, res.output\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & "
             "{'pyarrow', 'rich', 'polars', 'genai_prices', 'numpy'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    version = subprocess.run([sys.executable, "-c", "import sys\nfrom pipeline.cli import cli\n"
                              "print(sorted({m.split('.')[0] for m in sys.modules} & "
                              "{'duckdb', 'pyarrow', 'rich', 'polars'}))"],
                             capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------
# 3. the reports
# ---------------------------------------------------------------------------------------
def _timed_lake(tmp_path, times: list[str], *, extra=None):
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-blocks", start=times[0])
    t.user("go", at=times[0])
    for at in times:
        t.say("x", at=at, usage={"input_tokens": 1_000, "output_tokens": 100})
    t.write(archive)
    if extra:
        extra(archive)
    return ingest_paths(tmp_path, archive)[0]


def test_blocks_start_on_the_hour_span_midnight_end_after_five_hours_and_gaps_are_shown(tmp_path):
    lake = _timed_lake(tmp_path, ["2025-12-09T22:10:00", "2025-12-09T23:50:00",
                                  "2025-12-10T02:59:00",   # still in the block of 22:00
                                  "2025-12-10T03:05:00",   # past 03:00: a new block at 03:00
                                  "2025-12-10T12:00:00"])  # 8h55 later: a gap first
    now = datetime(2025, 12, 11, 9, 0, tzinfo=timezone.utc)
    report = blocks_report(lake, tz="UTC", now=now).to_dict()
    got = [(b["start"], b["end"], b["is_gap"], b["entries"], b["input_tokens"]) for b in report["blocks"]]
    assert got == [
        ("2025-12-09T22:00:00+00:00", "2025-12-10T03:00:00+00:00", False, 3, 3_000),
        ("2025-12-10T03:00:00+00:00", "2025-12-10T08:00:00+00:00", False, 1, 1_000),
        ("2025-12-10T08:05:00+00:00", "2025-12-10T12:00:00+00:00", True, 0, 0),
        ("2025-12-10T12:00:00+00:00", "2025-12-10T17:00:00+00:00", False, 1, 1_000),
    ]
    assert [b["is_active"] for b in report["blocks"]] == [False] * 4
    per_call = reference_cost("claude-sonnet-4-5-20250929", now, input_tokens=1_000, output_tokens=100)
    assert report["blocks"][0]["cost_usd"] == float((per_call * 3).quantize(Decimal("0.000001")))
    # shown in Tokyo, the first block still starts at 22:00 UTC (07:00 local)
    tokyo = blocks_report(lake, tz="Asia/Tokyo", now=now).to_dict()
    assert tokyo["blocks"][0]["start"] == "2025-12-10T07:00:00+09:00"
    assert [b.start for b in blocks_report(lake, tz="UTC", now=now, since="2025-12-10").blocks] == [
        datetime(2025, 12, 10, 3, tzinfo=timezone.utc), datetime(2025, 12, 10, 8, 5, tzinfo=timezone.utc),
        datetime(2025, 12, 10, 12, tzinfo=timezone.utc)]


def test_the_active_block_has_its_burn_rate_and_projection(tmp_path):
    lake = _timed_lake(tmp_path, ["2025-12-10T12:00:00", "2025-12-10T12:30:00"])
    now = datetime(2025, 12, 10, 13, 0, tzinfo=timezone.utc)
    report = blocks_report(lake, tz="UTC", now=now)
    active = report.active
    assert active is not None and active.start == datetime(2025, 12, 10, 12, tzinfo=timezone.utc)
    total = 2 * 1_100
    cost = reference_cost("claude-sonnet-4-5-20250929", now, input_tokens=1_000, output_tokens=100) * 2
    assert active.burn_rate == BurnRate(
        tokens_per_minute=round(total / 30, 2), input_output_tokens_per_minute=round(total / 30, 2),
        cost_usd_per_hour=float((cost * 2).quantize(Decimal("0.000001"))))
    # 240 minutes left at the burn rate of the last 30: 8 more times the usage so far
    assert active.projection == Projection(
        total_tokens=total * 9, cost_usd=float((cost * 9).quantize(Decimal("0.000001"))),
        remaining_minutes=240)
    [block] = report.to_dict()["blocks"]
    assert (block["burn_rate"], block["projection"]) == (
        {"tokens_per_minute": round(total / 30, 2),
         "input_output_tokens_per_minute": round(total / 30, 2),
         "cost_usd_per_hour": float((cost * 2).quantize(Decimal("0.000001")))},
        {"total_tokens": total * 9, "cost_usd": float((cost * 9).quantize(Decimal("0.000001"))),
         "remaining_minutes": 240})
    later = blocks_report(lake, tz="UTC", now=now + timedelta(hours=5)).to_dict()
    assert [b["is_active"] for b in later["blocks"]] == [False]
    res = CliRunner().invoke(cli, ["--lake", str(lake.root), "report", "blocks", "--active", "--json"],
                             catch_exceptions=False)
    assert res.exit_code == 0 and json.loads(res.output)["blocks"] == []   # today nothing is active


def test_blocks_active_prints_the_burn_rate_and_the_projection_of_the_block_running_now(tmp_path):
    now = datetime.now(timezone.utc).replace(microsecond=0)
    first, last = now - timedelta(minutes=40), now - timedelta(minutes=10)
    lake = _timed_lake(tmp_path, [t.strftime("%Y-%m-%dT%H:%M:%S") for t in (first, last)])
    res = CliRunner().invoke(cli, ["--lake", str(lake.root), "report", "blocks", "--active"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    cost = reference_cost("claude-sonnet-4-5-20250929", now, input_tokens=1_000,
                          output_tokens=100) * 2
    # 2 x 1,100 tokens over the 30 minutes between the first and the last call
    per_hour = float((cost * 2).quantize(Decimal("0.000001")))
    assert f"burn rate: 73 tokens/min, ${per_hour:,.4f}/h" in lines
    [projected] = [line for line in lines if line.startswith("projected at block end: ")]
    assert projected.endswith(" min left)")


def test_weeks_start_on_monday_and_order_and_limit_choose_the_rows(tmp_path):
    lake = _timed_lake(tmp_path, ["2025-12-07T10:00:00",   # Sunday: week of Monday 12-01
                                  "2025-12-08T10:00:00", "2025-12-14T23:00:00",  # Mon, Sun
                                  "2025-12-15T01:00:00"])
    weekly = usage_report(lake, period="week", tz="UTC").to_dict()
    assert [(r["week"], r["api_calls"]) for r in weekly["rows"]] == [
        ("2025-12-01", 1), ("2025-12-08", 2), ("2025-12-15", 1)]
    assert weekly["report"] == "weekly"
    # in Tokyo, Sunday 23:00 UTC is already Monday
    tokyo = usage_report(lake, period="week", tz="Asia/Tokyo").to_dict()
    assert [(r["week"], r["api_calls"]) for r in tokyo["rows"]] == [
        ("2025-12-01", 1), ("2025-12-08", 1), ("2025-12-15", 2)]
    newest = usage_report(lake, period="day", tz="UTC", order="desc", limit=2).to_dict()
    assert [r["date"] for r in newest["rows"]] == ["2025-12-15", "2025-12-14"]
    assert (newest["rows_omitted"], newest["totals"]["api_calls"]) == (2, 2)
    # one session on four days: each day counts it, the total counts it once
    daily = usage_report(lake, period="day", tz="UTC").to_dict()
    assert [r["sessions"] for r in daily["rows"]] == [1, 1, 1, 1] and daily["totals"]["sessions"] == 1
    assert newest["totals"]["sessions"] == 1


def _real_lake(tmp_path):
    lake, _ = ingest_paths(tmp_path, REAL)
    return lake


def test_the_agent_breakdown_splits_the_main_thread_from_each_sub_agent_type(tmp_path):
    lake = _real_lake(tmp_path)
    report = usage_report(lake, period="day", tz="UTC", breakdown="agent").to_dict()
    inline = CLAUDE / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
    calls = claude_usage_calls([inline])
    expected = defaultdict(lambda: [0, 0])
    for call in calls.values():
        # the file's only Task calls start general-purpose sub-agents (inline, 1.0.x)
        name = "general-purpose" if call["sidechain"] else "main"
        expected[name][0] += call["usage"]["input_tokens"]
        expected[name][1] += call["usage"]["output_tokens"]
    day = next(r for r in report["rows"] if r["date"] == "2025-09-07")
    assert {b["agent"]: [b["input_tokens"], b["output_tokens"]] for b in day["breakdown"]} == dict(expected)
    # the 2.0 sub-agent file (agent-0c4c3cf8, a "Warmup" no Task call started) is a sub-agent
    december = next(r for r in report["rows"] if r["date"] == "2025-12-09")
    agent_file = claude_usage_calls([CLAUDE / "claude_agent.jsonl"])
    sub = next(b for b in december["breakdown"] if b["agent"] == "sub-agent")
    assert sub["input_tokens"] == sum(c["usage"]["input_tokens"] for c in agent_file.values())


def test_every_breakdown_sums_to_its_period_and_names_its_groups(tmp_path):
    lake = _real_lake(tmp_path)
    keys = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "api_calls")
    plain = usage_report(lake, period="month", tz="UTC").to_dict()
    for group in ("model", "agent", "project", "format"):
        report = usage_report(lake, period="month", tz="UTC", breakdown=group).to_dict()
        assert report["breakdown"] == group
        for row, base in zip(report["rows"], plain["rows"]):
            for key in keys:
                assert sum(b[key] for b in row["breakdown"]) == row[key] == base[key]
            assert row["sessions"] == base["sessions"] >= max(b["sessions"] for b in row["breakdown"])
    formats = usage_report(lake, period="day", tz="UTC", breakdown="format").to_dict()
    claude_days = {row["date"]: next(b for b in row["breakdown"] if b["format"] == "claude_code")
                   for row in formats["rows"] if any(b["format"] == "claude_code" for b in row["breakdown"])}
    expected = _per_day(claude_usage_calls(sorted(CLAUDE.glob("*.jsonl"))))
    assert {d: {k: b[k] for k in (*keys, "cost_usd")} for d, b in claude_days.items()} == expected
    projects = usage_report(lake, period="session", tz="UTC", breakdown="project").to_dict()
    by_session = {row["session_id"]: [b["project"] for b in row["breakdown"]] for row in projects["rows"]}
    assert by_session["1af7fc5e-8455-4414-9ccd-011d40f70b2a"] == ["/path/to/Demo"]
    assert by_session["django__django-14155@mini_swe_agent"] == ["/testbed"]
    models = usage_report(lake, period="session", tz="UTC", breakdown=True).to_dict()
    assert models["breakdown"] == "model"


def test_the_compact_layout_fits_80_columns_without_wrapping_numbers_dates_or_models(tmp_path):
    lake = _real_lake(tmp_path)
    texts = {}
    for period, breakdown in (("day", None), ("session", None), ("day", "model"), ("month", "agent")):
        report = usage_report(lake, period=period, tz="UTC", breakdown=breakdown)
        columns, table = table_rows(report, compact=True)
        out = io.StringIO()
        Console(file=out, width=80, highlight=False).print(render.usage_table(columns, table, compact=True))
        text = texts[(period, breakdown)] = out.getvalue()
        assert max(len(line) for line in text.splitlines()) <= 80
        for row in report.rows:
            if period == "day" and row.period:
                assert row.period in text
            assert f"{row.figures.input_tokens:,}" in text and f"{row.figures.output_tokens:,}" in text
    # model names whole (one per line, "claude-" and the date dropped); only session ids are
    # shortened, to a prefix `ctxlake recover` accepts
    lines = texts[("day", None)].splitlines()
    for name in ("sonnet-4-5", "gemini-3-pro-preview", "gpt-5.1-codex-max", "deepseek-chat", "gpt-4o"):
        assert any(name in line.split() for line in lines)
    assert "…" not in texts[("day", None)] and "…" not in texts[("day", "model")]
    from pipeline.stages.usage import block_table_rows
    blocks = blocks_report(lake, tz="UTC", now=datetime(2026, 4, 15, 5, tzinfo=timezone.utc))
    out = io.StringIO()
    Console(file=out, width=80, highlight=False).print(
        render.usage_table(*block_table_rows(blocks, compact=True), compact=True, text_columns=3))
    assert max(len(line) for line in out.getvalue().splitlines()) <= 80
    assert "ACTIVE" in out.getvalue() and "2026-04-15 04:00" in out.getvalue()
    res = CliRunner().invoke(cli, ["--lake", str(lake.root), "report", "daily", "--tz", "UTC", "--compact"],
                             catch_exceptions=False)
    table_lines = res.output.split("!:")[0].split("UNPRICED:")[0].splitlines()
    assert res.exit_code == 0 and max(len(line) for line in table_lines) <= 80


# ---------------------------------------------------------------------------------------
# 4. prices users can trust
# ---------------------------------------------------------------------------------------
def test_config_prices_price_an_unknown_model_and_override_a_known_one_with_tiers(tmp_path):
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-custom", start="2025-12-09T10:00:00")
    t.user("go")
    t.say("a", model="acme-model-9", usage={"input_tokens": 1_000, "output_tokens": 100,
                                            "cache_read_input_tokens": 500})
    t.say("b", usage={"input_tokens": 150_000, "output_tokens": 1_000})
    t.say("c", usage={"input_tokens": 250_000, "output_tokens": 1_000})   # above the tier
    t.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    before = usage_report(lake, period="day", tz="UTC", breakdown="model")
    assert dict(before.rows[0].breakdown)["acme-model-9"].cost_usd is None
    config_file = tmp_path / "ctxlake.toml"
    config_file.write_text(
        '[prices."acme-model-9"]\ninput = 2.0\noutput = 8.0\ncache_read = 0.2\n\n'
        '[prices."claude-sonnet-4-5-20250929"]\ninput = 1.0\noutput = 2.0\n'
        '[[prices."claude-sonnet-4-5-20250929".tiers]]\nabove = 200000\ninput = 10.0\n',
        encoding="utf-8")
    from pipeline.core.config import load_config
    report = usage_report(lake, period="day", tz="UTC", breakdown="model", config=load_config(config_file))
    by_model = dict(report.rows[0].breakdown)
    M = Decimal(1_000_000)
    assert by_model["acme-model-9"].cost_usd == (1_000 * Decimal(2) + 100 * Decimal(8) + 500 * Decimal("0.2")) / M
    # 150k input: base tier ($1 in, $2 out); 250k: its first 200k at $1, the 50k above at the
    # tier's $10 (each token kind tiered on its own count, as ccusage does); output keeps $2
    assert by_model["claude-sonnet-4-5-20250929"].cost_usd == (
        150_000 * Decimal(1) + 1_000 * Decimal(2) + 200_000 * Decimal(1) + 50_000 * Decimal(10)
        + 1_000 * Decimal(2)) / M
    assert report.totals.unpriced_models == []
    assert "config prices for acme-model-9, claude-sonnet-4-5-20250929" in report.price_source
    res = CliRunner().invoke(cli, ["--lake", str(lake.root), "report", "daily", "--tz", "UTC",
                                   "--config", str(config_file), "--json"], catch_exceptions=False)
    assert json.loads(res.output)["totals"]["cost_usd"] == float(report.totals.cost_usd)
    with pytest.raises(ConfigError, match=r'prices."m".output: missing'):
        config_from_dict({"prices": {"m": {"input": 1}}})
    with pytest.raises(ConfigError, match=r"tiers\[1\].above: tiers must go up"):
        config_from_dict({"prices": {"m": {"input": 1, "output": 2,
                                           "tiers": [{"above": 10}, {"above": 5}]}}})
    with pytest.raises(ConfigError, match=r"a price must be a number >= 0"):
        config_from_dict({"prices": {"m": {"input": -1, "output": 2}}})


def test_one_hour_cache_writes_pay_the_one_hour_price(tmp_path):
    archive = tmp_path / "archive" / "p"
    objects = _lines(SAMPLE)
    for obj in objects:
        usage = (obj.get("message") or {}).get("usage")
        if obj.get("type") == "assistant" and usage and "cache_creation" in usage:
            usage["cache_creation"]["ephemeral_1h_input_tokens"] = usage["cache_creation_input_tokens"]
            usage["cache_creation"]["ephemeral_5m_input_tokens"] = 0
    _write(archive / SAMPLE.name, objects)
    lake, _ = ingest_paths(tmp_path, archive)
    calls = claude_usage_calls([archive / SAMPLE.name])
    expected = sum(_cost(c, one_hour=c["usage"]["cache_creation_input_tokens"]) for c in calls.values())
    five_minute = sum(_cost(c) for c in calls.values())
    report = usage_report(lake, period="day", tz="UTC")
    assert report.totals.cost_usd == expected and expected > five_minute
    assert report.totals.cache_write_1h_tokens == report.totals.cache_write_tokens > 0


def test_recorded_cost_is_shown_beside_the_computed_one_and_a_difference_over_5_percent_is_flagged(tmp_path):
    archive = tmp_path / "archive"
    for name, factor in (("sess-close", Decimal("1.04")), ("sess-far", Decimal("1.25"))):
        t = ClaudeTranscript(name, start="2025-12-09T10:00:00" if name == "sess-close" else "2025-12-10T10:00:00")
        t.user("go").say("x", usage={"input_tokens": 10_000, "output_tokens": 1_000})
        computed = reference_cost("claude-sonnet-4-5-20250929", None, input_tokens=10_000, output_tokens=1_000)
        for line in t.lines:
            if line["type"] == "assistant":
                line["costUSD"] = float(computed * factor)
        t.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    report = usage_report(lake, period="session", tz="UTC").to_dict()
    by_id = {row["session_id"]: row for row in report["rows"]}
    assert by_id["sess-close"]["recorded_cost_usd"] == round(float(computed * Decimal("1.04")), 6)
    assert (by_id["sess-close"]["cost_difference_pct"], by_id["sess-close"]["cost_mismatch"]) == (4.0, False)
    assert (by_id["sess-far"]["cost_difference_pct"], by_id["sess-far"]["cost_mismatch"]) == (25.0, True)
    assert by_id["sess-far"]["cost_usd"] == float(computed)   # never replaced by the recorded one
    res = CliRunner().invoke(cli, ["--lake", str(lake.root), "report", "session", "--tz", "UTC"],
                             catch_exceptions=False)
    far_line = next(line for line in res.output.splitlines() if line.strip().startswith("sess-far"))
    close_line = next(line for line in res.output.splitlines() if line.strip().startswith("sess-close"))
    assert far_line.rstrip().endswith(" !") and not close_line.rstrip().endswith("!")
    assert "differs from the computed cost by more than 5% (sess-far)" in res.output
    # the real mini-SWE-agent runs: gemini's recorded cost equals ours, DeepSeek's does not
    real = usage_report(_real_lake(tmp_path / "real"), period="session", tz="UTC").to_dict()
    real_by_id = {row["session_id"]: row for row in real["rows"]}
    assert real_by_id["django__django-14155@mini_swe_agent"]["cost_mismatch"] is False
    assert real_by_id["pvlib__pvlib-python-1606@mini_swe_agent"]["cost_mismatch"] is True
    assert real_by_id["pydicom__pydicom-1458@swe_agent"]["cost_difference_pct"] is None   # unpriced model


# ---------------------------------------------------------------------------------------
# 5. where transcripts live
# ---------------------------------------------------------------------------------------
def test_transcript_folders_are_discovered_as_ccusage_discovers_them(tmp_path):
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    (home / ".config" / "claude" / "projects").mkdir(parents=True)
    (home / ".gemini" / "tmp").mkdir(parents=True)
    found = [(l.kind, l.path, l.found, l.origin) for l in discover_locations({}, home)]
    assert found == [
        ("claude_code", str(home / ".config/claude/projects"), True, "default"),
        ("claude_code", str(home / ".claude/projects"), True, "default"),
        ("codex_cli", str(home / ".codex/sessions"), False, "default"),
        ("gemini_cli", str(home / ".gemini/tmp"), True, "default"),
    ]
    one, two = tmp_path / "one", tmp_path / "two"
    (one / "projects").mkdir(parents=True)
    (tmp_path / "codex" / "sessions").mkdir(parents=True)
    env = {"CLAUDE_CONFIG_DIR": f"{one}, {two}", "CODEX_HOME": str(tmp_path / "codex")}
    found = [(l.kind, l.path, l.found, l.origin) for l in discover_locations(env, home)]
    assert found == [
        ("claude_code", str(one / "projects"), True, "CLAUDE_CONFIG_DIR"),
        ("claude_code", str(two / "projects"), False, "CLAUDE_CONFIG_DIR"),
        ("codex_cli", str(tmp_path / "codex/sessions"), True, "CODEX_HOME"),
        ("gemini_cli", str(home / ".gemini/tmp"), True, "default"),
    ]
