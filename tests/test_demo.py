"""The demo archive: deterministic bytes, every format in its real layout, and the features the
later stages need (CJK, emoji, big payloads, memory reads, idle gaps, errors, sub-agents).

Shapes are checked by reading the generated files with plain ``json`` (independently of the
readers); lake-level checks run over an ingest of a ~2 MB demo. Readers written by other
stages are used only when registered (``READERS``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.stages.calibrate import estimator_report, load_calls
from pipeline.cli import cli
from pipeline.demo.archive import MARKER, UNPRICED_MODEL, parse_size, write_demo_archive
from pipeline.core.errors import UsageError
from pipeline.formats import READERS
from pipeline.stages.ingest import ingest
from pipeline.core.lake import Lake
from pipeline.stages.plan import suggest
from pipeline.text.tokens import estimate_tokens, text_counts

from tests.helpers.lake import rows, scalar

SIZE = 2_000_000
SEED = 11
# the planted strategic showcase: the third Claude session, whose id is the first draw of
# Random(f"{SEED}:claude:2") (the same for this seed at any size from ~2 MB)
PLANTED_SESSION = "180a838a-3269-450a-8d50-06997bac9759"

# top folder of the archive -> the reader expected to claim its files
EXPECTED_FORMAT = {"claude": "claude_code", "gemini": "gemini_cli", "codex": "codex_cli",
                   "openai": "openai_chat", "anthropic": "anthropic_messages",
                   "swe-agent": "swe_agent", "mini-swe-agent": "mini_swe_agent"}


def _fingerprint(root: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[path.relative_to(root).as_posix()] = (
                hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return out


def _jsonl(path: Path) -> list[dict]:
    """Complete lines of a JSONL file (a deliberately incomplete last line is skipped)."""
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    summary = write_demo_archive(root / "archive", size_bytes=SIZE, seed=SEED)
    lake = Lake(root / "lake")
    run = ingest([root / "archive"], lake=lake, workers=1)
    return root / "archive", summary, lake, run


# ---------------------------------------------------------------------------------------
# Determinism and size
# ---------------------------------------------------------------------------------------
def test_the_same_seed_and_size_give_byte_identical_files_and_mtimes(tmp_path):
    first = write_demo_archive(tmp_path / "a", size_bytes=600_000, seed=3)
    second = write_demo_archive(tmp_path / "b", size_bytes=600_000, seed=3)
    assert _fingerprint(tmp_path / "a") == _fingerprint(tmp_path / "b")
    assert first.to_dict() | {"out": ""} == second.to_dict() | {"out": ""}


def test_another_seed_gives_another_archive(tmp_path):
    write_demo_archive(tmp_path / "a", size_bytes=600_000, seed=3)
    write_demo_archive(tmp_path / "b", size_bytes=600_000, seed=4)
    a, b = _fingerprint(tmp_path / "a"), _fingerprint(tmp_path / "b")
    shared = {k for k in a if k in b and a[k][0] == b[k][0]}
    assert shared <= {MARKER} or not shared


@pytest.mark.parametrize("size", [2_000_000, 5_000_000])
def test_the_size_target_is_met_within_five_percent(tmp_path, size):
    summary = write_demo_archive(tmp_path / "a", size_bytes=size, seed=2)
    on_disk = sum(p.stat().st_size for p in (tmp_path / "a").rglob("*")
                  if p.is_file() and p.name != MARKER)
    assert on_disk == summary.size_bytes
    assert size <= on_disk <= size * 1.05
    assert summary.formats["claude_code"].bytes > 0.7 * on_disk      # most bytes, as in real archives
    assert sum(f.bytes for f in summary.formats.values()) == on_disk
    assert summary.to_dict()["formats"]["claude_code"] == {
        "files": summary.formats["claude_code"].files, "bytes": summary.formats["claude_code"].bytes,
        "sessions": summary.formats["claude_code"].sessions}


def test_the_folder_of_a_previous_demo_is_replaced_without_stale_files(tmp_path):
    write_demo_archive(tmp_path / "a", size_bytes=900_000, seed=1)
    write_demo_archive(tmp_path / "a", size_bytes=600_000, seed=2)
    write_demo_archive(tmp_path / "b", size_bytes=600_000, seed=2)
    assert _fingerprint(tmp_path / "a") == _fingerprint(tmp_path / "b")


def test_a_folder_that_is_not_a_demo_archive_is_refused(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(UsageError, match="not a demo archive"):
        write_demo_archive(tmp_path, size_bytes=600_000, seed=1)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize("text,expected", [("200MB", 200_000_000), ("1GB", 10**9),
                                           ("500KB", 500_000), ("64MiB", 64 * 2**20),
                                           ("1.5mb", 1_500_000), ("123", 123)])
def test_sizes_are_read_with_decimal_and_binary_units(text, expected):
    assert parse_size(text) == expected


def test_an_unreadable_size_is_a_usage_error():
    with pytest.raises(UsageError, match="cannot read the size"):
        parse_size("5XB")


# ---------------------------------------------------------------------------------------
# Layout and shapes, read with plain json
# ---------------------------------------------------------------------------------------
def test_every_format_is_written_in_its_real_layout(demo):
    archive, summary, _, _ = demo
    rels = [p.relative_to(archive).as_posix() for p in archive.rglob("*") if p.is_file()]
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    patterns = {
        "claude main": rf"claude/projects/-[A-Za-z0-9-]+/{uuid}\.jsonl",
        "claude sub-agent beside": r"claude/projects/-[A-Za-z0-9-]+/agent-[0-9a-f]{8}\.jsonl",
        "claude sub-agent folder": rf"claude/projects/-[A-Za-z0-9-]+/{uuid}/subagents/agent-[0-9a-f]{{8}}\.jsonl",
        "gemini legacy": r"gemini/tmp/[0-9a-f]{64}/chats/session-\d{4}-\d\d-\d\dT\d\d-\d\d-[0-9a-f]{8}\.json",
        "gemini jsonl": r"gemini/tmp/[0-9a-f]{64}/chats/session-\d{4}-\d\d-\d\dT\d\d-\d\d-[0-9a-f]{8}\.jsonl",
        "codex": rf"codex/sessions/\d{{4}}/\d\d/\d\d/rollout-\d{{4}}-\d\d-\d\dT\d\d-\d\d-\d\d-{uuid}\.jsonl",
        "openai": r"openai/chat-[0-9-]+\.jsonl",
        "anthropic": r"anthropic/messages-[0-9-]+\.jsonl",
        "swe-agent": r"swe-agent/trajectories/[^/]+/[^/]+\.traj",
        "mini-swe-agent": r"mini-swe-agent/[^/]+/[^/]+\.traj\.json",
    }
    counts = {name: sum(1 for rel in rels if re.fullmatch(pattern, rel))
              for name, pattern in patterns.items()}
    assert all(counts.values()), counts
    assert counts["swe-agent"] == 2 and counts["mini-swe-agent"] == 2
    assert set(summary.formats) == set(EXPECTED_FORMAT.values())


def test_claude_split_responses_repeat_usage_and_finish_output_tokens_on_the_last_line(demo):
    archive = demo[0]
    by_call: dict[tuple, list[dict]] = {}
    for path in (archive / "claude").rglob("*.jsonl"):
        for rec in _jsonl(path):
            if rec.get("type") == "assistant":
                key = (rec["message"]["id"], rec["requestId"])
                by_call.setdefault(key, []).append(rec)
    split = [lines for lines in by_call.values() if len(lines) > 1]
    assert len(split) > 10
    for lines in split:
        usages = [line["message"]["usage"] for line in lines]
        assert len({u["cache_read_input_tokens"] for u in usages}) == 1
        assert usages[-1]["output_tokens"] == max(u["output_tokens"] for u in usages)
        assert all(len(line["message"]["content"]) == 1 for line in lines)


def test_claude_tool_results_carry_tool_use_results_and_every_call_is_answered(demo):
    archive = demo[0]
    calls, results, errors, error_texts = set(), set(), 0, 0
    types = Counter()
    for path in (archive / "claude").rglob("*.jsonl"):
        for rec in _jsonl(path):
            types[rec.get("type"), rec.get("subtype")] += 1
            content = (rec.get("message") or {}).get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if block.get("type") == "tool_use":
                    calls.add(block["id"])
                elif block.get("type") == "tool_result":
                    results.add(block["tool_use_id"])
                    assert "toolUseResult" in rec
                    errors += bool(block.get("is_error"))
                    error_texts += "<tool_use_error>" in json.dumps(block["content"])
    assert calls == results
    assert errors > 0 and error_texts > 0
    assert types["file-history-snapshot", None] > 0
    assert types["system", "compact_boundary"] > 0


def test_gemini_jsonl_has_set_rewind_and_repeated_message_ids(demo):
    archive = demo[0]
    sets = rewinds = repeated = 0
    for path in (archive / "gemini").rglob("*.jsonl"):
        lines = _jsonl(path)
        assert {"sessionId", "projectHash", "startTime", "lastUpdated"} <= set(lines[0])
        sets += sum("$set" in x for x in lines)
        rewinds += sum("$rewindTo" in x for x in lines)
        ids = Counter(x["id"] for x in lines if "id" in x)
        repeated += sum(1 for n in ids.values() if n > 1)
    assert sets and rewinds and repeated


def test_codex_rollouts_emit_each_token_count_twice_after_a_null_one(demo):
    archive = demo[0]
    for path in (archive / "codex").rglob("*.jsonl"):
        lines = _jsonl(path)
        assert lines[0]["type"] == "session_meta"
        counts = [x["payload"]["info"] for x in lines
                  if x["type"] == "event_msg" and x["payload"]["type"] == "token_count"]
        assert counts[0] is None
        # as in the real sample: every total is emitted twice, except the session's last one
        totals = Counter(json.dumps(c["total_token_usage"], sort_keys=True) for c in counts if c)
        last = json.dumps(counts[-1]["total_token_usage"], sort_keys=True)
        assert len(totals) > 1 and all(n >= 2 for key, n in totals.items() if key != last)


# ---------------------------------------------------------------------------------------
# Recorded usage follows the content (read with plain json; tokens by docs/policies.md's heuristic)
# ---------------------------------------------------------------------------------------
def _claude_usage_events(archive: Path):
    """Main Claude sessions without compaction (sub-agents and inline sidechains left out)."""
    for path in sorted((archive / "claude").rglob("*.jsonl")):
        records = [r for r in _jsonl(path) if not r.get("isSidechain")]
        if "agent-" in path.name or any(r.get("type") == "system" for r in records):
            continue
        events, seen = [], set()
        for rec in records:
            message = rec.get("message") or {}
            content = message.get("content")
            if rec.get("type") == "assistant" and message["id"] not in seen:
                seen.add(message["id"])
                usage = message["usage"]
                events.append(("call", usage["input_tokens"] + usage["cache_creation_input_tokens"]
                               + usage["cache_read_input_tokens"]))
            if rec.get("type") not in ("user", "assistant"):
                continue
            if isinstance(content, str):
                if not rec.get("isMeta") and not content.startswith("<"):
                    events.append(("turn", 0))                  # a human prompt
                events.append(("add", estimate_tokens(content)))
                continue
            for block in content:
                if block["type"] == "thinking":
                    events.append(("think", estimate_tokens(block["thinking"])))
                elif block["type"] == "text":
                    events.append(("add", estimate_tokens(block["text"])))
                elif block["type"] == "tool_use":
                    events.append(("add", estimate_tokens(json.dumps(block["input"], ensure_ascii=False))))
                elif block["type"] == "tool_result":
                    inner = block["content"]
                    text = inner if isinstance(inner, str) else "\n".join(b["text"] for b in inner)
                    events.append(("add", estimate_tokens(text)))
        yield events


def _codex_usage_events(archive: Path):
    for path in sorted((archive / "codex").rglob("*.jsonl")):
        events, last = [], None
        calls = []            # a call's token_count follows its output: its prompt came before
        for line in _jsonl(path):
            payload = line["payload"]
            if line["type"] == "event_msg" and payload["type"] == "token_count" and payload["info"]:
                total = payload["info"]["total_token_usage"]
                if total != last:
                    last = total
                    at = calls.pop() if calls else len(events)
                    events.insert(at, ("call", payload["info"]["last_token_usage"]["input_tokens"]))
            elif line["type"] == "response_item":
                kind = payload["type"]
                if kind in ("reasoning", "message") and payload.get("role") != "user" and not calls:
                    calls.append(len(events))                   # the call starts here
                if kind == "reasoning":
                    events.append(("think", estimate_tokens(payload["summary"][0]["text"])))
                elif kind == "message":
                    text = "\n".join(c["text"] for c in payload["content"])
                    if payload["role"] == "user" and not text.startswith("<"):
                        events.append(("turn", 0))
                    events.append(("add", estimate_tokens(text)))
                else:
                    text = payload.get("arguments") or payload.get("input") or payload.get("output") or ""
                    events.append(("add", estimate_tokens(text)))
        yield events


def _gemini_usage_events(archive: Path):
    """Legacy whole-JSON sessions (no rewinds or compression to replay)."""
    for path in sorted((archive / "gemini").rglob("*.json")):
        events = []
        for msg in json.loads(path.read_text())["messages"]:
            if msg["type"] == "user":
                events += [("turn", 0), ("add", estimate_tokens(msg["content"]))]
                continue
            events.append(("call", msg["tokens"]["input"]))
            for thought in msg["thoughts"]:
                events.append(("think", estimate_tokens(f"{thought['subject']}\n\n{thought['description']}")))
            events.append(("add", estimate_tokens(msg["content"])))
            for call in msg.get("toolCalls") or []:
                response = call["result"][0]["functionResponse"]["response"]
                events.append(("add", estimate_tokens(json.dumps(call["args"], ensure_ascii=False))))
                events.append(("add", estimate_tokens(response.get("output") or response.get("error"))))
        yield events


def _mini_usage_events(archive: Path):
    for path in sorted((archive / "mini-swe-agent").rglob("*.traj.json")):
        events = []
        for msg in json.loads(path.read_text())["messages"]:
            if msg["role"] == "assistant":
                events.append(("call", msg["extra"]["response"]["usage"]["prompt_tokens"]))
            if msg["role"] != "exit":
                events.append(("add", estimate_tokens(msg["content"]) + sum(
                    estimate_tokens(c["function"]["arguments"]) for c in msg.get("tool_calls") or [])))
        yield events


@pytest.mark.parametrize("events_of", [_claude_usage_events, _codex_usage_events,
                                       _gemini_usage_events, _mini_usage_events])
def test_recorded_prompts_grow_by_about_the_tokens_the_transcript_adds(demo, events_of):
    checked = 0
    for events in events_of(demo[0]):
        # replay the conversation: what each call's prompt holds, by the heuristic; the
        # thinking of earlier turns is dropped (as the APIs do)
        context = thinking = 0
        calls = []
        for what, n in events:
            if what == "call":
                calls.append((n, context + thinking))
            elif what == "turn":
                thinking = 0
            elif what == "think":
                thinking += n
            else:
                context += n
        if len(calls) < 3:
            continue
        (first, first_est), (last, last_est) = calls[0], calls[-1]
        added = last_est - first_est
        # a per-model tokenizer factor (0.7-1.2 of the heuristic on this text), tool-call framing
        assert 0.8 * added <= last - first <= 1.3 * added + 30 * len(calls), (calls, added)
        assert first > first_est * 0.6                          # plus a hidden overhead
        checked += 1
    assert checked


def test_cached_prompt_parts_never_exceed_the_prompt_and_come_in_cache_blocks(demo):
    archive = demo[0]
    checked = Counter()
    for path in (archive / "codex").rglob("*.jsonl"):
        running = dict.fromkeys(("input_tokens", "cached_input_tokens", "output_tokens",
                                 "reasoning_output_tokens", "total_tokens"), 0)
        last_total = None
        for line in _jsonl(path):
            info = line["payload"].get("info") if line["type"] == "event_msg" else None
            if not info or info["total_token_usage"] == last_total:
                continue
            last_total, call = info["total_token_usage"], info["last_token_usage"]
            running = {k: running[k] + call[k] for k in running}
            assert info["total_token_usage"] == running          # totals are running sums
            assert call["cached_input_tokens"] <= call["input_tokens"]
            assert call["cached_input_tokens"] % 128 == 0
            assert call["reasoning_output_tokens"] <= call["output_tokens"]
            assert call["total_tokens"] == call["input_tokens"] + call["output_tokens"]
            checked["codex"] += 1
    for path in (archive / "gemini").rglob("*.json*"):
        lines = _jsonl(path) if path.suffix == ".jsonl" else json.loads(path.read_text())["messages"]
        for msg in lines:
            tokens = msg.get("tokens")
            if tokens:
                assert tokens["total"] == tokens["input"] + tokens["output"] + tokens["thoughts"] + tokens["tool"]
                assert tokens["cached"] <= tokens["input"] and tokens["cached"] % 1024 == 0
                assert (tokens["thoughts"] > 0) == bool(msg["thoughts"])
                checked["gemini"] += 1
    for path in (archive / "mini-swe-agent").rglob("*.traj.json"):
        doc = json.loads(path.read_text())
        costs = []
        for msg in doc["messages"]:
            if msg["role"] == "assistant":
                usage = msg["extra"]["response"]["usage"]
                assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
                cached = usage["prompt_tokens_details"]["cached_tokens"]
                assert cached <= usage["prompt_tokens"] and cached % 64 == 0
                costs.append(msg["extra"].get("cost"))
                checked["mini"] += 1
        if all(c is not None for c in costs):                   # tool calling: cost per call
            assert doc["info"]["model_stats"]["instance_cost"] == pytest.approx(sum(costs), abs=1e-6)
    assert checked["codex"] > 10 and checked["gemini"] > 5 and checked["mini"] >= 6


def test_claude_calls_read_from_the_cache_what_the_previous_call_left_in_it(demo):
    archive = demo[0]
    warm = 0
    for path in (archive / "claude").rglob("*.jsonl"):
        previous = None
        for rec in _jsonl(path):
            if rec.get("type") != "assistant" or rec.get("isSidechain"):
                continue
            usage = rec["message"]["usage"]
            if previous is not None and usage["cache_read_input_tokens"]:
                assert usage["cache_read_input_tokens"] <= \
                    previous["cache_read_input_tokens"] + previous["cache_creation_input_tokens"]
                warm += 1
            previous = usage
    assert warm > 50


def test_swe_agent_run_totals_sum_prompts_that_grow_with_the_history(demo):
    for path in (demo[0] / "swe-agent").rglob("*.traj"):
        doc = json.loads(path.read_text())
        history, stats = doc["history"], doc["info"]["model_stats"]
        # each call's prompt is the history before it (its own reply and observation after)
        before = [sum(estimate_tokens(m["content"]) for m in history[:i])
                  for i, m in enumerate(history) if m["role"] == "assistant"]
        calls = len(before) + 1                                 # the submitting call
        context = sum(before) + sum(estimate_tokens(m["content"]) for m in history)
        assert 0.7 * context <= stats["tokens_sent"] <= 1.3 * context + 1400 * calls
        assert 0 < stats["tokens_received"] < stats["tokens_sent"]


# ---------------------------------------------------------------------------------------
# Ingest of the demo
# ---------------------------------------------------------------------------------------
def test_the_demo_ingests_with_nothing_quarantined_and_only_the_planted_line_held_back(demo):
    archive, summary, lake, run = demo
    assert run.quarantined == 0
    assert run.held_back == 1 == len(summary.held_back_files)
    assert run.lines == run.records + run.quarantined + run.held_back
    held = archive / summary.held_back_files[0]
    assert not held.read_bytes().endswith(b"\n")
    present = {rel.split("/")[0] for rel in (p.relative_to(archive).as_posix()
                                               for p in archive.rglob("*") if p.is_file())}
    sources = rows(lake, "SELECT path, format FROM sources")
    for path, fmt in sources:
        top = Path(path).relative_to(archive).parts[0]
        if EXPECTED_FORMAT[top] in READERS or fmt is not None:
            assert fmt is not None and fmt.startswith(EXPECTED_FORMAT[top]), (path, fmt)
    registered = {top for top in present if EXPECTED_FORMAT.get(top) in READERS}
    recognised = {Path(path).relative_to(archive).parts[0] for path, fmt in sources if fmt}
    assert registered <= recognised
    if registered == present - {MARKER}:
        assert run.files_unrecognized == 0


def test_the_demo_lake_has_cjk_emoji_and_payloads_over_16_kib(demo):
    lake = demo[2]
    assert scalar(lake, "SELECT count(*) FROM messages WHERE cjk_count > 0 AND is_prompt") > 0
    assert scalar(lake, "SELECT count(*) FROM messages "
                        "WHERE regexp_matches(text, '[\\x{1F300}-\\x{1FAFF}]')") > 0
    assert scalar(lake, "SELECT count(*) FROM tool_results WHERE payload_bytes > 16384") >= 3


def test_the_demo_lake_has_memory_file_reads_for_every_memory_root(demo):
    lake = demo[2]
    paths = {p for (p,) in rows(lake, """
        SELECT coalesce(json_extract_string(input_json, '$.file_path'),
                        json_extract_string(input_json, '$.absolute_path'))
        FROM tool_calls WHERE tool_family = 'read'""") if p}
    assert any(re.search(r"/(src|work|code)/[^/]+/CLAUDE\.md$", p) for p in paths)
    assert any(p.endswith("/.claude/CLAUDE.md") and "/src/" not in p and "/work/" not in p
               and "/code/" not in p for p in paths)                     # ~/.claude/CLAUDE.md
    assert any(re.search(r"/[^/]+/\.claude/CLAUDE\.md$", p) and p.count("/") > 4 for p in paths)
    assert any("/../" in p for p in paths)                                # an escape attempt
    if "gemini_cli" in READERS:
        assert any(p.endswith("/GEMINI.md") for p in paths)


def test_the_demo_lake_has_idle_gaps_over_an_hour_before_a_prompt(demo):
    lake = demo[2]
    # the gap between the last assistant message and the next prompt (docs/policies.md, idle)
    gaps = scalar(lake, """
        WITH ordered AS (
            SELECT is_prompt, "timestamp",
                   max(CASE WHEN role = 'assistant' THEN "timestamp" END) OVER (
                       PARTITION BY session_id ORDER BY seq
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS last_assistant
            FROM messages
        )
        SELECT count(*) FROM ordered
        WHERE is_prompt AND "timestamp" - last_assistant > INTERVAL 60 MINUTE""")
    assert gaps >= 1


def test_the_demo_lake_has_tool_errors_and_sub_agent_sessions(demo):
    lake = demo[2]
    assert scalar(lake, "SELECT count(*) FROM tool_results WHERE is_error") > 0
    assert scalar(lake, "SELECT count(*) FROM messages WHERE kind = 'tool_result' "
                        "AND contains(text, '<tool_use_error>')") > 0
    assert scalar(lake, "SELECT count(*) FROM sessions WHERE parent_session_id IS NOT NULL") >= 2


def test_the_demo_lake_has_the_workflow_signals_later_stages_look_for(demo):
    lake = demo[2]
    commands = [c for (c,) in rows(lake, "SELECT json_extract_string(input_json, '$.command') "
                                         "FROM tool_calls WHERE tool_name = 'Bash'") if c]
    for needle in ("git commit", "pip install", "npm install"):
        assert any(needle in c for c in commands), needle
    todos = [json.loads(t) for (t,) in rows(lake, "SELECT input_json FROM tool_calls "
                                                  "WHERE tool_name = 'TodoWrite'")]
    assert any(all(item["status"] == "completed" for item in t["todos"]) for t in todos)
    repeated = scalar(lake, """
        SELECT count(*) FROM (
            SELECT session_id, json_extract_string(input_json, '$.file_path') AS p
            FROM tool_calls WHERE tool_name = 'Read' GROUP BY ALL HAVING count(*) > 1)""")
    assert repeated > 0


def _planted_boundaries(path: Path) -> dict[str, tuple[int, float]]:
    """(turn, weighted tool calls) at the planted session's first completed todo list and first
    commit, worked out from the transcript with plain json: a turn is an API call (a distinct
    message.id), numbered from 1; weights are docs/policies.md's (Read 0.5, Grep/Glob 0.3, else 1)."""
    turns: list[str] = []
    weight = 0.0
    found: dict[str, tuple[int, float]] = {}
    for record in _jsonl(path):
        if record["type"] != "assistant":
            continue
        message = record["message"]
        if message["id"] not in turns:
            turns.append(message["id"])
        for block in message["content"]:
            if block["type"] != "tool_use":
                continue
            weight += {"Read": 0.5, "Grep": 0.3, "Glob": 0.3}.get(block["name"], 1.0)
            todos = block["input"].get("todos") or []
            if todos and all(t["status"] == "completed" for t in todos):
                found.setdefault("todo_done", (len(turns), round(weight, 1)))
            if "git commit" in block["input"].get("command", ""):
                found.setdefault("commit", (len(turns), round(weight, 1)))
    return found


def test_the_strategic_policy_suggests_compacting_the_planted_session_at_its_commit(demo):
    archive, _, lake, _ = demo
    # the library call behind `ctxlake suggest`, on every top-level session
    sessions = [s for (s,) in rows(lake, "SELECT session_id FROM sessions "
                                         "WHERE parent_session_id IS NULL ORDER BY session_id")]
    suggested = {s: suggest(lake, s) for s in sessions}
    assert any(result.points for result in suggested.values())
    expected = _planted_boundaries(next(archive.glob(f"claude/projects/*/{PLANTED_SESSION}.jsonl")))
    assert expected == {"todo_done": (61, 54.7), "commit": (64, 57.7)}
    result = suggested[PLANTED_SESSION]
    assert [(p["turn"], p["weighted_calls"], p["boundary"], p["threshold"], p["state"])
            for p in result.points] == [(64, 57.7, "Committed", 50.0, "Clean state")]
    assert result.points[0]["detail"].startswith("git add -A && git commit -m")
    # the completed todo list before it is a boundary too, held back by the edits not committed
    assert [(p["turn"], p["weighted_calls"], p["boundary"], p["suppressed_by"])
            for p in result.suppressed] == [
        (61, 54.7, "Task done", ["uncommitted edits: files edited since the last commit"])]


def test_the_demo_lake_uses_every_listed_model_and_one_unpriced(demo):
    lake = demo[2]
    models = {m for (m,) in rows(lake, "SELECT DISTINCT model FROM messages WHERE model IS NOT NULL")}
    expected = {"claude-sonnet-4-5-20250929", UNPRICED_MODEL}
    if "codex_cli" in READERS:
        expected.add("gpt-5.1-codex-max")
    if "gemini_cli" in READERS:
        expected |= {"gemini-2.5-pro"}
    assert expected <= models


def test_claude_tool_calls_are_billed_as_claude_writes_them(demo):
    # a Claude call that only made one tool call bills its output: the call written in
    # Claude's syntax (tags, one parameter per key, strings raw) at the "claude" code factor
    # 1.20 per heuristic token (each piece +-3%), 3 tokens of framing and a stop token or two
    from pipeline.text.written_output import WrittenRow, claude_tool_calls

    ratios = []
    for path in (demo[0] / "claude").rglob("*.jsonl"):
        blocks: dict[str, list] = {}
        output: dict[str, int] = {}
        for line in _jsonl(path):
            msg = line.get("message")
            if line.get("type") != "assistant" or not isinstance(msg, dict) or "usage" not in msg:
                continue
            blocks.setdefault(msg["id"], []).extend(msg["content"])
            output[msg["id"]] = msg["usage"]["output_tokens"]
        for mid, content in blocks.items():
            if len(content) != 1 or content[0]["type"] != "tool_use":
                continue
            use = content[0]
            written = claude_tool_calls([WrittenRow(
                "tool_use", json.dumps(use["input"], ensure_ascii=False), use["name"])])
            cjk, units = text_counts(written)
            ratios.append((output[mid] - 3 - 1.5) / (1.20 * (units - cjk) / 4 + 1.5 * 0.96 * cjk))
    assert len(ratios) > 30
    assert 0.85 < min(ratios) and max(ratios) < 1.15
    assert statistics.median(ratios) == pytest.approx(1.0, abs=0.02)


def test_the_calibrated_estimator_meets_its_target_on_the_demo_usage(demo):
    # the recorded usage is derived from the content, so calibration against it works: every
    # model with enough scored calls is within the targets (output: small calls, some noise)
    report = estimator_report(demo[2])
    enough = {(m.model, m.direction): m.calibrated.median_pct
              for m in report.models if m.n_scored >= 20}
    assert {("claude-sonnet-4-5-20250929", "prompt"), ("claude-sonnet-4-5-20250929", "output"),
            ("gpt-5.1-codex-max", "prompt"), ("gpt-5.1-codex-max", "output")} <= set(enough)
    for (model, direction), median in enough.items():
        assert median <= (5.0 if direction == "prompt" else 10.0), (model, direction, median)


def test_the_bigger_demo_has_the_other_claude_and_gemini_models(tmp_path):
    write_demo_archive(tmp_path / "a", size_bytes=8_000_000, seed=1)
    text = b"".join(p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file())
    for model in (b"claude-opus-4-1-20250805", b"claude-haiku-4-5-20251001",
                  b"gemini-2.5-flash", b"gemini-2.5-pro", b"gpt-5.1-codex-max"):
        assert model in text, model


# ---------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------
def test_the_demo_command_writes_the_archive_and_runs_on_it(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["--lake", str(tmp_path / "lake"), "demo", "--size", "600KB",
                                 "--seed", "5", "--out", str(tmp_path / "archive"), "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["archive"]["files"] == sum(
        1 for p in (tmp_path / "archive").rglob("*") if p.is_file() and p.name != MARKER)
    run = report["run"]["ingest"]
    assert run["quarantined"] == 0 and run["held_back"] == 1
    assert run["lines"] == run["records"] + run["held_back"]
    assert report["run"]["lake"] == str(tmp_path / "lake")
    # the nightly job ran every stage on it
    assert report["run"]["touched_sessions"] > 0 and report["run"]["summaries"]["days_written"] > 0
    assert [p["policy"] for p in report["run"]["plans"]] == ["payload_prune+microcompact"]


def test_the_demo_command_with_no_run_only_writes_the_archive(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["--lake", str(tmp_path / "lake"), "demo", "--size", "300KB",
                                 "--out", str(tmp_path / "archive"), "--no-run"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "not run" in result.output
    assert (tmp_path / "archive" / MARKER).exists()
    assert not (tmp_path / "lake").exists()
    assert os.listdir(tmp_path / "archive")


def test_gemini_jsonl_calls_share_their_session_thread(demo):
    # Gemini JSONL messages carry ids but no parent links: that is not a root record per
    # message, so the calls of a session (between boundaries) form one thread
    lake = demo[2]
    jsonl_sessions = {s for (s,) in rows(lake, "SELECT session_id FROM sessions WHERE format = 'gemini_cli' "
                                               "AND session_id IN (SELECT m.session_id FROM messages AS m "
                                               "JOIN sources USING (source_id) WHERE sources.format = 'gemini_cli_jsonl')")}
    assert jsonl_sessions
    calls = [c for c in load_calls(lake) if c["session_id"] in jsonl_sessions]
    boundaries = dict(rows(lake, "SELECT session_id, count(*) FROM messages WHERE kind = 'boundary' "
                                 "GROUP BY ALL"))
    threads: dict[str, set] = {}
    for call in calls:
        threads.setdefault(call["session_id"], set()).add(call["thread_id"])
    for session_id, ids in threads.items():
        assert len(ids) <= 1 + boundaries.get(session_id, 0), session_id
