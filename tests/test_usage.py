"""Usage/cost reports: totals on the real samples worked out from the raw files, prices from
the genai-prices snapshot (offline), unpriced models, tiers, time zones and filters."""

from __future__ import annotations

import json
import os
import socket
from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from click.testing import CliRunner

from pipeline.reports import prices
from pipeline.cli import cli
from pipeline.core.errors import UsageError
from pipeline.stages.ingest import ingest
from pipeline.stages.summarize import summarize
from pipeline.stages.usage import usage_report
from tests.helpers.lake import REAL, claude_usage_calls, ingest_paths, rows
from tests.test_recover import ClaudeTranscript

CLAUDE = REAL / "claude_code"


def _json(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]




def _reference(model: str, ts: str, inp: int, out: int, write: int, read: int) -> Decimal:
    """genai-prices itself (the independent check of the SQL pricing path), with ccusage's
    long-context rule: each token kind priced on its own count, its first 200k tokens at the
    base rate and the rest at the tier's rate (both rates measured by genai-prices)."""
    from genai_prices import Usage, calc_price
    when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    mapped = prices.resolve_model(model)   # recorded name -> snapshot model (tested below)

    def calc(inp=0, out=0, write=0, read=0) -> Decimal:
        usage = Usage(input_tokens=inp + write + read, output_tokens=out, cache_write_tokens=write,
                      cache_read_tokens=read)
        return calc_price(usage, mapped.priced_as, provider_id=mapped.provider,
                          genai_request_timestamp=when).total_price

    total = Decimal(0)
    for kind, count in (("inp", inp), ("out", out), ("write", write), ("read", read)):
        below, above = min(count, 200_000), max(count - 200_000, 0)
        total += calc(**{kind: below})
        if above:   # the tier's rate: what `above` more tokens add to a call already in the tier
            total += calc(**{"inp": 200_001, kind: above} if kind != "inp" else {"inp": 200_001 + above}) \
                - calc(inp=200_001)
    return total


def _day_json(lake, **options) -> dict:
    return usage_report(lake, period="day", tz="UTC", **options).to_dict()


# ---------------------------------------------------------------------------------------
# Real samples
# ---------------------------------------------------------------------------------------
def test_claude_daily_totals_count_split_lines_once_with_their_final_output_tokens(tmp_path):
    files = sorted(CLAUDE.glob("*.jsonl"))
    lake, _ = ingest_paths(tmp_path, CLAUDE)
    calls = claude_usage_calls(files)
    per_day: dict[str, dict] = defaultdict(lambda: defaultdict(int))
    cost: dict[str, Decimal] = defaultdict(Decimal)
    for call in calls.values():
        u, day = call["usage"], call["ts"][:10]
        per_day[day]["input_tokens"] += u["input_tokens"]
        per_day[day]["output_tokens"] += u["output_tokens"]
        per_day[day]["cache_write_tokens"] += u["cache_creation_input_tokens"]
        per_day[day]["cache_read_tokens"] += u["cache_read_input_tokens"]
        per_day[day]["api_calls"] += 1
        cost[day] += _reference(call["model"], call["ts"], u["input_tokens"], u["output_tokens"],
                                u["cache_creation_input_tokens"], u["cache_read_input_tokens"])
    # the samples really have split lines: more assistant lines than API calls
    assert sum(1 for f in files for o in _json(f) if o["type"] == "assistant") > len(calls)
    report = _day_json(lake)
    got = {row["date"]: {k: row[k] for k in ("input_tokens", "output_tokens", "cache_write_tokens",
                                             "cache_read_tokens", "api_calls")}
           for row in report["rows"]}
    assert got == {day: dict(v) for day, v in per_day.items()}
    assert {row["date"]: row["cost_usd"] for row in report["rows"]} == \
        {day: float(c.quantize(Decimal("0.000001"))) for day, c in cost.items()}
    assert report["unpriced_models"] == []
    assert report["totals"]["total_tokens"] == sum(
        v[k] for v in per_day.values()
        for k in ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens"))


def test_a_hand_worked_claude_session_costs_what_the_list_prices_say(tmp_path):
    lake, _ = ingest_paths(tmp_path, CLAUDE / "claude_session.jsonl")
    calls = claude_usage_calls([CLAUDE / "claude_session.jsonl"])
    totals = defaultdict(int)
    for call in calls.values():
        for key, value in call["usage"].items():
            if isinstance(value, int):
                totals[key] += value
    # claude-sonnet-4-5 list prices: $3 input, $15 output, $3.75 cache write, $0.30 cache read
    # per million tokens; every call is far below the 200k-token tier
    expected = (Decimal(totals["input_tokens"]) * 3 + Decimal(totals["output_tokens"]) * 15
                + Decimal(totals["cache_creation_input_tokens"]) * Decimal("3.75")
                + Decimal(totals["cache_read_input_tokens"]) * Decimal("0.30")) / 1_000_000
    report = usage_report(lake, period="session", tz="UTC")
    assert report.totals.cost_usd == expected


def test_codex_usage_is_the_sum_of_total_token_usage_deltas(tmp_path):
    path = REAL / "codex" / "codex_session.jsonl"
    lake, _ = ingest_paths(tmp_path, path)
    totals = [o["payload"]["info"]["total_token_usage"] for o in _json(path)
              if o["type"] == "event_msg" and o["payload"].get("type") == "token_count"
              and o["payload"].get("info")]
    final = totals[-1]   # running totals never go down in this file: the deltas sum to the last
    assert all(a["total_tokens"] <= b["total_tokens"] for a, b in zip(totals, totals[1:]))
    report = _day_json(lake)
    assert {k: report["totals"][k] for k in ("input_tokens", "cache_read_tokens", "output_tokens",
                                             "cache_write_tokens", "reasoning_tokens")} == {
        "input_tokens": final["input_tokens"] - final["cached_input_tokens"],
        "cache_read_tokens": final["cached_input_tokens"],
        "output_tokens": final["output_tokens"],
        "cache_write_tokens": 0,
        "reasoning_tokens": final["reasoning_output_tokens"]}
    # gpt-5.1-codex-max is priced as gpt-5.1: $1.25 input, $0.125 cached input, $10 output
    expected = (Decimal(final["input_tokens"] - final["cached_input_tokens"]) * Decimal("1.25")
                + Decimal(final["cached_input_tokens"]) * Decimal("0.125")
                + Decimal(final["output_tokens"]) * 10) / 1_000_000
    assert report["totals"]["cost_usd"] == float(expected.quantize(Decimal("0.000001")))


def test_gemini_usage_is_counted_per_message(tmp_path):
    path = REAL / "gemini" / "gemini_session.json"
    lake, _ = ingest_paths(tmp_path, path)
    tokens = [m["tokens"] for m in json.loads(path.read_text(encoding="utf-8"))["messages"]
              if m.get("tokens")]
    report = _day_json(lake)
    assert {k: report["totals"][k] for k in ("input_tokens", "cache_read_tokens", "output_tokens",
                                             "api_calls")} == {
        "input_tokens": sum(t["input"] - t["cached"] + t["tool"] for t in tokens),
        "cache_read_tokens": sum(t["cached"] for t in tokens),
        "output_tokens": sum(t["output"] + t["thoughts"] for t in tokens),
        "api_calls": len(tokens)}
    assert report["totals"]["total_tokens"] == sum(t["total"] for t in tokens)


def test_swe_agent_run_totals_show_their_recorded_cost_and_an_unknown_model_is_unpriced(tmp_path):
    lake, _ = ingest_paths(tmp_path, REAL / "swe_agent")
    report = usage_report(lake, period="session", tz="UTC").to_dict()
    by_id = {row["session_id"]: row for row in report["rows"]}
    for name in ("6e44b9__sweagenttestrepo-1c2844", "pydicom__pydicom-1458"):
        stats = json.loads((REAL / "swe_agent" / f"{name}.traj").read_text(encoding="utf-8"))["info"]["model_stats"]
        row = by_id[name]
        assert (row["input_tokens"], row["output_tokens"], row["recorded_cost_usd"]) == \
            (stats["tokens_sent"], stats["tokens_received"], round(stats["instance_cost"], 6))
    # the 0.x trajectory does not record its model: its cost is unknown, not $0
    assert by_id["pydicom__pydicom-1458"]["cost_usd"] is None
    assert by_id["pydicom__pydicom-1458"]["unpriced_models"] == ["(unknown)"]
    assert report["unpriced_models"] == ["(unknown)"]
    assert report["totals"]["cost_complete"] is False


def test_re_reporting_after_a_re_run_gives_the_same_totals(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    for sub in ("claude_code", "codex", "gemini"):
        for path in (REAL / sub).iterdir():
            (archive / sub).mkdir(exist_ok=True)
            (archive / sub / path.name).write_bytes(path.read_bytes())
    lake, _ = ingest_paths(tmp_path, archive)
    first = {p: usage_report(lake, period=p, tz="UTC").to_dict() for p in ("day", "month", "session")}
    summarize(lake, tz="UTC")
    for path in archive.rglob("*.json*"):      # touched files: the nightly run looks at them again
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10_000_000_000))
    ingest([archive], lake=lake, workers=1)
    summarize(lake, tz="UTC")
    again = {p: usage_report(lake, period=p, tz="UTC").to_dict() for p in ("day", "month", "session")}
    assert again == first


# ---------------------------------------------------------------------------------------
# Built sessions
# ---------------------------------------------------------------------------------------
def _priced_lake(tmp_path):
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-mix", start="2025-12-09T23:30:00", cwd="/home/me/alpha")
    t.user("go")
    t.say("big", usage={"input_tokens": 250_000, "output_tokens": 1_000})          # tier above 200k
    t.say("small", usage={"input_tokens": 1_000, "output_tokens": 100,
                          "cache_creation_input_tokens": 2_000, "cache_read_input_tokens": 4_000})
    t.say("unknown", model="acme-model-9", usage={"input_tokens": 500, "output_tokens": 50})
    t.write(archive)
    other = ClaudeTranscript("sess-beta", start="2025-12-11T12:00:00", cwd="/home/me/beta")
    other.user("hi")
    other.say("hello", usage={"input_tokens": 100, "output_tokens": 10})
    other.write(archive)
    return ingest_paths(tmp_path, archive)[0]


def test_tiered_prices_apply_per_call_and_an_unpriced_model_is_never_zero(tmp_path):
    lake = _priced_lake(tmp_path)
    report = usage_report(lake, period="day", tz="UTC", breakdown=True)
    day = report.rows[0]
    assert day.period == "2025-12-09"
    by_model = dict(day.breakdown)
    # as ccusage prices it: the first 200k input tokens at $3, the 50k above at the tier's $6;
    # the 1,000 output tokens (under 200k) at the base $15
    big = (Decimal(200_000) * 3 + Decimal(50_000) * 6 + Decimal(1_000) * 15) / 10**6
    small = (Decimal(1_000) * 3 + Decimal(100) * 15 + Decimal(2_000) * Decimal("3.75")
             + Decimal(4_000) * Decimal("0.3")) / 10**6
    assert by_model["claude-sonnet-4-5-20250929"].cost_usd == big + small
    assert by_model["acme-model-9"].cost_usd is None
    assert by_model["acme-model-9"].input_tokens == 500
    assert (day.figures.cost_usd, day.figures.unpriced_models) == (big + small, ["acme-model-9"])
    from pipeline.stages.usage import cost_cell, table_rows
    assert cost_cell(by_model["acme-model-9"]) == "UNPRICED"
    assert cost_cell(day.figures) == "$0.9282 + UNPRICED"
    columns, table = table_rows(report)
    assert columns[:2] == ["Date", "Model"] and table[-1][0] == "Total"
    data = report.to_dict()
    assert data["rows"][0]["cost_complete"] is False
    assert data["rows"][0]["breakdown"][0]["model"] == "acme-model-9"
    assert data["rows"][0]["breakdown"][0]["cost_usd"] is None


def test_days_follow_the_time_zone_and_since_until_project_filter(tmp_path):
    lake = _priced_lake(tmp_path)
    assert [r["date"] for r in _day_json(lake)["rows"]] == ["2025-12-09", "2025-12-11"]
    tokyo = usage_report(lake, period="day", tz="Asia/Tokyo").to_dict()
    assert [r["date"] for r in tokyo["rows"]] == ["2025-12-10", "2025-12-11"]
    only = usage_report(lake, period="day", tz="UTC", since="2025-12-10").to_dict()
    assert [r["date"] for r in only["rows"]] == ["2025-12-11"]
    assert only["totals"]["input_tokens"] == 100
    upto = usage_report(lake, period="month", tz="UTC", until="2025-12-09").to_dict()
    assert upto["totals"]["input_tokens"] == 251_500
    beta = usage_report(lake, period="session", tz="UTC", project="beta").to_dict()
    assert [r["session_id"] for r in beta["rows"]] == ["sess-beta"]
    assert beta["rows"][0]["project"] == "/home/me/beta"
    with pytest.raises(UsageError, match="unknown time zone 'Mars/Base'"):
        usage_report(lake, period="day", tz="Mars/Base")
    with pytest.raises(UsageError, match="--since must be a date"):
        usage_report(lake, period="day", tz="UTC", since="yesterday")


def test_the_sql_cost_of_every_call_equals_genai_prices_call_by_call(tmp_path):
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-prices", start="2026-01-04T00:10:00")
    t.user("go")
    cases = [  # model, time (UTC), input, output, cache write, cache read
        ("claude-sonnet-4-5-20250929", "2026-01-04T00:10:00", 150_000, 2_000, 40_000, 10_000),
        ("claude-sonnet-4-5-20250929", "2026-01-04T00:11:00", 150_000, 2_000, 40_000, 10_001),
        ("claude-sonnet-4-5-20250929", "2026-01-04T00:12:00", 1_000, 2_000, 0, 250_000),
        ("deepseek-chat", "2026-01-04T00:20:00", 5_000, 800, 0, 90_000),       # off-peak
        ("deepseek-chat", "2026-01-04T09:00:00", 5_000, 800, 0, 90_000),       # peak
        ("google/gemini-3-pro-preview", "2026-01-04T12:00:00", 100_000, 900, 0, 150_000),
        ("google/gemini-3-pro-preview", "2026-01-06T12:00:00", 10_000, 900, 0, 1_000),
        ("gpt-4o", "2026-01-06T13:00:00", 3_000, 300, 0, 1_024),
        ("gemini-2.5-flash", "2026-01-06T14:00:00", 13_629 - 6_979, 138, 0, 6_979),
    ]
    for model, at, inp, out, write, read in cases:
        t.say("x", model=model, at=at, usage={"input_tokens": inp, "output_tokens": out,
                                              "cache_creation_input_tokens": write,
                                              "cache_read_input_tokens": read})
    t.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    summarize(lake, tz="UTC")   # writes derived/model_prices for the views
    got = rows(lake, "SELECT model, strftime(timezone('UTC', \"timestamp\"), '%Y-%m-%dT%H:%M:%S'), "
                     "cost_usd FROM usage_calls ORDER BY \"timestamp\"")
    expected = [(m, at, _reference(m, at + "Z", i, o, w, r)) for m, at, i, o, w, r in cases]
    assert [(m, at, Decimal(c)) for m, at, c in got] == expected
    # the cases really exercise the tier and the off-peak window: 200,001 input tokens in all
    # cost no tier price (no kind is over 200k: ccusage's rule), 250k cache reads do, on the
    # part above 200k only ($0.30 and $0.60 per million), and off-peak DeepSeek is cheaper
    costs = [c for _, _, c in expected]
    assert costs[1] - costs[0] == Decimal("0.0000003")
    assert costs[2] == (Decimal(1_000) * 3 + Decimal(2_000) * 15 + Decimal(200_000) * Decimal("0.3")
                        + Decimal(50_000) * Decimal("0.6")) / 10**6
    assert costs[4] > costs[3]


def test_claude_fast_mode_calls_are_named_and_priced_as_ccusage_prices_them(tmp_path):
    # usage.speed "fast": Opus 4.6 at 6x (a price the snapshot lacks), Opus 4.8 at the
    # snapshot's fast variant, a model with no fast price at its standard price; each figure
    # is what ccusage 20.0.24 reports for the same line (1,000 tokens of each kind)
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-fast", start="2025-12-09T19:00:00")
    t.user("go")
    calls = [("claude-opus-4-6", "fast"), ("claude-opus-4-6", None), ("claude-opus-4-8", "fast"),
             ("claude-sonnet-4-6", "fast"), ("<synthetic>", "fast")]
    for index, (model, speed) in enumerate(calls):
        usage = {"input_tokens": 1000, "output_tokens": 1000, "cache_creation_input_tokens": 1000,
                 "cache_read_input_tokens": 1000, **({"speed": speed} if speed else {})}
        t.say("x", model=model, at=f"2025-12-09T19:00:{10 + index}", usage=usage)
    t.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    summarize(lake, tz="UTC")
    got = rows(lake, "SELECT model, cost_usd FROM usage_calls ORDER BY \"timestamp\"")
    assert [(m, None if c is None else Decimal(c)) for m, c in got] == [
        ("claude-opus-4-6-fast", Decimal("0.2205")), ("claude-opus-4-6", Decimal("0.03675")),
        ("claude-opus-4-8-fast", Decimal("0.0735")), ("claude-sonnet-4-6-fast", Decimal("0.02205")),
        ("<synthetic>", None)]
    for model, cost in got[:4]:
        assert prices.reference_cost(model, datetime(2025, 12, 9, 19, tzinfo=timezone.utc), input_tokens=1000,
                                     output_tokens=1000, cache_write_tokens=1000,
                                     cache_read_tokens=1000) == Decimal(cost)


def test_recorded_model_names_map_to_the_snapshot_models():
    mapped = {name: (r.provider, r.priced_as) if (r := prices.resolve_model(name)) else None
              for name in ("claude-sonnet-4-5-20250929", "gpt-5.1-codex-max", "gemini-2.5-flash",
                           "deepseek/deepseek-chat", "google/gemini-3-pro-preview", "gpt-4o",
                           "gpt4", "<synthetic>", None, "acme-model-9")}
    assert mapped == {
        "claude-sonnet-4-5-20250929": ("anthropic", "claude-sonnet-4-5"),
        "gpt-5.1-codex-max": ("openai", "gpt-5.1"),
        "gemini-2.5-flash": ("google", "gemini-2.5-flash"),
        "deepseek/deepseek-chat": ("deepseek", "deepseek-chat"),
        "google/gemini-3-pro-preview": ("google", "gemini-3-pro-preview"),
        "gpt-4o": ("openai", "gpt-4o"),
        "gpt4": ("openai", "gpt-4-turbo"),        # SWE-agent's shortcut for gpt-4-1106-preview
        "<synthetic>": None, None: None, "acme-model-9": None}


def test_prices_come_from_the_bundled_snapshot_without_any_network(monkeypatch):
    import genai_prices
    from genai_prices import data_snapshot

    def refuse(*args, **kwargs):
        raise AssertionError("ctxlake tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    prices.resolve_model.cache_clear()
    prices._rows_for.cache_clear()
    table = prices.model_price_table(["claude-sonnet-4-5-20250929", "deepseek-chat"])
    assert table.num_rows == 4 and set(table.column("price_source").to_pylist()) == {prices.PRICE_SOURCE}
    assert prices.PRICE_SOURCE == f"genai-prices {genai_prices.__version__} (bundled snapshot)"
    assert data_snapshot._custom_snapshot is None   # no UpdatePrices was ever started


def test_the_views_hold_the_report_figures_for_sql_users(tmp_path):
    lake = _priced_lake(tmp_path)
    before = rows(lake, "SELECT count(*), count(cost_usd) FROM daily_usage")[0]
    assert before == (3, 0)     # no price table yet: cost unknown (NULL), never 0
    summarize(lake, tz="UTC")
    report = usage_report(lake, period="day", tz="UTC").to_dict()
    priced, unpriced = rows(lake, "SELECT sum(cost_usd), count(*) FILTER (WHERE cost_usd IS NULL) "
                                  "FROM daily_usage")[0]
    assert (float(priced), unpriced) == (report["totals"]["cost_usd"], 1)
    summary = rows(lake, "SELECT session_id, input_tokens, cost_usd, unpriced_models "
                         "FROM session_summary ORDER BY session_id")
    assert [(s, i, u) for s, i, _, u in summary] == [("sess-beta", 100, []),
                                                     ("sess-mix", 251_500, ["acme-model-9"])]


def test_the_report_commands_print_tables_and_json(tmp_path):
    lake = _priced_lake(tmp_path)
    runner = CliRunner()
    base = ["--lake", str(lake.root), "report"]
    res = runner.invoke(cli, [*base, "daily", "--tz", "UTC", "--breakdown"], catch_exceptions=False)
    assert res.exit_code == 0
    assert "UNPRICED" in res.output and "acme-model-9" in res.output and "2025-12-09" in res.output
    res = runner.invoke(cli, [*base, "monthly", "--tz", "UTC", "--json"], catch_exceptions=False)
    data = json.loads(res.output)
    assert (data["report"], [r["month"] for r in data["rows"]]) == ("monthly", ["2025-12"])
    res = runner.invoke(cli, [*base, "session", "--tz", "UTC", "--json"], catch_exceptions=False)
    assert [r["session_id"] for r in json.loads(res.output)["rows"]] == ["sess-mix", "sess-beta"]


def test_usage_calls_keep_exactly_the_usage_the_messages_view_keeps(tmp_path):
    # usage_calls re-applies the messages view's dedup rule to usage rows only (for speed):
    # on every real sample the two must agree session by session
    lake, _ = ingest_paths(tmp_path, REAL)
    from_view = rows(lake, "SELECT session_id, sum(coalesce(input_tokens, 0)), sum(coalesce(output_tokens, 0)), "
                           "sum(coalesce(cache_creation_tokens, 0)), sum(coalesce(cache_read_tokens, 0)) "
                           "FROM messages GROUP BY 1 "
                           "HAVING count(input_tokens) + count(output_tokens) > 0 ORDER BY 1")
    from_calls = rows(lake, "SELECT session_id, sum(input_tokens), sum(output_tokens), sum(cache_write_tokens), "
                            "sum(cache_read_tokens) FROM usage_calls GROUP BY 1 "
                            "HAVING sum(total_tokens) > 0 ORDER BY 1")
    assert from_calls == from_view
    assert len(from_view) >= 9


def test_the_default_time_zone_is_the_machines(monkeypatch):
    from pipeline.stages.usage import resolve_timezone
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert resolve_timezone(None) == "Asia/Tokyo"
    assert resolve_timezone("Europe/Paris") == "Europe/Paris"
    monkeypatch.setenv("TZ", "Not/AZone")
    assert resolve_timezone(None) != "Not/AZone"


def test_the_priced_calls_and_buckets_do_not_depend_on_the_order_of_the_call_rows(tmp_path):
    import random

    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.stages.usage import CALL_ROWS, CALL_ROWS_ORDER, price_call_rows, refresh_usage

    lake, _ = ingest_paths(tmp_path, REAL)
    refresh_usage(lake)
    stored = pa.concat_tables([pq.read_table(p) for p in
                               sorted((lake.derived_dir / CALL_ROWS).glob("*.parquet"))])
    assert stored.num_rows > 100

    def priced(table):
        with duckdb.connect() as con:
            return price_call_rows(con, table, lake.root)[:2]

    expected = priced(stored.sort_by([(name, "ascending") for name in CALL_ROWS_ORDER]))
    assert expected[0].num_rows > 100 and expected[1].num_rows > 10
    for seed in (1, 2):
        order = list(range(stored.num_rows))
        random.Random(seed).shuffle(order)
        got = priced(stored.take(pa.array(order)))
        assert got[0].equals(expected[0]) and got[1].equals(expected[1])


def test_a_night_reprices_only_the_calls_its_sessions_share_and_stores_what_pricing_all_gives(tmp_path):
    """A night's usage stage keeps the stored priced calls outside its sessions and their
    call keys: a copy of a session (a resumed session: the same calls under another id), then
    the original gone, the copy's calls grown (it wins them), the copy gone, an unrelated
    session changed; each time what pricing every row gives, and only the sessions that
    hold a changed key are redone. Stored rows that do not match are priced whole."""
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipeline.core.lake import rows_of_sessions
    from pipeline.stages.usage import CALL_ROWS, PricedReuse, price_call_rows, refresh_usage

    lake, _ = ingest_paths(tmp_path, REAL)
    refresh_usage(lake)
    rows = pa.concat_tables([pq.read_table(p) for p in sorted((lake.derived_dir / CALL_ROWS).glob("*.parquet"))])
    counts = rows.filter(pc.is_valid(rows.column("call_key"))).group_by("session_id").aggregate([("seq", "count")])
    original = counts.sort_by([("seq_count", "descending"), ("session_id", "ascending")])["session_id"][0].as_py()
    other = sorted(set(rows.column("session_id").to_pylist()) - {original})[0]

    def replaced(table, session, column, values):
        mine = rows_of_sessions(table, {session})
        return pa.concat_tables([rows_of_sessions(table, {session}, keep=False),
                                 mine.set_column(mine.schema.get_field_index(column), column, values(mine))])

    def priced(table, reuse=None):
        with duckdb.connect() as con:
            return price_call_rows(con, table, lake.root, reuse=reuse)

    def night(before, after, changed):
        """Price ``after`` from ``before``'s stored priced calls, as a night changing
        ``changed`` does; compare with pricing every row."""
        keys = pa.concat_tables([rows_of_sessions(before, changed), rows_of_sessions(after, changed)])
        reuse = PricedReuse(*priced(before)[:2], frozenset(changed),
                            pc.unique(keys.column("call_key").drop_null()))
        got, expected = priced(after, reuse), priced(after)
        assert expected[2] is None and got[1].equals(expected[1])
        assert got[0].equals(rows_of_sessions(expected[0], got[2]))
        return got[2]

    copy = replaced(rows_of_sessions(rows, {original}), original, "session_id",
                    lambda mine: pa.array(["copy"] * mine.num_rows))
    copy = copy.set_column(copy.schema.get_field_index("source_id"), "source_id",
                           pa.array(["copy-source"] * copy.num_rows))
    both = pa.concat_tables([rows, copy])
    grown = replaced(both, "copy", "output_tokens", lambda mine: pc.add(mine.column("output_tokens"), 1000))
    assert night(rows, both, {"copy"}) == {"copy", original}
    assert night(both, rows_of_sessions(both, {original}, keep=False), {original}) == {"copy", original}
    assert night(both, grown, {"copy"}) == {"copy", original}
    assert night(both, rows, {"copy"}) == {"copy", original}
    assert night(both, replaced(both, other, "input_tokens", lambda mine: pc.add(mine.column("input_tokens"), 7)),
                 {other}) == {other}
    # stored priced calls that miss a call of an unchanged session: priced whole
    stored, buckets, _ = priced(rows)
    missing = stored.filter(pc.not_equal(stored.column("session_id"), other))["session_id"][0].as_py()
    stale = PricedReuse(rows_of_sessions(stored, {missing}, keep=False), buckets, frozenset({other}),
                        pa.array([], pa.string()))
    got, expected = priced(rows, stale), priced(rows)
    assert got[2] is None and got[0].equals(expected[0]) and got[1].equals(expected[1])
