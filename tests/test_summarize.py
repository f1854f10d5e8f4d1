"""Daily session logs: the exact format, every rule of topic/messages/tokens, days in a time
zone, idempotence, ignore_patterns, sub-agents and undated sessions."""

from __future__ import annotations

import json
import os

import pytest

from pipeline.errors import ConfigError
from pipeline.summarize import LogEntry, render_day, summarize, topic_of
from tests.conftest import REAL, ingest_paths, scalar
from tests.test_recover import ClaudeTranscript


def _log(lake, day: str) -> str:
    return (lake.summaries_dir / "sessions" / f"{day}.md").read_text(encoding="utf-8")


def _day_sessions(tmp_path):
    """Two sessions on 2025-12-09 (UTC) and one at 23:30 UTC the same day."""
    archive = tmp_path / "archive"
    a = ClaudeTranscript("sess-a", start="2025-12-09T09:05:00")
    a.user("<command-message>init is analyzing</command-message>\n<command-name>/init</command-name>")
    a.user("Please analyze this codebase", meta=True)
    a.user([{"type": "text", "text": "<system-reminder>\nthe date is today\n</system-reminder>"},
            {"type": "text", "text": "\n  Refactor   the   parser module\nand add tests"}])
    a.reply({"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Sure."},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/w/p.py"}},
            usage={"output_tokens": 40})
    a.user([{"type": "tool_result", "tool_use_id": "t1", "content": "1→x"}])
    a.say("Done.")
    a.user("thanks")
    a.write(archive)
    b = ClaudeTranscript("sess-b", start="2025-12-09T08:00:00")
    b.user("x" * 130)
    b.say("ok")
    b.write(archive)
    c = ClaudeTranscript("sess-c", start="2025-12-09T23:30:00")
    c.user("late night fix")
    c.write(archive)
    return ingest_paths(tmp_path, archive)[0]


def test_the_daily_log_has_the_exact_format_in_start_time_order(tmp_path):
    lake = _day_sessions(tmp_path)
    result = summarize(lake, tz="UTC")
    est = {sid: scalar(lake, "SELECT sum(est_tokens) FROM messages WHERE session_id = ?", [sid])
           for sid in ("sess-a", "sess-b", "sess-c")}
    assert _log(lake, "2025-12-09") == (
        "# Session Log — 2025-12-09\n"
        "\n"
        "### 08:00\n"
        f"- **Topic:** {'x' * 119}…\n"
        "- **Messages:** 1 user / 1 assistant\n"
        f"- **Est. tokens:** ~{est['sess-b']:,}\n"
        "\n"
        "### 09:05\n"
        "- **Topic:** Refactor the parser module\n"
        "- **Messages:** 2 user / 2 assistant\n"
        f"- **Est. tokens:** ~{est['sess-a']:,}\n"
        "\n"
        "### 23:30\n"
        "- **Topic:** late night fix\n"
        "- **Messages:** 1 user / 0 assistant\n"
        f"- **Est. tokens:** ~{est['sess-c']:,}\n")
    assert (result.days_written, result.sessions_listed, result.sessions_ignored) == (1, 3, 0)


def test_days_are_split_in_the_given_time_zone(tmp_path):
    lake = _day_sessions(tmp_path)
    summarize(lake, tz="Asia/Tokyo")   # UTC+9: 23:30 UTC is 08:30 the next day
    assert sorted(p.name for p in (lake.summaries_dir / "sessions").iterdir()) == \
        ["2025-12-09.md", "2025-12-10.md"]
    assert _log(lake, "2025-12-10").splitlines()[:4] == [
        "# Session Log — 2025-12-10", "", "### 08:30", "- **Topic:** late night fix"]
    assert [line for line in _log(lake, "2025-12-09").splitlines() if line.startswith("###")] == \
        ["### 17:00", "### 18:05"]


def test_a_rerun_changes_nothing_byte_for_byte(tmp_path):
    lake = _day_sessions(tmp_path)
    summarize(lake, tz="UTC")
    files = sorted(lake.summaries_dir.rglob("*.md"))
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    again = summarize(lake, tz="UTC")
    assert sorted(lake.summaries_dir.rglob("*.md")) == files
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files} == before
    assert (again.days_written, again.days_unchanged, again.recovery_written,
            again.recovery_unchanged, again.prices_written) == (0, 1, 0, 3, False)


def test_a_run_for_some_sessions_rebuilds_their_day_whole_and_lists_each_session_once(tmp_path):
    lake = _day_sessions(tmp_path)
    summarize(lake, tz="UTC")
    full = _log(lake, "2025-12-09")
    (lake.summaries_dir / "sessions" / "2025-12-09.md").unlink()
    result = summarize(lake, tz="UTC", sessions=["sess-a"])
    assert _log(lake, "2025-12-09") == full
    assert full.count("### ") == 3 and result.sessions_listed == 3


def test_ignored_sessions_are_left_out_and_counted_and_a_day_left_empty_is_removed(tmp_path):
    lake = _day_sessions(tmp_path)
    summarize(lake, tz="Asia/Tokyo")
    result = summarize(lake, tz="Asia/Tokyo", ignore_patterns=["^LATE NIGHT", "^x{100}"])
    assert (result.sessions_ignored, result.ignored_session_ids) == (2, ["sess-b", "sess-c"])
    assert result.days_removed == 1
    assert sorted(p.name for p in (lake.summaries_dir / "sessions").iterdir()) == ["2025-12-09.md"]
    assert _log(lake, "2025-12-09").count("### ") == 1
    assert sorted(p.name for p in (lake.summaries_dir / "recovery").iterdir()) == ["sess-a.md"]


def test_an_invalid_ignore_pattern_is_dropped_with_a_warning_naming_it_and_the_others_apply(
        tmp_path):
    from pipeline.errors import IgnorePatternWarning

    lake = _day_sessions(tmp_path)
    with pytest.warns(IgnorePatternWarning, match=r"ignore_patterns\[1\]: invalid regex '\(oops'"):
        result = summarize(lake, tz="Asia/Tokyo", ignore_patterns=["^LATE NIGHT", "(oops"])
    assert result.ignored_session_ids == ["sess-c"]


def test_sub_agent_sessions_are_not_listed_and_undated_sessions_are_counted(tmp_path):
    archive = tmp_path / "archive"
    parent = ClaudeTranscript("sess-p", start="2025-12-09T10:00:00")
    parent.user("look around")
    parent.say("ok")
    parent.write(archive)
    child = ClaudeTranscript("sess-p", start="2025-12-09T10:00:05")
    child.user("Warmup")
    child.say("ready")
    for line in child.lines:
        line["agentId"] = "abc12345"
    child.write(archive, "agent-abc12345.jsonl")
    undated = archive / "undated.jsonl"
    undated.write_text(json.dumps({"type": "user", "sessionId": "sess-u", "uuid": "x",
                                   "message": {"role": "user", "content": "no time"}}) + "\n",
                       encoding="utf-8")
    lake, _ = ingest_paths(tmp_path, archive)
    result = summarize(lake, tz="UTC")
    assert _log(lake, "2025-12-09").count("### ") == 1
    assert (result.sessions_listed, result.sessions_undated) == (1, 1)
    assert sorted(p.name for p in (lake.summaries_dir / "recovery").iterdir()) == \
        ["sess-p.md", "sess-u.md"]


def test_topic_rules():
    assert topic_of([]) == "(no topic)"
    assert topic_of(["<environment_context>\n<cwd>/x</cwd>\n</environment_context>", "  \n"]) == "(no topic)"
    assert topic_of(["<system-reminder>a</system-reminder>", "\n\n  first   real\tline\nsecond"]) == \
        "first real line"
    assert topic_of(["# AGENTS.md instructions for /x\n\n<INSTRUCTIONS>\nrules\n</INSTRUCTIONS>",
                     "do it"]) == "do it"
    assert topic_of(["<command-name>/review</command-name>\n<command-args></command-args>"]) == "(no topic)"
    assert topic_of(["y" * 120]) == "y" * 120
    assert topic_of(["y" * 121]) == "y" * 119 + "…"
    assert len(topic_of(["z" * 500])) == 120


def test_render_day_of_one_entry():
    from datetime import datetime, timezone
    entry = LogEntry("s", datetime(2025, 1, 2, tzinfo=timezone.utc), "07:05", "t", 3, 4, 12345)
    assert render_day("2025-01-02", [entry]) == (
        "# Session Log — 2025-01-02\n\n### 07:05\n- **Topic:** t\n- **Messages:** 3 user / 4 assistant\n"
        "- **Est. tokens:** ~12,345\n")


def test_the_real_claude_session_log_counts_prompts_and_api_responses_from_the_raw_file(tmp_path):
    path = REAL / "claude_code" / "claude_session.jsonl"
    lake, _ = ingest_paths(tmp_path, path, REAL / "claude_code" / "claude_agent.jsonl")
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    # human prompts: user records with string content that are not meta and not command wrappers
    prompts = [o for o in raw if o["type"] == "user" and isinstance(o["message"]["content"], str)
               and not o.get("isMeta") and not o["message"]["content"].lstrip().startswith("<")]
    responses = {(o["message"]["id"], o["requestId"]) for o in raw if o["type"] == "assistant"}
    first = min(o["timestamp"] for o in raw if o.get("timestamp"))
    summarize(lake, tz="UTC")
    text = _log(lake, first[:10])
    assert text.count("### ") == 1   # the sub-agent (agent file) is not listed on its own
    assert f"### {first[11:16]}\n" in text
    assert f"- **Topic:** {prompts[0]['message']['content']}\n" in text
    assert f"- **Messages:** {len(prompts)} user / {len(responses)} assistant\n" in text


def test_the_log_files_are_written_atomically_with_no_temp_files_left(tmp_path):
    lake = _day_sessions(tmp_path)
    summarize(lake, tz="UTC")
    leftovers = [p for p in lake.summaries_dir.rglob("*") if p.name.startswith(".")]
    assert leftovers == []
    assert os.path.isfile(lake.derived_dir / "model_prices" / "all.parquet")
