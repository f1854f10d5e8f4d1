"""Usage figures against ccusage 20.0.24: exactly the same tokens, the same cost to the cent.

Two kinds of tests:
- recomputed from the raw JSON in Python (always run): Gemini calls that a ``$rewindTo``
  dropped from the conversation are counted (ccusage counts every ``gemini`` line, the last
  definition of each message id), Claude long-context calls are priced per token kind;
- ccusage itself (skipped when it is not installed: ``make test`` installs it from npm into
  ``.cache/ccusage`` and sets ``CTXLAKE_CCUSAGE`` to its binary) on the real samples, hand-made
  long-context calls and a demo archive, day by day for Claude, Codex and Gemini; and on a
  Claude archive week by week, month by month, block by block and session by session.

Known, documented differences (not failures):
- a model without a price costs $0 in ccusage; ctxlake shows it UNPRICED (``cost_usd`` null,
  the model named in ``unpriced_models``), never $0. Compared as 0.
- ccusage's Gemini ``outputTokens`` leaves the thinking tokens out (it prices them as output);
  ctxlake's ``output_tokens`` include them (``reasoning_tokens`` says how many), as both count
  Codex output. Compared as ``output_tokens - reasoning_tokens``.
- ccusage counts a Gemini message again when the same message (same id) is in two files (a
  legacy ``session-X.json`` beside its migrated ``session-X.jsonl``, a copied session);
  ctxlake counts it once (:test:`test_a_gemini_message_in_two_files_is_counted_once_where_ccusage_counts_it_twice`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import defaultdict
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from pipeline.core import sqlfiles
from pipeline.reports import prices
from pipeline.demo.archive import write_demo_archive
from pipeline.stages.ingest import ingest
from pipeline.core.lake import Lake
from pipeline.stages.summarize import summarize
from pipeline.stages.usage import refresh_usage, usage_report
from tests.helpers.lake import REAL
from tests.test_recover import ClaudeTranscript

AGENTS = {"claude": "claude_code", "codex": "codex_cli", "gemini": "gemini_cli"}


def _ccusage() -> Path | None:
    for candidate in (os.environ.get("CTXLAKE_CCUSAGE"), "/tmp/ccu15/node_modules/.bin/ccusage",
                      shutil.which("ccusage")):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


def _ccusage_json(binary: Path, archive: Path, report: str, *options: str, agent: str = "claude",
                  home: Path | None = None) -> dict:
    env = dict(os.environ, CLAUDE_CONFIG_DIR=str(archive / "claude"), CODEX_HOME=str(archive / "codex"),
               TZ="UTC")
    if home is not None:   # Gemini's folder is ~/.gemini
        home.mkdir(parents=True, exist_ok=True)
        if not (home / ".gemini").exists():
            (home / ".gemini").symlink_to(archive / "gemini")
        env["HOME"] = str(home)
    return json.loads(subprocess.run([str(binary), agent, report, "--offline", "--json",
                                      "--timezone", "UTC", *options], env=env, check=True,
                                     capture_output=True, text=True).stdout)


def _ccusage_days(binary: Path, archive: Path, home: Path, agent: str) -> dict[str, dict]:
    return {row["date"]: row for row in
            _ccusage_json(binary, archive, "daily", agent=agent, home=home)["daily"]}


def _session_paths(lake: Lake) -> dict[str, str]:
    """A source file of each session."""
    with lake.connect() as con:
        return dict(con.execute("SELECT DISTINCT session_id, first(path) FROM session_info "
                                "JOIN sources USING (source_id) GROUP BY ALL").fetchall())


def _our_days(lake: Lake) -> dict[tuple[str, str], dict]:
    report = usage_report(lake, period="day", tz="UTC", breakdown="format").to_dict()
    return {(group["format"], row["date"]): group for row in report["rows"] for group in row["breakdown"]}


def _layout(root: Path) -> Path:
    """The real Claude, Codex and Gemini samples where ccusage looks for them."""
    archive = root / "archive"
    claude = archive / "claude" / "projects" / "real"
    codex = archive / "codex" / "sessions" / "2025" / "11" / "20"
    gemini = archive / "gemini" / "tmp" / "0123abcd" / "chats"
    for folder, files in ((claude, (REAL / "claude_code").glob("*.jsonl")),
                          (codex, (REAL / "codex").glob("*.jsonl")),
                          (gemini, (REAL / "gemini").glob("*.json"))):
        folder.mkdir(parents=True)
        for path in files:
            shutil.copy(path, folder / path.name)
    return archive


def _long_context_session(archive: Path) -> None:
    """Claude calls with token kinds over 200k (the tiered part) and 1-hour cache writes."""
    t = ClaudeTranscript("sess-long", start="2026-02-03T10:00:00", cwd="/home/me/long")
    t.user("go")
    t.say("a", usage={"input_tokens": 5_000, "output_tokens": 2_000, "cache_read_input_tokens": 420_000,
                      "cache_creation_input_tokens": 30_000})
    t.say("b", usage={"input_tokens": 260_000, "output_tokens": 1_200, "cache_creation_input_tokens": 210_000,
                      "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 210_000}})
    t.say("c", usage={"input_tokens": 100, "output_tokens": 50, "cache_read_input_tokens": 199_000})
    path = t.write(archive / "claude" / "projects" / "long")
    # compact JSON, as Claude Code writes it (ccusage skips lines written with ", " and ": ")
    _write_compact(path, _read_lines(path))


def _lake(root: Path, archive: Path) -> Lake:
    lake = Lake(root / "lake")
    ingest([archive], lake=lake, workers=1)
    summarize(lake, tz="UTC")
    refresh_usage(lake)
    return lake


# ---------------------------------------------------------------------------------------
# Recomputed from the raw JSON
# ---------------------------------------------------------------------------------------
def _gemini_raw_days(folder: Path) -> dict[str, list[int]]:
    """Per day: [input - cached + tool, cached, output + thoughts, calls] of every gemini
    message of the JSONL recordings, the last definition of each id per file, rewound or not."""
    days: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for path in sorted(folder.rglob("*.jsonl")):
        last: dict[str, dict] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("type") == "gemini" and isinstance(obj.get("tokens"), dict):
                last[obj["id"]] = obj
        for msg in last.values():
            tokens, day = msg["tokens"], days[msg["timestamp"][:10]]
            day[0] += tokens.get("input", 0) - tokens.get("cached", 0) + tokens.get("tool", 0)
            day[1] += tokens.get("cached", 0)
            day[2] += tokens.get("output", 0) + tokens.get("thoughts", 0)
            day[3] += 1
    for path in sorted(folder.rglob("*.json")):   # legacy sessions (no rewinds)
        if path.with_suffix(".jsonl").exists():
            continue
        for msg in json.loads(path.read_text(encoding="utf-8")).get("messages", []):
            if msg.get("type") == "gemini" and isinstance(msg.get("tokens"), dict):
                tokens, day = msg["tokens"], days[msg["timestamp"][:10]]
                day[0] += tokens.get("input", 0) - tokens.get("cached", 0) + tokens.get("tool", 0)
                day[1] += tokens.get("cached", 0)
                day[2] += tokens.get("output", 0) + tokens.get("thoughts", 0)
                day[3] += 1
    return dict(days)


def test_gemini_daily_usage_counts_the_rewound_calls_as_the_raw_json_records_them(tmp_path):
    write_demo_archive(tmp_path / "archive", size_bytes=3 * 1024 * 1024, seed=11)
    lake = _lake(tmp_path, tmp_path / "archive")
    expected = _gemini_raw_days(tmp_path / "archive" / "gemini")
    ours = {day: [g["input_tokens"], g["cache_read_tokens"], g["output_tokens"], g["api_calls"]]
            for (fmt, day), g in _our_days(lake).items() if fmt == "gemini_cli"}
    assert ours == expected
    # the archive really has a rewound model reply with usage, and it is in the figures
    from tests.helpers.lake import rows
    rewound = rows(lake, "SELECT count(*), sum(input_tokens) FROM messages WHERE subtype = 'usage_rewound'")
    assert rewound[0][0] >= 1 and rewound[0][1] > 0


def test_a_gemini_message_in_two_files_is_counted_once_where_ccusage_counts_it_twice(tmp_path):
    """A legacy session-X.json and its migrated session-X.jsonl hold the same messages:
    ccusage 20.0.24 reads every .json and .jsonl under ~/.gemini/tmp without any dedup
    (adapter/gemini/loader.rs), so it counts those calls twice; ctxlake reads the pair once."""
    chats = tmp_path / "archive" / "gemini" / "tmp" / "0123abcd" / "chats"
    chats.mkdir(parents=True)
    doc = json.loads((REAL / "gemini" / "gemini_session.json").read_text(encoding="utf-8"))
    stem = "session-2025-11-20T10-00-" + doc["sessionId"][:8]
    (chats / f"{stem}.json").write_text(json.dumps(doc), encoding="utf-8")
    meta = {k: doc[k] for k in ("sessionId", "projectHash", "startTime", "lastUpdated") if k in doc}
    lines = [json.dumps(meta)] + [json.dumps(m) for m in doc["messages"]]
    (chats / f"{stem}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    lake = _lake(tmp_path, tmp_path / "archive")
    once = [m for m in doc["messages"] if m.get("type") == "gemini" and m.get("tokens")]
    totals = usage_report(lake, period="day", tz="UTC").to_dict()["totals"]
    assert totals["api_calls"] == len(once)
    assert totals["cache_read_tokens"] == sum(m["tokens"].get("cached", 0) for m in once)
    binary = _ccusage()
    if binary is not None:   # and ccusage counts each of them twice
        theirs = _ccusage_days(binary, tmp_path / "archive", tmp_path / "home", "gemini")
        assert sum(r["cacheReadTokens"] for r in theirs.values()) == 2 * totals["cache_read_tokens"]


def _ccusage_claude_cost(model: str, when: datetime, usage: dict) -> Decimal:
    """ccusage's cost of one Claude call (cost.rs): each kind tiered on its own count at 200k,
    1-hour cache writes at twice the input rate; the rates measured with genai-prices."""
    def price(**counts) -> Decimal:
        return prices.reference_cost(model, when, **counts)

    def rates(kind: str) -> tuple[Decimal, Decimal]:
        n = 100_000
        base = price(**{kind: n}) / n
        above = (price(input_tokens=200_001 + (n if kind == "input_tokens" else 0),
                       **({kind: n} if kind != "input_tokens" else {}))
                 - price(input_tokens=200_001)) / n
        return base, above

    write_1h = (usage.get("cache_creation") or {}).get("ephemeral_1h_input_tokens", 0)
    counts = {"input_tokens": usage.get("input_tokens", 0), "output_tokens": usage.get("output_tokens", 0),
              "cache_write_tokens": usage.get("cache_creation_input_tokens", 0) - write_1h,
              "cache_read_tokens": usage.get("cache_read_input_tokens", 0)}
    total = Decimal(0)
    for kind, count in counts.items():
        base, above = rates(kind)
        total += min(count, 200_000) * base + max(count - 200_000, 0) * above
    input_base, input_above = rates("input_tokens")
    total += min(write_1h, 200_000) * input_base * 2 + max(write_1h - 200_000, 0) * input_above * 2
    return total


def test_claude_long_context_calls_cost_what_ccusage_charges_recomputed_from_the_raw_json(tmp_path):
    archive = tmp_path / "archive"
    _long_context_session(archive)
    lake = _lake(tmp_path, archive)
    expected = Decimal(0)
    for path in sorted(archive.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            if obj.get("type") == "assistant":
                when = datetime.fromisoformat(obj["timestamp"].replace("Z", "+00:00"))
                expected += _ccusage_claude_cost(obj["message"]["model"], when, obj["message"]["usage"])
    report = usage_report(lake, period="day", tz="UTC")
    assert report.totals.cost_usd == expected
    # the first 200k of the 420k cache reads at $0.30, the rest at $0.60 (Sonnet 4.5)
    assert _ccusage_claude_cost("claude-sonnet-4-5-20250929", datetime.fromisoformat("2026-02-03T10:00:00+00:00"),
                                {"cache_read_input_tokens": 420_000}) == Decimal("0.192")


# ---------------------------------------------------------------------------------------
# ccusage itself
# ---------------------------------------------------------------------------------------
@pytest.fixture
def ccusage() -> Path:
    binary = _ccusage()
    if binary is None:
        pytest.skip("ccusage is not installed (npm install ccusage@20.0.24, or set CTXLAKE_CCUSAGE)")
    return binary


def _assert_days_agree(binary: Path, archive: Path, lake: Lake, home: Path) -> dict[str, int]:
    ours = _our_days(lake)
    compared = {}
    for agent, fmt in AGENTS.items():
        theirs = _ccusage_days(binary, archive, home, agent)
        mine = {day: group for (f, day), group in ours.items() if f == fmt}
        assert sorted(mine) == sorted(theirs), agent
        for day, row in theirs.items():
            group = mine[day]
            output = group["output_tokens"] - (group["reasoning_tokens"] if agent == "gemini" else 0)
            assert (row["inputTokens"], row["outputTokens"], row["cacheCreationTokens"], row["cacheReadTokens"]) == (
                group["input_tokens"], output, group["cache_write_tokens"], group["cache_read_tokens"]), (agent, day)
            cost = row.get("totalCost", row.get("costUSD"))
            # a model without a price is $0 to ccusage, UNPRICED (no cost) to ctxlake
            mine_cost = group["cost_usd"] if group["cost_usd"] is not None else 0.0
            assert round(cost, 2) == round(mine_cost, 2), (agent, day, cost, mine_cost)
            assert abs(cost - mine_cost) < 2e-6, (agent, day)
        compared[agent] = len(theirs)
    return compared


def test_daily_figures_equal_ccusage_on_the_real_samples_and_long_context_calls(tmp_path, ccusage):
    archive = _layout(tmp_path)
    _long_context_session(archive)
    lake = _lake(tmp_path, archive)
    assert _assert_days_agree(ccusage, archive, lake, tmp_path / "home") == {"claude": 4, "codex": 1, "gemini": 1}


def _fast_mode_and_unnamed_codex_model(archive: Path) -> None:
    """Claude fast-mode calls (``usage.speed: fast``; Opus 4.6 over 200k too, before its
    flat price) and a Codex rollout whose token counts come before any turn_context."""
    t = ClaudeTranscript("sess-fast", start="2026-02-10T10:00:00", cwd="/home/me/fast")
    t.user("go")
    for index, (model, inp) in enumerate([("claude-opus-4-6", 1_000), ("claude-opus-4-6", 230_000),
                                          ("claude-opus-4-8", 1_000), ("claude-sonnet-4-6", 1_000),
                                          ("claude-haiku-4-5-20251001", 1_000)]):
        t.say("x", model=model, at=f"2026-02-10T10:00:{10 + index}", usage={
            "input_tokens": inp, "output_tokens": 1_000, "cache_creation_input_tokens": 1_000,
            "cache_read_input_tokens": 1_000, "speed": "fast"})
    path = t.write(archive / "claude" / "projects" / "fast")
    _write_compact(path, _read_lines(path))
    sid = "0198d000-0000-7000-8000-000000000001"
    rollout = archive / "codex" / "sessions" / "2025" / "08" / "09" / f"rollout-2025-08-09T10-00-00-{sid}.jsonl"
    rollout.parent.mkdir(parents=True)

    def line(ltype: str, payload: dict, second: int) -> str:
        return json.dumps({"timestamp": f"2025-08-09T10:00:{second:02d}.000Z", "type": ltype,
                           "payload": payload}, separators=(",", ":")) + "\n"

    total = {"input_tokens": 5_000, "cached_input_tokens": 1_000, "output_tokens": 300,
             "reasoning_output_tokens": 100, "total_tokens": 5_300}
    rollout.write_text("".join([
        line("session_meta", {"id": sid, "timestamp": "2025-08-09T10:00:00.000Z", "cwd": "/w",
                              "originator": "codex_cli_rs", "cli_version": "0.20.0"}, 0),
        line("response_item", {"type": "message", "role": "user",
                               "content": [{"type": "input_text", "text": "hi"}]}, 1),
        line("event_msg", {"type": "token_count", "info": {"total_token_usage": total,
                                                           "last_token_usage": total}}, 2)]),
        encoding="utf-8")


def _calls_without_request_id(archive: Path) -> None:
    """Assistant lines with a message id but no requestId (one day per case): the same id at
    the same time twice (one call, the larger output), at two times (two calls), and a
    resumed session's file copying one of them with its time (one call)."""
    def line(session: str, uuid: str, mid: str, at: str, out: int) -> str:
        return json.dumps({"parentUuid": None, "isSidechain": False, "userType": "external",
                           "cwd": "/p", "sessionId": session, "version": "1.0.30",
                           "type": "assistant", "uuid": uuid, "timestamp": at,
                           "message": {"id": mid, "type": "message", "role": "assistant",
                                       "model": "claude-sonnet-4-20250514",
                                       "content": [{"type": "text", "text": "hi"}],
                                       "usage": {"input_tokens": 1000, "output_tokens": out,
                                                 "cache_creation_input_tokens": 0,
                                                 "cache_read_input_tokens": 0}}},
                          separators=(",", ":")) + "\n"

    first, resumed = "dddddddd-1111-4111-8111-dddddddddddd", "eeeeeeee-1111-4111-8111-eeeeeeeeeeee"
    folder = archive / "claude" / "projects" / "p"
    folder.mkdir(parents=True)
    (folder / f"{first}.jsonl").write_text("".join([
        line(first, "a1", "msg_A", "2026-05-01T10:00:05.000Z", 100),
        line(first, "a2", "msg_A", "2026-05-01T10:00:05.000Z", 300),
        line(first, "b1", "msg_B", "2026-05-02T10:00:05.000Z", 100),
        line(first, "b2", "msg_B", "2026-05-02T10:00:06.000Z", 300),
        line(first, "c1", "msg_C", "2026-05-03T10:00:05.000Z", 200)]), encoding="utf-8")
    (folder / f"{resumed}.jsonl").write_text("".join([
        line(first, "c1", "msg_C", "2026-05-03T10:00:05.000Z", 200),
        line(resumed, "c3", "msg_D", "2026-05-03T11:00:00.000Z", 50)]), encoding="utf-8")


def test_daily_figures_equal_ccusage_on_fast_mode_unnamed_codex_models_and_calls_without_request_ids(
        tmp_path, ccusage):
    archive = tmp_path / "archive"
    _fast_mode_and_unnamed_codex_model(archive)
    _calls_without_request_id(archive)
    (archive / "gemini").mkdir()
    lake = _lake(tmp_path, archive)
    assert _assert_days_agree(ccusage, archive, lake, tmp_path / "home") == {
        "claude": 4, "codex": 1, "gemini": 0}
    by_day = {row["date"]: (row["input_tokens"], row["output_tokens"]) for row in
              usage_report(lake, period="day", tz="UTC").to_dict()["rows"]}
    assert [by_day[f"2026-05-0{d}"] for d in (1, 2, 3)] == [(1000, 300), (2000, 400), (2000, 250)]
    days = usage_report(lake, period="day", tz="UTC", breakdown=True).to_dict()["rows"]
    assert [sorted(m["model"] for m in day["breakdown"]) for day in days
            if day["date"] in ("2025-08-09", "2026-02-10")] == [
        ["gpt-5"], ["claude-haiku-4-5-20251001-fast", "claude-opus-4-6-fast",
                    "claude-opus-4-8-fast", "claude-sonnet-4-6-fast"]]


def test_daily_figures_equal_ccusage_on_a_demo_archive(tmp_path, ccusage):
    write_demo_archive(tmp_path / "archive", size_bytes=3 * 1024 * 1024, seed=11)
    lake = _lake(tmp_path, tmp_path / "archive")
    compared = _assert_days_agree(ccusage, tmp_path / "archive", lake, tmp_path / "home")
    assert all(compared.values())


def _figures(row: dict) -> tuple:
    """Tokens, and the cost (a model without a price is $0 to ccusage)."""
    return (row["input_tokens"], row["output_tokens"], row["cache_write_tokens"],
            row["cache_read_tokens"], row["cost_usd"] or 0.0)


def _their_figures(row: dict) -> tuple:
    tokens = row.get("tokenCounts") or {}
    return (row.get("inputTokens", tokens.get("inputTokens")),
            row.get("outputTokens", tokens.get("outputTokens")),
            row.get("cacheCreationTokens", tokens.get("cacheCreationInputTokens")),
            row.get("cacheReadTokens", tokens.get("cacheReadInputTokens")),
            row.get("totalCost", row.get("costUSD")))


def _assert_same(ours: dict, theirs: dict) -> None:
    """The same keys, the same tokens, the same cost within 2e-6 USD (ctxlake's costs are
    exact decimals shown to the micro-dollar; ccusage sums floats)."""
    assert sorted(ours) == sorted(theirs)
    for key, figures in ours.items():
        assert figures[:4] == theirs[key][:4], key
        assert abs(figures[4] - theirs[key][4]) < 2e-6, (key, figures[4], theirs[key][4])


def _ccusage_session_key(path: str) -> str:
    """ccusage's session of a Claude file: the file's stem for a file of a project folder
    (an old-layout ``agent-<id>.jsonl`` beside its session is a session of its own), the
    session folder for ``<session>/subagents/agent-<id>.jsonl``."""
    parts = Path(path).parts
    relative = parts[parts.index("projects") + 1:]
    if len(relative) >= 4 and relative[-2] == "subagents":
        return relative[-3]
    return Path(relative[-1]).stem if len(relative) == 2 else relative[-2]


def test_weekly_monthly_session_and_block_figures_equal_ccusage_on_a_claude_archive(tmp_path, ccusage):
    """The other period reports, on a Claude-only demo archive (sub-agents of both layouts):
    weeks as ccusage's (Sunday first, ``--start-of-week sunday``), months, 5-hour blocks; and
    sessions once ctxlake's sessions are grouped as ccusage groups files."""
    write_demo_archive(tmp_path / "demo", size_bytes=4 * 1024 * 1024, seed=3)
    archive = tmp_path / "archive"
    shutil.copytree(tmp_path / "demo" / "claude", archive / "claude")
    lake = _lake(tmp_path, archive / "claude")
    weeks = usage_report(lake, period="week", tz="UTC", start_of_week="sunday").to_dict()
    theirs = _ccusage_json(ccusage, archive, "weekly")["weekly"]
    _assert_same({r["week"]: _figures(r) for r in weeks["rows"]},
                 {r["week"]: _their_figures(r) for r in theirs})
    assert len(theirs) >= 3
    months = usage_report(lake, period="month", tz="UTC").to_dict()
    _assert_same({r["month"]: _figures(r) for r in months["rows"]},
                 {r["month"]: _their_figures(r) for r in _ccusage_json(ccusage, archive, "monthly")["monthly"]})
    from pipeline.stages.usage import blocks_report

    ours = [b for b in blocks_report(lake, tz="UTC").to_dict()["blocks"] if not b["is_gap"]]
    blocks = [b for b in _ccusage_json(ccusage, archive, "blocks")["blocks"] if not b["isGap"]]
    _assert_same({datetime.fromisoformat(b["start"]): _figures(b) for b in ours},
                 {datetime.fromisoformat(b["startTime"].replace("Z", "+00:00")): _their_figures(b)
                  for b in blocks})
    assert len(blocks) >= 5
    paths = _session_paths(lake)
    grouped: dict[str, list] = defaultdict(lambda: [0, 0, 0, 0, 0.0])
    for row in usage_report(lake, period="session", tz="UTC").to_dict()["rows"]:
        sums = grouped[_ccusage_session_key(paths[row["session_id"]])]
        for i, value in enumerate(_figures(row)):
            sums[i] += value
    sessions = _ccusage_json(ccusage, archive, "session")["sessions"]
    _assert_same({key: tuple(sums) for key, sums in grouped.items()},
                 {r["sessionId"]: _their_figures(r) for r in sessions})
    # both layouts of sub-agents are in the archive: some are sessions of their own there
    assert any(r["sessionId"].startswith("agent-") for r in sessions)
    assert len(sessions) < len(paths)


def test_codex_and_gemini_session_figures_equal_ccusage_on_a_demo_archive(tmp_path, ccusage):
    """One ccusage session per ctxlake session (ccusage names a Codex session by its file's
    path below ``sessions/``); Gemini output without its thinking tokens, as for the days."""
    write_demo_archive(tmp_path / "archive", size_bytes=3 * 1024 * 1024, seed=11)
    lake = _lake(tmp_path, tmp_path / "archive")
    rows = usage_report(lake, period="session", tz="UTC").to_dict()["rows"]
    paths = _session_paths(lake)
    for agent, fmt in (("codex", "codex_cli"), ("gemini", "gemini_cli")):
        theirs = _ccusage_json(ccusage, tmp_path / "archive", "session", agent=agent,
                               home=tmp_path / "home")["sessions"]
        ours = {}
        for row in rows:
            if row["format"] != fmt:
                continue
            key = row["session_id"]
            if agent == "codex":   # <year>/<month>/<day>/rollout-...: the path below sessions/
                key = paths[key].split("/sessions/", 1)[1].removesuffix(".jsonl")
            output = row["output_tokens"] - (row["reasoning_tokens"] if agent == "gemini" else 0)
            ours[key] = (row["input_tokens"], output, row["cache_write_tokens"],
                         row["cache_read_tokens"], row["cost_usd"] or 0.0)
        _assert_same(ours, {r["sessionId"]: _their_figures(r) for r in theirs})
        assert len(theirs) >= 2, agent


# times a Claude Code line may carry, each on a call of 2**i input tokens: ccusage 20.0.24 dates
# the first six (to the second or millisecond, Z or an offset, on a day of the calendar) and
# leaves the others out of its reports
CLAUDE_TIMES = ["2026-11-01T10:00:00.000Z", "2026-11-02T10:00:00Z", "2026-11-04T10:00:00+02:00",
                "2026-11-05T10:00:00.000-00:00", "2026-11-14T23:30:00-05:00", "2024-02-29T10:00:00Z",
                "2026-11-03T10:00:00.123456Z", "2026-11-06 10:00:00", "2026-11-07T10:00:00",
                "2026-11-08", "2026-11-09t10:00:00z", "not a time", "", "2026-13-45T09:00:00Z",
                "2026-11-31T10:00:00Z", "2026-11-20T24:00:00Z", "2026-11-17T10:00Z",
                "2026-11-19T10:00:00.000Z ", "2026-11-03T10:00:00+0200"]
DATED = 6


def _claude_times_archive(root: Path) -> Path:
    archive = root / "archive"
    t = ClaudeTranscript("sess-times", start="2026-10-31T10:00:00", cwd="/home/me/times")
    t.user("go")
    for index in range(len(CLAUDE_TIMES)):
        t.say("x", model="claude-sonnet-4-20250514", at="2026-10-31T11:00:00",
              usage={"input_tokens": 2 ** index, "output_tokens": 1,
                     "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
    times = iter(CLAUDE_TIMES)
    _edit_replies(t.write(archive / "claude" / "projects" / "times"),
                  lambda obj: obj.update(timestamp=next(times)))
    return archive


def _read_lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write_compact(path: Path, objects) -> None:
    """``objects`` as JSON lines without spaces, as Claude Code, Codex and Gemini CLI write
    them (ccusage reads no line with a space after a colon)."""
    path.write_text("".join(json.dumps(obj, separators=(",", ":")) + "\n" for obj in objects),
                    encoding="utf-8")


def _edit_replies(path: Path, edit) -> None:
    """``edit`` each assistant line of a transcript, in order, and write it back compact."""
    lines = _read_lines(path)
    for obj in lines:
        if obj.get("type") == "assistant":
            edit(obj)
    _write_compact(path, lines)


def _input_days(lake: Lake) -> dict:
    return {row["date"]: row["input_tokens"]
            for row in usage_report(lake, period="day", tz="UTC").to_dict()["rows"]}


def test_a_claude_call_whose_time_is_not_as_claude_code_writes_it_is_a_no_date_row_not_its_neighbours(
        tmp_path):
    lake = _lake(tmp_path, _claude_times_archive(tmp_path))
    undated = sum(2 ** index for index in range(DATED, len(CLAUDE_TIMES)))
    days = {row["date"]: (row["input_tokens"], row["api_calls"])
            for row in usage_report(lake, period="day", tz="UTC").to_dict()["rows"]}
    assert days == {"2024-02-29": (32, 1), "2026-11-01": (1, 1), "2026-11-02": (2, 1),
                    "2026-11-04": (4, 1), "2026-11-05": (8, 1), "2026-11-15": (16, 1),
                    None: (undated, len(CLAUDE_TIMES) - DATED)}
    sessions = {row["session_id"]: row["input_tokens"]
                for row in usage_report(lake, period="session", tz="UTC").to_dict()["rows"]}
    assert sessions == {"sess-times": 2 ** DATED - 1, None: undated}
    # with a date range, as in ccusage, they are out
    ranged = usage_report(lake, period="day", tz="UTC", since=date(2020, 1, 1)).to_dict()
    assert ranged["totals"]["input_tokens"] == 2 ** DATED - 1


def test_claude_calls_are_dated_as_ccusage_dates_them(tmp_path, ccusage):
    archive = _claude_times_archive(tmp_path)
    lake = _lake(tmp_path, archive)
    _assert_input_days_agree(ccusage, archive, lake)
    theirs = {row["sessionId"]: row["inputTokens"]
              for row in _ccusage_json(ccusage, archive, "session")["sessions"]}
    ours = {row["session_id"]: row["input_tokens"]
            for row in usage_report(lake, period="session", tz="UTC").to_dict()["rows"]
            if row["session_id"]}
    assert ours == theirs


def _gemini_times_archive(root: Path) -> Path:
    """The real Gemini session started on 2025-12-01, its second reply timed a day later
    and its third with a time that cannot be read (its thoughts keep theirs)."""
    session, replies = _gemini_real_session()
    session["startTime"] = "2025-12-01T10:00:00.000Z"
    replies[1]["timestamp"] = "2025-12-10T19:51:50.106Z"
    replies[2]["timestamp"] = "not a time"
    return _gemini_archive(root, session)


def _gemini_real_session() -> tuple[dict, list[dict]]:
    """The real Gemini session and its replies that carry tokens."""
    session = json.loads((REAL / "gemini" / "gemini_session.json").read_text(encoding="utf-8"))
    return session, [m for m in session["messages"] if m.get("type") == "gemini" and m.get("tokens")]


def _gemini_archive(root: Path, session: dict) -> Path:
    """An archive whose ~/.gemini holds ``session`` (as Gemini CLI names its file)."""
    archive = root / "archive"
    chats = archive / "gemini" / "tmp" / "0123abcd" / "chats"
    chats.mkdir(parents=True)
    (chats / "session-2025-12-09T19-51-f0a689a6.json").write_text(json.dumps(session, indent=2),
                                                                   encoding="utf-8")
    return archive


def test_a_gemini_call_is_dated_by_its_message_or_else_by_its_sessions_start(tmp_path):
    days = _input_days(_lake(tmp_path, _gemini_times_archive(tmp_path)))
    # the second reply's 355 new input tokens on its own day (not its first thought's), the
    # third's 442 on the session's first day
    assert days == {"2025-12-01": 442, "2025-12-09": 23_099, "2025-12-10": 355}


def _assert_input_days_agree(binary: Path, archive: Path, lake: Lake, **options) -> None:
    """Our daily input tokens are ccusage's, day by day (undated rows left aside)."""
    theirs = {row["date"]: row["inputTokens"]
              for row in _ccusage_json(binary, archive, "daily", **options)["daily"]}
    assert {day: n for day, n in _input_days(lake).items() if day} == theirs


def test_gemini_calls_are_dated_as_ccusage_dates_them(tmp_path, ccusage):
    archive = _gemini_times_archive(tmp_path)
    _assert_input_days_agree(ccusage, archive, _lake(tmp_path, archive), agent="gemini",
                             home=tmp_path / "home")


# the real Gemini session's seven replies, one a day from 2025-12-01, each tokens object made
# hostile in one way ("DROP": the count left out), and the (input, cache read, output) a day
# ccusage 20.0.24 reports for it: a count is a number cut towards zero and at least 0 (else
# 0), and the cached tokens leave the input only when the object adds up
# (total = input + output + thoughts + tool)
GEMINI_TOKENS = [
    ({}, (6650, 6979, 52)),                          # as recorded
    ({"output": -5}, (6219, 5864, 0)),               # 0, and the object no longer adds up
    ({"total": "DROP"}, (6286, 5844, 53)),           # nothing to add up to
    ({"cached": 5836.6}, (566, 5836, 19)),           # cut to 5836; it adds up
    ({"tool": 100}, (21601, 7294, 50)),              # the total leaves it out
    ({"thoughts": "127"}, (6550, 5809, 71)),         # a string: 0
    ({"cached": -5}, (6686, 0, 17)),                 # 0; it adds up
]


def _gemini_tokens_archive(root: Path) -> Path:
    session, replies = _gemini_real_session()
    assert len(replies) == len(GEMINI_TOKENS)
    for day, (reply, (edit, _expected)) in enumerate(zip(replies, GEMINI_TOKENS), start=1):
        reply["timestamp"] = f"2025-12-{day:02d}T10:00:00.000Z"
        for key, value in edit.items():
            if value == "DROP":
                del reply["tokens"][key]
            else:
                reply["tokens"][key] = value
    return _gemini_archive(root, session)


def _gemini_days(lake: Lake) -> dict[str, tuple[int, int, int]]:
    """Per day: input, cache read and output without the thoughts (as ccusage shows them)."""
    return {row["date"]: (row["input_tokens"], row["cache_read_tokens"],
                          row["output_tokens"] - row["reasoning_tokens"])
            for row in usage_report(lake, period="day", tz="UTC").to_dict()["rows"]}


def test_a_hostile_gemini_count_is_read_as_ccusage_reads_it_and_costs_no_session(tmp_path):
    lake = _lake(tmp_path, _gemini_tokens_archive(tmp_path))
    assert _gemini_days(lake) == {f"2025-12-{day:02d}": expected
                                  for day, (_edit, expected) in enumerate(GEMINI_TOKENS, start=1)}
    with lake.connect() as con:
        assert con.execute("SELECT count(*) FROM quarantine").fetchone() == (0,)


def _assert_gemini_days_agree(binary: Path, root: Path, archive: Path) -> None:
    """Our Gemini days (input, cache read, output without the thoughts) are ccusage's."""
    theirs = {row["date"]: (row["inputTokens"], row["cacheReadTokens"], row["outputTokens"])
              for row in _ccusage_json(binary, archive, "daily", agent="gemini",
                                       home=root / "home")["daily"]}
    assert _gemini_days(_lake(root, archive)) == theirs


def test_hostile_gemini_counts_give_ccusage_figures(tmp_path, ccusage):
    _assert_gemini_days_agree(ccusage, tmp_path, _gemini_tokens_archive(tmp_path))


# the real Gemini session's seven replies, one a day from 2025-12-01, each made unreadable
# in one way (None: as recorded; "GARBAGE": the message replaced by a string; "DROP": the key
# left out), and the (input, cache read, output) a day ccusage 20.0.24 reports for it, None
# where it counts nothing: it skips a message that is not an object or has no type, and counts
# every other object of type gemini with a tokens object
GEMINI_MESSAGES = [
    (None, (6650, 6979, 52)),
    ("GARBAGE", None),
    ({"id": "DROP"}, (442, 5844, 53)),
    ({"content": 5}, (566, 5836, 19)),
    ({"toolCalls": {"a": 1}}, (14207, 7294, 50)),
    ({"thoughts": "x"}, (741, 5809, 71)),
    ({"type": "DROP"}, None),
]


def _gemini_messages_archive(root: Path) -> Path:
    session, replies = _gemini_real_session()
    assert len(replies) == len(GEMINI_MESSAGES)
    for day, (reply, (edit, _expected)) in enumerate(zip(replies, GEMINI_MESSAGES), start=1):
        reply["timestamp"] = f"2025-12-{day:02d}T10:00:00.000Z"
        index = session["messages"].index(reply)
        if edit == "GARBAGE":
            session["messages"][index] = "garbage"
        for key, value in (edit if isinstance(edit, dict) else {}).items():
            if value == "DROP":
                del reply[key]
            else:
                reply[key] = value
    return _gemini_archive(root, session)


_ROWS_BY_PATH = ("SELECT json_path, role, kind, text FROM messages "
                 "WHERE subtype IS DISTINCT FROM 'usage_unreadable' ORDER BY json_path, seq")


def test_an_unreadable_gemini_message_costs_that_message_and_its_usage_counts_as_in_ccusage(tmp_path):
    lake = _lake(tmp_path, _gemini_messages_archive(tmp_path))
    assert _gemini_days(lake) == {f"2025-12-{day:02d}": expected
                                  for day, (_edit, expected) in enumerate(GEMINI_MESSAGES, start=1)
                                  if expected is not None}
    with lake.connect() as con:
        # each bad message on its own (line 0: the file's one line is read), the rest of the
        # session read; the accounting of the file holds
        assert con.execute("SELECT line_no, severity, reason FROM quarantine "
                           "ORDER BY reason").fetchall() == [
            (0, "error", "messages[2] is a str, expected a message object"),
            (0, "error", "messages[3] has no string 'id'"),
            (0, "error", "messages[4] (d38b41c7-9101-43ff-aebb-94cafea7c547): content must be a "
                         "string or a list of parts, found int"),
            (0, "error", "messages[6] (0ee64212-920a-47e0-a366-5ace7d8df9d7): 'toolCalls' must be "
                         "a list, found dict"),
            (0, "error", "messages[7] (f81824ae-e215-42fb-898a-e324c8bac796): 'thoughts' must be "
                         "a list, found str"),
            (0, "error", "messages[8] (987ce5b4-fb0f-4d2d-bae7-2a1aa1bf99c0) has no string 'type'"),
        ]
        # the replies among them keep their usage (the one without an id under a stand-in)
        assert con.execute("SELECT api_call_id, input_tokens FROM messages "
                           "WHERE subtype = 'usage_unreadable' ORDER BY 1").fetchall() == [
            ("0ee64212-920a-47e0-a366-5ace7d8df9d7", 14207),
            ("d38b41c7-9101-43ff-aebb-94cafea7c547", 566),
            ("f0a689a6-b0ac-407f-afcc-4fafa9e14e8a/messages/3", 442),
            ("f81824ae-e215-42fb-898a-e324c8bac796", 741),
        ]
        assert con.execute(sqlfiles.load("checks/select_source_accounting_mismatches")).fetchall() == []
        kept = con.execute(_ROWS_BY_PATH).fetchall()
    # every other message of the session is read, as in the session left whole
    session, _replies = _gemini_real_session()
    whole = _lake(tmp_path / "whole", _gemini_archive(tmp_path / "whole", session))
    with whole.connect() as con:
        expected = [row for row in con.execute(_ROWS_BY_PATH).fetchall()
                    if row[0].split("/")[2] not in {"2", "3", "4", "6", "7", "8"}]
    assert kept == expected and len(expected) == 7


def test_unreadable_gemini_messages_give_ccusage_figures(tmp_path, ccusage):
    _assert_gemini_days_agree(ccusage, tmp_path, _gemini_messages_archive(tmp_path))


def _gemini_damaged_facts_archive(root: Path) -> Path:
    """The real Gemini session without its sessionId, its last reply's model null (a reply of
    935 new input, 5,751 cached and 17 output tokens besides thoughts)."""
    session, replies = _gemini_real_session()
    del session["sessionId"]
    replies[-1]["model"] = None
    return _gemini_archive(root, session)


def test_a_gemini_session_without_its_id_is_read_and_a_reply_without_a_model_costs_that_reply(tmp_path):
    lake = _lake(tmp_path, _gemini_damaged_facts_archive(tmp_path))
    assert _gemini_days(lake) == {"2025-12-09": (23896 - 935, 43377 - 5751, 300 - 17)}
    with lake.connect() as con:
        # the file's name stands for the session id, as in ccusage
        assert con.execute("SELECT DISTINCT session_id FROM messages").fetchall() == [
            ("session-2025-12-09T19-51-f0a689a6",)]
        assert con.execute("SELECT line_no, reason FROM quarantine").fetchall() == [
            (0, "messages[8] (987ce5b4-fb0f-4d2d-bae7-2a1aa1bf99c0): model is null, expected a "
                "model name: ccusage reads no usage from such a reply, so it is quarantined so "
                "that it stays out of the usage sums")]
        assert con.execute("SELECT count(*) FROM messages WHERE subtype = 'usage_unreadable'"
                           ).fetchone() == (0,)


def test_a_gemini_session_without_its_id_gives_ccusage_figures(tmp_path, ccusage):
    _assert_gemini_days_agree(ccusage, tmp_path, _gemini_damaged_facts_archive(tmp_path))


def test_a_claude_sonnet_4_call_over_200k_pays_the_long_context_price_as_in_ccusage(tmp_path):
    # the genai-prices snapshot has no long-context tier for Sonnet 4; ccusage charges it as
    # Sonnet 4.5 ($6 per MTok of input above 200k)
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-s4", start="2026-02-03T10:00:00", cwd="/home/me/s4")
    t.user("go")
    t.say("a", model="claude-sonnet-4-20250514", at="2026-02-03T10:00:05",
          usage={"input_tokens": 300_000, "output_tokens": 1})
    t.write(archive / "claude" / "projects" / "s4")
    lake = _lake(tmp_path, archive)
    # 200k at $3, 100k at $6, 1 output token at $15 per million
    assert usage_report(lake, period="day", tz="UTC").totals.cost_usd == Decimal("1.200015")


# usage objects of Claude Code lines, one a day from 2026-10-02: ccusage 20.0.24 counts the
# first two only; ctxlake quarantines each of the others but the empty one (no usage)
CLAUDE_USAGES = [
    {"input_tokens": 100, "output_tokens": 1},
    {"input_tokens": 100, "output_tokens": 1, "server_tool_use": None},
    {"input_tokens": 100.0, "output_tokens": 1},
    {"input_tokens": 100},
    {"input_tokens": None, "output_tokens": 1},
    {"input_tokens": 100, "output_tokens": 1, "cache_read_input_tokens": None},
    {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 10,
     "cache_creation": {"ephemeral_1h_input_tokens": 10.0}},
    {},
]


def _claude_daily_replies_archive(root: Path, name: str, month: str, edits: list) -> Path:
    """A session of one user line then one reply a day from ``<month>-02`` (reply i: 2**i
    input tokens, 1 output token), reply i edited in place by ``edits[i]``."""
    archive = root / "archive"
    t = ClaudeTranscript(f"sess-{name}", start=f"{month}-01T09:00:00", cwd=f"/home/me/{name}")
    t.user("go")
    for index in range(len(edits)):
        t.say("x", model="claude-sonnet-4-20250514", at=f"{month}-{index + 2:02d}T10:00:00",
              usage={"input_tokens": 2 ** index, "output_tokens": 1})
    remaining = iter(edits)
    _edit_replies(t.write(archive / "claude" / "projects" / name), lambda obj: next(remaining)(obj))
    return archive


def _claude_usages_archive(root: Path) -> Path:
    return _claude_daily_replies_archive(
        root, "usages", "2026-10",
        [lambda obj, usage=usage: obj["message"].update(usage=usage) for usage in CLAUDE_USAGES])


def test_a_claude_usage_ccusage_cannot_read_quarantines_its_line_with_why(tmp_path):
    lake = _lake(tmp_path, _claude_usages_archive(tmp_path))
    assert _input_days(lake) == {"2026-10-02": 100, "2026-10-03": 100}
    with lake.connect() as con:
        quarantined = con.execute("SELECT line_no, reason FROM quarantine ORDER BY line_no").fetchall()
    tail = ": the line is quarantined so that it stays out of the usage sums"
    assert quarantined == [
        (4, "message.usage.input_tokens is a number (100.0), expected an integer token count" + tail),
        (5, "message.usage.output_tokens is missing: ccusage reads no usage without it, so the line "
            "is quarantined so that it stays out of the usage sums"),
        (6, "message.usage.input_tokens is null: ccusage reads no usage without it, so the line "
            "is quarantined so that it stays out of the usage sums"),
        (7, "message.usage.cache_read_input_tokens is null (null), expected an integer token count"
            + tail),
        (8, "message.usage.cache_creation.ephemeral_1h_input_tokens is a number (10.0), expected "
            "an integer token count" + tail),
    ]


def test_claude_usages_are_counted_as_ccusage_counts_them(tmp_path, ccusage):
    archive = _claude_usages_archive(tmp_path)
    _assert_input_days_agree(ccusage, archive, _lake(tmp_path, archive))


# edits of a Claude Code reply line, one reply a day from 2026-09-02 with 2**i input tokens:
# ccusage 20.0.24 counts the reply when the third member is True (probed field by field with a
# number, null, "", {}, [], true, "x" and absent); the second: whether ctxlake quarantines it
CLAUDE_LINE_EDITS = [
    ("content a number", True, True, lambda obj: obj["message"].update(content=5)),
    ("a content block a string", True, True, lambda obj: obj["message"].update(content=["oops"])),
    ("uuid a number", True, True, lambda obj: obj.update(uuid=5)),
    ("cwd an array", False, True, lambda obj: obj.update(cwd=[])),
    ("type unknown", False, True, lambda obj: obj.update(type="x")),
    ("type missing", False, True, lambda obj: obj.pop("type")),
    ("role user", False, True, lambda obj: obj["message"].update(role="user")),
    ("cache writes split 7 + 1", False, True,
     lambda obj: obj["message"]["usage"].update(cache_creation_input_tokens=3, cache_creation={
         "ephemeral_5m_input_tokens": 7, "ephemeral_1h_input_tokens": 1})),
    ("sessionId empty", True, False, lambda obj: obj.update(sessionId="")),
    ("version 1.0", True, False, lambda obj: obj.update(version="1.0")),
    ("isSidechain a string", True, False, lambda obj: obj.update(isSidechain="no")),
    ("cwd null", True, False, lambda obj: obj.update(cwd=None)),
    ("costUSD null", True, False, lambda obj: obj.update(costUSD=None)),
    ("requestId a number", True, False, lambda obj: obj.update(requestId=5)),
    ("isApiErrorMessage null", True, False, lambda obj: obj.update(isApiErrorMessage=None)),
    ("message.id null", True, False, lambda obj: obj["message"].update(id=None)),
    ("model empty", True, False, lambda obj: obj["message"].update(model="")),
    ("speed Fast", True, False, lambda obj: obj["message"]["usage"].update(speed="Fast")),
    ("cache writes split a string", True, False,
     lambda obj: obj["message"]["usage"].update(cache_creation="x")),
]


def _claude_line_edits_archive(root: Path) -> Path:
    return _claude_daily_replies_archive(root, "edits", "2026-09",
                                         [edit for *_, edit in CLAUDE_LINE_EDITS])


def test_a_claude_reply_line_counts_its_usage_exactly_when_ccusage_does_quarantined_or_not(tmp_path):
    lake = _lake(tmp_path, _claude_line_edits_archive(tmp_path))
    days = {row["date"]: (row["input_tokens"], row["cache_write_tokens"])
            for row in usage_report(lake, period="day", tz="UTC").to_dict()["rows"]}
    assert days == {f"2026-09-{index + 2:02d}": (2 ** index, 8 if "split 7" in name else 0)
                    for index, (name, _, counted, _) in enumerate(CLAUDE_LINE_EDITS) if counted}
    with lake.connect() as con:
        quarantined = dict(con.execute("SELECT line_no, reason FROM quarantine").fetchall())
        usage_only = con.execute(
            "SELECT line_no, role, kind, subtype, text, input_tokens FROM messages "
            "WHERE subtype = 'usage_unreadable' ORDER BY line_no").fetchall()
    # line 1 is the user's; reply i is line i + 2
    assert sorted(quarantined) == [index + 2 for index, (_, q, _, _) in enumerate(CLAUDE_LINE_EDITS) if q]
    assert quarantined[2] == "message.content must be a string or a list of blocks, found int"
    assert quarantined[3] == "content block 0 is a str, expected an object"
    refusals = {name: quarantined[index + 2] for index, (name, q, counted, _) in
                enumerate(CLAUDE_LINE_EDITS) if q and not counted}
    tail = ": ccusage reads no usage from such a line, so it is quarantined so that it stays out of the usage sums"
    assert refusals == {
        "sessionId empty": 'sessionId is a string (""), expected a non-empty string' + tail,
        "version 1.0": 'version is a string ("1.0"), expected a version such as 2.0.61' + tail,
        "isSidechain a string": 'isSidechain is a string ("no"), expected true, false or null' + tail,
        "cwd null": "cwd is null (null), expected a value (ccusage refuses null there)" + tail,
        "costUSD null": "costUSD is null (null), expected a number" + tail,
        "requestId a number": "requestId is a number (5), expected a non-empty string" + tail,
        "isApiErrorMessage null": "isApiErrorMessage is null (null), expected a value (ccusage refuses null there)" + tail,
        "message.id null": "message.id is null (null), expected a non-empty string" + tail,
        "model empty": 'message.model is a string (""), expected a non-empty string' + tail,
        "speed Fast": 'message.usage.speed is a string ("Fast"), expected "standard" or "fast"' + tail,
        "cache writes split a string": 'message.usage.cache_creation is a string ("x"), expected an object or null' + tail,
    }
    # a quarantined line ccusage counts keeps its usage as a usage-only row, and only that
    assert usage_only == [(index + 2, "assistant", "meta", "usage_unreadable", "", 2 ** index)
                          for index, (_, q, counted, _) in enumerate(CLAUDE_LINE_EDITS) if q and counted]


def test_claude_reply_lines_ccusage_counts_or_refuses_give_ccusage_figures(tmp_path, ccusage):
    archive = _claude_line_edits_archive(tmp_path)
    lake = _lake(tmp_path, archive)
    theirs = {row["date"]: (row["inputTokens"], row["outputTokens"], row["cacheCreationTokens"],
                            row["cacheReadTokens"])
              for row in _ccusage_json(ccusage, archive, "daily")["daily"]}
    ours = {row["date"]: (row["input_tokens"], row["output_tokens"], row["cache_write_tokens"],
                          row["cache_read_tokens"])
            for row in usage_report(lake, period="day", tz="UTC").to_dict()["rows"]}
    assert ours == theirs
    assert len(theirs) == sum(1 for edit in CLAUDE_LINE_EDITS if edit[2])


def _split_replies_archive(root: Path) -> Path:
    """Three replies of two lines each (usage 100 in, 1 out, 50 cache reads on each line), the
    second line of the first then less full in all (30 out, no cache reads), the second line of
    the second fuller (30 out), the second line of the third fuller and in a sub-agent's
    session (an ``agentId``)."""
    archive = root / "archive"
    t = ClaudeTranscript("sess-split", start="2026-08-01T09:00:00", cwd="/home/me/split")
    t.user("go")
    for _ in range(3):
        t.reply({"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                usage={"input_tokens": 100, "output_tokens": 1, "cache_read_input_tokens": 50})
    fuller = {"output_tokens": 30}
    edits = iter([{}, {"output_tokens": 30, "cache_read_input_tokens": 0}, {}, fuller, {}, fuller])
    _edit_replies(t.write(archive / "claude" / "projects" / "split"),
                  lambda obj: obj["message"]["usage"].update(next(edits)))
    path = archive / "claude" / "projects" / "split" / "sess-split.jsonl"
    lines = _read_lines(path)
    lines[-1]["agentId"] = "a1"
    _write_compact(path, lines)
    return archive


def test_a_reply_written_as_several_lines_counts_its_fullest_line_as_ccusage_does(tmp_path):
    lake = _lake(tmp_path, _split_replies_archive(tmp_path))
    totals = usage_report(lake, period="day", tz="UTC").to_dict()["totals"]
    # the first reply's first line (151 tokens against 130), the second's second (181 against
    # 151), the third's second, in the sub-agent's session
    assert (totals["input_tokens"], totals["output_tokens"], totals["cache_read_tokens"]) == (300, 61, 150)
    sessions = {row["session_id"]: row["output_tokens"]
                for row in usage_report(lake, period="session", tz="UTC").to_dict()["rows"]}
    assert sessions == {"sess-split": 31, "sess-split/agent-a1": 30}


def test_replies_written_as_several_lines_give_ccusage_figures(tmp_path, ccusage):
    archive = _split_replies_archive(tmp_path)
    day = _ccusage_json(ccusage, archive, "daily")["daily"][0]
    totals = usage_report(_lake(tmp_path, archive), period="day", tz="UTC").to_dict()["totals"]
    assert (totals["input_tokens"], totals["output_tokens"], totals["cache_read_tokens"]) == \
        (day["inputTokens"], day["outputTokens"], day["cacheReadTokens"])


def test_claude_on_bedrock_is_priced_at_aws_prices_long_context_included_as_in_ccusage(tmp_path):
    # Claude Code on Amazon Bedrock records the inference profile as the model; costs as
    # ccusage 20.0.24 gives them (a regional Sonnet 4.5 profile 10% over the global one)
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-bedrock", start="2026-02-01T10:00:00", cwd="/home/me/bedrock")
    t.user("go")
    small = {"input_tokens": 1_000, "output_tokens": 1_000, "cache_read_input_tokens": 1_000,
             "cache_creation_input_tokens": 1_000}
    large = {key: 300_000 for key in small}
    calls = [("us.anthropic.claude-sonnet-4-20250514-v1:0", small),
             ("eu.anthropic.claude-sonnet-4-5-20250929-v1:0", small),
             ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", small),
             ("eu.anthropic.claude-sonnet-4-5-20250929-v1:0", large),
             ("us.anthropic.claude-sonnet-4-20250514-v1:0", large)]
    for day, (model, usage) in enumerate(calls, start=2):
        t.say("x", model=model, at=f"2026-02-{day:02d}T10:00:00", usage=usage)
    t.write(archive / "claude" / "projects" / "bedrock")
    lake = _lake(tmp_path, archive)
    costs = [row["cost_usd"] for row in usage_report(lake, period="day", tz="UTC").to_dict()["rows"]]
    assert [Decimal(str(cost)).quantize(Decimal("0.000001")) for cost in costs] == \
        [Decimal(c) for c in ("0.022050", "0.024255", "0.022050", "8.877000", "8.070000")]


def _codex_archive(root: Path, cases: list[list[dict]]) -> Path:
    """One rollout a day from 2025-09-01 (gpt-5), each with the token_count infos of a case."""
    archive = root / "archive"
    for day, infos in enumerate(cases, start=1):
        sid = f"0198d000-0000-7000-8000-{day:012d}"
        at = f"2025-09-{day:02d}T10:00:"
        rollout = archive / "codex" / "sessions" / "2025" / "09" / f"{day:02d}" / \
            f"rollout-2025-09-{day:02d}T10-00-00-{sid}.jsonl"
        rollout.parent.mkdir(parents=True)
        lines = [("session_meta", {"id": sid, "timestamp": at + "00.000Z", "cwd": "/w",
                                   "originator": "codex_cli_rs", "cli_version": "0.50.0"}),
                 ("turn_context", {"cwd": "/w", "model": "gpt-5"}),
                 *[("event_msg", {"type": "token_count", "info": info}) for info in infos]]
        rollout.write_text("".join(json.dumps({"timestamp": f"{at}{n:02d}.000Z", "type": kind,
                                               "payload": payload}, separators=(",", ":")) + "\n"
                                   for n, (kind, payload) in enumerate(lines)), encoding="utf-8")
    return archive


def _codex_days(lake: Lake) -> dict[str, tuple[int, int, int]]:
    return {row["date"]: (row["input_tokens"], row["cache_read_tokens"], row["output_tokens"])
            for row in usage_report(lake, period="day", tz="UTC").to_dict()["rows"]}


def _ccusage_codex_days(binary: Path, archive: Path) -> dict[str, tuple[int, int, int]]:
    return {row["date"]: (row["inputTokens"], row["cacheReadTokens"], row["outputTokens"])
            for row in _ccusage_json(binary, archive, "daily", agent="codex")["daily"]}


def _codex_usage(inp=100, cached=0, out=10, reasoning=0) -> dict:
    return {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out,
            "reasoning_output_tokens": reasoning, "total_tokens": 110}


def test_codex_token_counts_are_counted_as_ccusage_counts_them(tmp_path, ccusage):
    # one rollout a day: a repeated total, a last_token_usage that is not the total's
    # increase, an event without a total, cached input over the input
    usage = _codex_usage
    cases = [[{"total_token_usage": usage(100, 0, 10), "last_token_usage": usage(100, 0, 10)}] * 2,
             [{"total_token_usage": usage(100, 0, 10), "last_token_usage": usage(100, 0, 10)},
              {"total_token_usage": usage(300, 0, 30), "last_token_usage": usage(50, 0, 5)}],
             [{"last_token_usage": usage(100, 0, 10)}, {"last_token_usage": usage(200, 50, 20)}],
             [{"total_token_usage": usage(100, 150, 10), "last_token_usage": usage(100, 150, 10)}]]
    archive = _codex_archive(tmp_path, cases)
    assert _codex_days(_lake(tmp_path, archive)) == _ccusage_codex_days(ccusage, archive)


# a Codex call (last_token_usage; the total as written) with one count made hostile, one a
# day, and the (input, cache read, output) a day ccusage 20.0.24 reports for it: a count is a
# JSON integer from 0 up or a string holding one, else 0 (probed on 28 variants)
CODEX_COUNTS = [
    ({"input_tokens": -5}, (0, 0, 10)),                  # 0: the cached input goes with it
    ({"cached_input_tokens": -5}, (100, 0, 10)),
    ({"output_tokens": -5}, (80, 20, 0)),
    ({"output_tokens": 10.0}, (80, 20, 0)),              # a float, even integral: 0
    ({"output_tokens": " +010"}, (80, 20, 10)),          # a string of an integer: read
    ({"cached_input_tokens": "20"}, (80, 20, 10)),
    ({"output_tokens": "1e1"}, (80, 20, 0)),
    ({"input_tokens": 2 ** 64 + 5}, (0, 0, 10)),         # beyond 64 bits: 0
    ({"output_tokens": True}, (80, 20, 0)),
]


def _codex_hostile_archive(root: Path) -> Path:
    total = _codex_usage(100, 20, 10, 4)
    cases = [[{"total_token_usage": total, "last_token_usage": {**total, **edit}}]
             for edit, _expected in CODEX_COUNTS]
    # a total written with a string count, then as a number: the same total, one call
    cases.append([{"total_token_usage": {**total, "input_tokens": "100"}, "last_token_usage": total},
                  {"total_token_usage": total, "last_token_usage": total}])
    return _codex_archive(root, cases)


def test_a_hostile_codex_count_is_read_as_ccusage_reads_it_and_costs_no_line(tmp_path):
    lake = _lake(tmp_path, _codex_hostile_archive(tmp_path))
    expected = [counts for _edit, counts in CODEX_COUNTS] + [(80, 20, 10)]
    assert _codex_days(lake) == {f"2025-09-{day:02d}": counts
                                 for day, counts in enumerate(expected, start=1)}
    with lake.connect() as con:
        assert con.execute("SELECT count(*) FROM quarantine").fetchone() == (0,)


def test_hostile_codex_counts_give_ccusage_figures(tmp_path, ccusage):
    archive = _codex_hostile_archive(tmp_path)
    assert _codex_days(_lake(tmp_path, archive)) == _ccusage_codex_days(ccusage, archive)


# the real Codex rollout, each copy a session of its own, N days later (ccusage counts one
# token_count event once across files: its time and counts), with one line made hostile; its
# last token_count event (line 55) is a call of 171 new input, 3,968 cached, 38 output tokens
REAL_CODEX_ID = "019b04ae-b1c6-7c72-a134-a4c2de66058c"
CODEX_LINE_EDITS = {
    "last call without a time": (55, lambda obj: obj.pop("timestamp")),
    "session_meta without a payload": (1, lambda obj: obj.update(payload=None)),
    "a count an object": (55, lambda obj: obj["payload"]["info"]["last_token_usage"].update(total_tokens={})),
    "session_meta without its payload member": (1, lambda obj: obj.pop("payload")),
}


def _codex_line_edits_archive(root: Path) -> Path:
    archive = root / "archive"
    folder = archive / "codex" / "sessions" / "2025" / "12" / "09"
    folder.mkdir(parents=True)
    text = (REAL / "codex" / "codex_session.jsonl").read_text(encoding="utf-8")
    for number, (line_no, edit) in enumerate(CODEX_LINE_EDITS.values(), start=1):
        session_id = REAL_CODEX_ID[:-12] + f"{number:012d}"
        copy = text.replace(REAL_CODEX_ID, session_id).replace('"2025-12-09T', f'"2025-12-{9 + number}T')
        lines = [json.loads(line) for line in copy.splitlines()]
        edit(lines[line_no - 1])
        _write_compact(folder / f"rollout-2025-12-09T19-55-16-{session_id}.jsonl", lines)
    return archive


def test_hostile_codex_lines_cost_their_line_and_leave_the_usage_ccusage_counts(tmp_path):
    lake = _lake(tmp_path, _codex_line_edits_archive(tmp_path))
    # dated: the whole rollout once, without its last call twice; the call without a time is
    # a "(no date)" row, as ccusage leaves it out; the call with an object for a count is out
    assert _codex_days(lake) == {"2025-12-10": (3657, 18944, 370), None: (171, 3968, 38),
                                 "2025-12-11": (3828, 22912, 408), "2025-12-12": (3657, 18944, 370),
                                 "2025-12-13": (3828, 22912, 408)}
    # in the session report too, as ccusage leaves it out of its session
    sessions = {row["session_id"]: row["input_tokens"]
                for row in usage_report(lake, period="session", tz="UTC").to_dict()["rows"]}
    assert sessions == {REAL_CODEX_ID[:-12] + "000000000001": 3657, None: 171,
                        REAL_CODEX_ID[:-12] + "000000000002": 3828,
                        REAL_CODEX_ID[:-12] + "000000000003": 3657,
                        REAL_CODEX_ID[:-12] + "000000000004": 3828}
    with lake.connect() as con:
        quarantined = con.execute("SELECT line_no, reason FROM quarantine ORDER BY path").fetchall()
    assert quarantined == [
        (1, "a 'session_meta' line needs a 'payload' object, found null"),
        (55, "payload.info.last_token_usage.total_tokens is an object ({}), expected a count: ccusage "
             "reads no usage from such an event, so the line is quarantined so that it stays out of "
             "the usage sums"),
        (1, "a 'session_meta' line needs a 'payload' object, found none"),
    ]


def test_hostile_codex_lines_give_ccusage_figures(tmp_path, ccusage):
    archive = _codex_line_edits_archive(tmp_path)
    ours = {day: counts for day, counts in _codex_days(_lake(tmp_path, archive)).items() if day}
    assert ours == _ccusage_codex_days(ccusage, archive)


def _gemini_jsonl_damaged_archive(root: Path) -> Path:
    """The real Gemini session written as Gemini CLI's JSONL (a metadata line, then a line a
    message), its sessionId null, one reply without its id (line 10), one with thoughts that
    are not a list (line 9), one with a null model (line 8)."""
    session, _replies = _gemini_real_session()
    messages = session.pop("messages")
    session["sessionId"] = None
    del messages[8]["id"]
    messages[7]["thoughts"] = "x"
    messages[6]["model"] = None
    archive = root / "archive"
    chats = archive / "gemini" / "tmp" / "0123abcd" / "chats"
    chats.mkdir(parents=True)
    _write_compact(chats / "session-2025-12-09T19-51-f0a689a6.jsonl", [session, *messages])
    return archive


def test_damaged_gemini_jsonl_records_cost_their_line_and_keep_the_usage_ccusage_counts(tmp_path):
    lake = _lake(tmp_path, _gemini_jsonl_damaged_archive(tmp_path))
    # every reply counted, as in the session left whole
    assert _gemini_days(lake) == {"2025-12-09": (23896, 43377, 300)}
    with lake.connect() as con:
        assert con.execute("SELECT line_no, reason FROM quarantine ORDER BY line_no").fetchall() == [
            (9, "message record (f81824ae-e215-42fb-898a-e324c8bac796): 'thoughts' must be a list, "
                "found str"),
            (10, "message record has no string 'id'")]
        assert con.execute("SELECT api_call_id, input_tokens FROM messages "
                           "WHERE subtype = 'usage_unreadable' ORDER BY 1").fetchall() == [
            ("f81824ae-e215-42fb-898a-e324c8bac796", 741),
            ("session-2025-12-09T19-51-f0a689a6/line/10", 935)]
        assert con.execute("SELECT DISTINCT session_id FROM messages").fetchall() == [
            ("session-2025-12-09T19-51-f0a689a6",)]


def test_damaged_gemini_jsonl_records_give_ccusage_figures(tmp_path, ccusage):
    _assert_gemini_days_agree(ccusage, tmp_path, _gemini_jsonl_damaged_archive(tmp_path))
