"""Daily session logs: the exact format, every rule of topic/messages/tokens, days in a time
zone, idempotence, ignore_patterns, sub-agents and undated sessions."""

from __future__ import annotations

import json
import os

import pytest

from pipeline.core.errors import ConfigError
from pipeline.stages.summarize import LogEntry, render_day, summarize, topic_of
from tests.helpers.lake import REAL, ingest_paths, scalar
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


def _spec_estimate(lake, session_id: str) -> int:
    """The specification's estimateTokens(messages' text joined with ""), in Python."""
    from pipeline.text.tokens import estimate_tokens
    return estimate_tokens(scalar(lake, "SELECT string_agg(text, '' ORDER BY seq) FROM messages "
                                  "WHERE session_id = ? AND role IN ('user', 'assistant') "
                                  "AND kind = 'text'", [session_id]))


def test_the_daily_log_has_the_exact_format_in_end_time_order(tmp_path):
    lake = _day_sessions(tmp_path)
    result = summarize(lake, tz="UTC")
    est = {sid: _spec_estimate(lake, sid) for sid in ("sess-a", "sess-b", "sess-c")}
    assert est["sess-b"] == 33 and est["sess-c"] == 4      # ceil(132 / 4), ceil(14 / 4)
    assert _log(lake, "2025-12-09") == (
        "# Session Log — 2025-12-09\n"
        "\n"
        "### 08:00\n"
        f"- **Topic:** {'x' * 120}\n"
        "- **Messages:** 1 user / 1 assistant\n"
        "- **Est. tokens:** ~33\n"
        "### 09:05\n"
        "- **Topic:** Refactor   the   parser module\n"
        "- **Messages:** 2 user / 2 assistant\n"
        f"- **Est. tokens:** ~{est['sess-a']}\n"
        "### 23:30\n"
        "- **Topic:** late night fix\n"
        "- **Messages:** 1 user / 0 assistant\n"
        "- **Est. tokens:** ~4\n")
    assert (result.days_written, result.sessions_listed, result.sessions_ignored) == (1, 3, 0)


def test_the_entry_time_and_day_are_the_sessions_end_and_the_estimate_is_of_the_text_joined(
        tmp_path):
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-long", start="2025-12-09T23:50:00")
    t.user("a" * 5)                                 # 5 + 5 + 5 chars: 3 tokens joined,
    t.say("b" * 5)                                  # not 2 + 2 + 2 summed per message
    t.reply({"type": "thinking", "thinking": "t" * 400, "signature": "s"},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/w/p.py"}})
    t.user([{"type": "tool_result", "tool_use_id": "t1", "content": "r" * 400}])
    t.user("c" * 5, at="2025-12-10T00:20:00")
    t.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    summarize(lake, tz="UTC")
    assert sorted(p.name for p in (lake.summaries_dir / "sessions").iterdir()) == ["2025-12-10.md"]
    assert _log(lake, "2025-12-10") == (
        "# Session Log — 2025-12-10\n\n### 00:20\n- **Topic:** (no topic)\n"
        "- **Messages:** 2 user / 2 assistant\n- **Est. tokens:** ~4\n")


def test_a_touched_session_that_now_ends_a_day_later_moves_to_that_day(tmp_path):
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-grow", start="2025-12-09T23:50:00")
    t.user("start the overnight migration")
    t.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    summarize(lake, tz="UTC")
    assert _log(lake, "2025-12-09").count("### 23:50") == 1
    t.user("and check it in the morning", at="2025-12-10T07:00:00")
    t.write(archive)
    ingest_paths(tmp_path, archive)
    summarize(lake, tz="UTC", sessions=["sess-grow"])
    assert sorted(p.name for p in (lake.summaries_dir / "sessions").iterdir()) == ["2025-12-10.md"]
    assert "### 07:00\n- **Topic:** start the overnight migration\n" in _log(lake, "2025-12-10")


def test_session_logging_false_turns_the_daily_logs_off(tmp_path):
    from pipeline.core.config import config_from_dict
    from pipeline.stages.nightly import run_nightly

    lake = _day_sessions(tmp_path)
    result = summarize(lake, tz="UTC", session_logging=False)
    assert not (lake.summaries_dir / "sessions").exists()
    assert (result.days_written, result.sessions_listed, result.recovery_written) == (0, 0, 3)
    assert config_from_dict({"session_logging": False}).session_logging is False
    assert config_from_dict({}).session_logging is True
    config = tmp_path / "ctxlake.toml"
    config.write_text("session_logging = false\n", encoding="utf-8")
    summary = run_nightly([tmp_path / "archive"], lake=lake, config_path=config, tz="UTC",
                          workers=1)
    assert summary.summaries.days_written == 0
    assert not (lake.summaries_dir / "sessions").exists()
    with pytest.raises(ConfigError, match="session_logging: expected true or false"):
        config_from_dict({"session_logging": "no"})


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
    from pipeline.core.errors import IgnorePatternWarning

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
        "first   real\tline"
    assert topic_of(["# AGENTS.md instructions for /x\n\n<INSTRUCTIONS>\nrules\n</INSTRUCTIONS>",
                     "do it now, please"]) == "do it now, please"
    assert topic_of([("<command-name>/review</command-name>\n<command-args></command-args>", True)]
                    ) == "(no topic)"
    assert topic_of(["y" * 120]) == "y" * 120
    assert topic_of(["y" * 121]) == "y" * 120               # first 120 characters, no ellipsis
    assert len(topic_of(["z" * 500])) == 120


def test_the_topic_is_the_first_message_longer_than_10_characters_after_cleaning():
    assert topic_of(["fix it", "   ten chars   ", "eleven char", "later"]) == "eleven char"
    assert topic_of(["  0123456789  ", "x"]) == "(no topic)"         # 10 after trimming
    assert topic_of(["hi\nthere, this is long"]) == "hi"             # the first line of it
    assert topic_of(["<system-reminder>a long injected reminder</system-reminder>ok",
                     "the real request"]) == "the real request"


def test_a_slash_commands_arguments_are_its_text_for_the_topic(tmp_path):
    command = ("<command-message>review is running</command-message>\n"
               "<command-name>/review</command-name>\n"
               "<command-args>the login redirect change</command-args>")
    assert topic_of([(command, True), "later prompt that is long"]) == "the login redirect change"
    archive = tmp_path / "archive"
    t = ClaudeTranscript("sess-cmd", start="2025-12-09T10:00:00")
    t.user("<command-name>/init</command-name>\n<command-args></command-args>")
    t.user(command)
    t.user("a later prompt typed by hand")
    t.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    summarize(lake, tz="UTC")
    assert "- **Topic:** the login redirect change\n" in _log(lake, "2025-12-09")


def test_render_day_of_one_entry():
    from datetime import datetime, timezone
    entry = LogEntry("s", datetime(2025, 1, 2, tzinfo=timezone.utc), "07:05", "t", 3, 4, 12345)
    assert render_day("2025-01-02", [entry]) == (
        "# Session Log — 2025-01-02\n\n### 07:05\n- **Topic:** t\n- **Messages:** 3 user / 4 assistant\n"
        "- **Est. tokens:** ~12345\n")
    assert render_day("2025-01-02", [entry, entry]).count("~12345\n### 07:05\n") == 1


def test_the_real_claude_session_log_counts_prompts_and_api_responses_from_the_raw_file(tmp_path):
    path = REAL / "claude_code" / "claude_session.jsonl"
    lake, _ = ingest_paths(tmp_path, path, REAL / "claude_code" / "claude_agent.jsonl")
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    # human prompts: user records with string content that are not meta and not command wrappers
    prompts = [o for o in raw if o["type"] == "user" and isinstance(o["message"]["content"], str)
               and not o.get("isMeta") and not o["message"]["content"].lstrip().startswith("<")]
    responses = {(o["message"]["id"], o["requestId"]) for o in raw if o["type"] == "assistant"}
    last = max(o["timestamp"] for o in raw if o.get("timestamp"))
    summarize(lake, tz="UTC")
    text = _log(lake, last[:10])
    assert text.count("### ") == 1   # the sub-agent (agent file) is not listed on its own
    assert f"### {last[11:16]}\n" in text
    assert f"- **Topic:** {prompts[0]['message']['content']}\n" in text
    assert f"- **Messages:** {len(prompts)} user / {len(responses)} assistant\n" in text


def test_the_log_files_are_written_atomically_with_no_temp_files_left(tmp_path):
    lake = _day_sessions(tmp_path)
    summarize(lake, tz="UTC")
    leftovers = [p for p in lake.summaries_dir.rglob("*") if p.name.startswith(".")]
    assert leftovers == []
    assert os.path.isfile(lake.derived_dir / "model_prices" / "all.parquet")


def test_a_day_rebuilt_for_one_session_reads_the_others_stored_entries_while_their_files_are_the_same(
        tmp_path):
    import pyarrow as pa

    from pipeline.stages.ingest import ingest
    from pipeline.stages.summarize import LOG_ENTRIES, LOG_ENTRIES_SCHEMA

    lake = _day_sessions(tmp_path)
    summarize(lake, tz="UTC")
    stored = sorted(lake.read_derived(LOG_ENTRIES, "all", LOG_ENTRIES_SCHEMA).to_pylist(),
                    key=lambda r: r["session_id"])
    assert [(r["session_id"], r["topic"], r["n_user"], r["n_assistant"]) for r in stored] == [
        ("sess-a", "Refactor   the   parser module", 2, 2), ("sess-b", "x" * 120, 1, 1),
        ("sess-c", "late night fix", 1, 0)]
    # an entry of the same files is taken as stored: mark sess-b's to see it used
    marked = [dict(r, topic="stored topic") if r["session_id"] == "sess-b" else r for r in stored]
    lake.write_session_rows(LOG_ENTRIES, "all", pa.Table.from_pylist(marked, schema=LOG_ENTRIES_SCHEMA),
                            None, sort_by=["session_id"])
    result = summarize(lake, tz="UTC", sessions=["sess-c"])
    assert result.sessions_considered == 3
    assert "- **Topic:** stored topic\n" in _log(lake, "2025-12-09")
    # sess-b's file changes: its entry is no longer current and is made again from the lake
    path = tmp_path / "archive" / "sess-b.jsonl"
    with open(path, "a", encoding="utf-8") as handle:
        line = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
        handle.write(json.dumps(dict(line, uuid="b-more", type="assistant")) + "\n")
    ingest([tmp_path / "archive"], lake=lake, workers=1)
    summarize(lake, tz="UTC", sessions=["sess-c"])
    log = _log(lake, "2025-12-09")
    assert "stored topic" not in log and f"- **Topic:** {'x' * 120}\n" in log
    assert [r["topic"] for r in lake.read_derived(LOG_ENTRIES, "all", LOG_ENTRIES_SCHEMA).to_pylist()
            if r["session_id"] == "sess-b"] == ["x" * 120]


def test_a_day_rebuilt_for_a_sub_agent_with_log_details_has_the_full_runs_bytes_and_its_cost(tmp_path):
    from tests.helpers.lake import rows

    lake, _ = ingest_paths(tmp_path, REAL / "claude_code" / "claude_session.jsonl",
                           REAL / "claude_code" / "claude_agent.jsonl")
    (child, parent), = rows(lake, "SELECT session_id, parent_session_id FROM sessions "
                                  "WHERE parent_session_id IS NOT NULL")
    summarize(lake, tz="UTC", log_details=True)   # it also writes the lake's model prices
    costs = dict(rows(lake, "SELECT session_id, sum(cost_usd) FROM usage_calls GROUP BY ALL"))
    assert costs[child] > 0 and costs[parent] > 0
    [day] = sorted((lake.summaries_dir / "sessions").iterdir())
    full = day.read_text(encoding="utf-8")
    assert f"`{parent}`" in full and f"${costs[parent] + costs[child]:.4f} ·" in full
    day.unlink()
    summarize(lake, tz="UTC", log_details=True, sessions=[child])   # its parent's entry is redone
    assert day.read_text(encoding="utf-8") == full


def test_recovery_documents_built_in_small_evidence_batches_are_the_bytes_of_one_batch(
        tmp_path, monkeypatch):
    from pipeline.stages import recover, summarize as summarize_module

    def documents(name: str, batch_bytes: int) -> tuple[dict[str, bytes], list[int]]:
        lake, _ = ingest_paths(tmp_path / name, REAL)
        sizes: list[int] = []
        render = recover.render_documents

        def counted(con, batch, memory_ids, **options):
            sizes.append(len(batch))
            return render(con, batch, memory_ids, **options)

        monkeypatch.setattr(summarize_module, "RECOVERY_BATCH_BYTES", batch_bytes)
        monkeypatch.setattr(summarize_module, "render_documents", counted)
        summarize(lake, tz="UTC")
        folder = lake.summaries_dir / "recovery"
        return {p.name: p.read_bytes() for p in sorted(folder.glob("*.md"))}, sizes

    whole, one_batch = documents("whole", 10**12)
    small, batches = documents("small", 20_000)   # a few sessions a batch
    assert len(one_batch) == 1 and len(batches) > 2 and sum(batches) == one_batch[0]
    assert small == whole and len(whole) == one_batch[0]
