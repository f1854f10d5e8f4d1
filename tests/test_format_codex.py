"""Codex CLI reader: the real rollout (exact counts worked out from the raw JSON) and hand-made
rollouts for token_count deltas, the older header+state form and appends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.formats import detect
from pipeline.formats.codex_cli import CodexCliJsonReader, CodexCliReader
from pipeline.formats.gemini_cli import GeminiCliJsonlReader
from pipeline.stages.ingest import ingest
from tests.helpers.lake import REAL, ingest_paths, rows, scalar

SAMPLE = REAL / "codex" / "codex_session.jsonl"


def _objs() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def _items(objs: list[dict]) -> list[dict]:
    return [o["payload"] for o in objs if o["type"] == "response_item"]


def _text(item: dict) -> str:
    return "\n".join(c["text"] for c in item["content"])


def _failed(output: str) -> bool:
    if output.startswith("Exit code: "):
        return not output.startswith("Exit code: 0\n")
    return json.loads(output)["metadata"]["exit_code"] != 0


# ---------------------------------------------------------------------------------------
# The real sample
# ---------------------------------------------------------------------------------------
def test_the_real_rollout_ingests_every_line_with_nothing_quarantined(tmp_path):
    lake, summary = ingest_paths(tmp_path, SAMPLE)
    objs = _objs()
    assert (summary.files, summary.lines, summary.records, summary.quarantined) == \
        (1, len(objs), len(objs), 0)
    meta = objs[0]["payload"]
    assert rows(lake, "SELECT session_id, format, project, git_branch, cli_version, model "
                      "FROM sessions") == [
        (meta["id"], "codex_cli", meta["cwd"], meta["git"]["branch"], meta["cli_version"],
         next(o["payload"]["model"] for o in objs if o["type"] == "turn_context"))]
    assert rows(lake, "SELECT format FROM sources") == [("codex_cli",)]


def test_response_items_are_the_only_message_source(tmp_path):
    lake, _ = ingest_paths(tmp_path, SAMPLE)
    objs = _objs()
    items = _items(objs)
    users = [i for i in items if i["type"] == "message" and i["role"] == "user"]
    context = [i for i in users if _text(i).startswith("<environment_context>")]
    expected = {
        ("user", "text"): len(users) - len(context),
        ("user", "meta"): len(context),
        ("assistant", "text"): sum(1 for i in items
                                   if i["type"] == "message" and i["role"] == "assistant"),
        ("assistant", "thinking"): sum(1 for i in items if i["type"] == "reasoning"),
        ("assistant", "tool_use"): sum(1 for i in items
                                       if i["type"] in ("function_call", "custom_tool_call")),
        ("tool", "tool_result"): sum(1 for i in items if i["type"].endswith("_call_output")),
    }
    # the event_msg copies exist and are NOT counted again
    events = [o["payload"]["type"] for o in objs if o["type"] == "event_msg"]
    assert events.count("user_message") == expected[("user", "text")]
    assert events.count("agent_message") == expected[("assistant", "text")]
    got = dict(((role, kind), n) for role, kind, n in rows(
        lake, "SELECT role, kind, count(*) FROM messages WHERE subtype IS DISTINCT FROM 'token_count' "
              "GROUP BY ALL"))
    assert got == expected
    assert scalar(lake, "SELECT count(*) FROM messages WHERE is_prompt") == expected[("user", "text")]
    assert rows(lake, "SELECT text FROM messages WHERE is_prompt ORDER BY seq") == [
        (_text(i),) for i in users if i not in context]


def test_real_calls_pair_with_outputs_and_exit_codes_make_errors(tmp_path):
    lake, _ = ingest_paths(tmp_path, SAMPLE)
    items = _items(_objs())
    calls = [i for i in items if i["type"] in ("function_call", "custom_tool_call")]
    outputs = [i for i in items if i["type"].endswith("_call_output")]
    assert scalar(lake, "SELECT count(*) FROM tool_calls") == len(calls)
    assert scalar(lake, "SELECT count(*) FROM tool_results") == len(outputs)
    assert scalar(lake, "SELECT count(*) FROM tool_results r SEMI JOIN tool_calls c "
                        "ON r.call_id = c.call_id AND r.session_id = c.session_id") == \
        len({c["call_id"] for c in calls} & {o["call_id"] for o in outputs}) == len(outputs)
    assert scalar(lake, "SELECT count(*) FROM tool_results WHERE is_error") == \
        sum(1 for o in outputs if _failed(o["output"])) == 2
    assert sorted(rows(lake, "SELECT call_id, tool_name, tool_family FROM tool_calls")) == sorted(
        (c["call_id"], c["name"], {"shell_command": "shell", "apply_patch": "edit"}[c["name"]])
        for c in calls)
    assert sorted(rows(lake, "SELECT call_id, tool_name FROM tool_results")) == sorted(
        (c["call_id"], c["name"]) for c in calls)


def test_real_usage_is_the_final_total_with_cache_outside_input(tmp_path):
    lake, _ = ingest_paths(tmp_path, SAMPLE)
    totals = [o["payload"]["info"]["total_token_usage"] for o in _objs()
              if o["type"] == "event_msg" and o["payload"]["type"] == "token_count"
              and o["payload"]["info"]]
    final = totals[-1]
    distinct = [t for n, t in enumerate(totals) if n == 0 or t != totals[n - 1]]
    got = rows(lake, "SELECT sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), "
                     "sum(reasoning_tokens), count(input_tokens) FROM messages")[0]
    assert got == (final["input_tokens"] - final["cached_input_tokens"], final["output_tokens"],
                   final["cached_input_tokens"], final["reasoning_output_tokens"], len(distinct))
    assert got[0] + got[1] + got[2] == final["total_tokens"]
    # totals are repeated, so summing every event's last_token_usage would over-count
    lasts = [o["payload"]["info"]["last_token_usage"]["input_tokens"] for o in _objs()
             if o["type"] == "event_msg" and o["payload"]["type"] == "token_count"
             and o["payload"]["info"]]
    assert len(totals) > len(distinct) and sum(lasts) > final["input_tokens"]


def test_sniffing_claims_the_codex_rollout_and_nothing_else():
    head = SAMPLE.read_bytes()[:65536]
    assert detect(str(SAMPLE), head) == "codex_cli"
    for path in REAL.rglob("*"):
        if path.is_file() and path != SAMPLE:
            assert CodexCliReader.sniff(str(path), path.read_bytes()[:65536]) == 0, path
    foreign = [b'{"messages": [{"role": "user", "content": "hi"}]}\n',
               b'{"id": "conv-1", "messages": [{"role": "user", "content": "hi"}]}\n',
               b'{"role": "user", "content": [{"type": "text", "text": "hi"}]}\n',
               b'{"sessionId": "s", "projectHash": "h", "startTime": "t", "lastUpdated": "t"}\n']
    for line in foreign:
        assert CodexCliReader.sniff("/a/b.jsonl", line) == 0, line
    assert GeminiCliJsonlReader.sniff(str(SAMPLE), head) == 0
    old = _old_lines()
    assert CodexCliReader.sniff("/x/rollout-2025-07-01T10-00-00-uuid.jsonl", b"".join(old)) == 90


# ---------------------------------------------------------------------------------------
# Hand-made rollouts
# ---------------------------------------------------------------------------------------
SID = "0199aaaa-bbbb-7ccc-8ddd-eeeeffff0000"
ROLLOUT = f"rollout-2026-01-02T10-00-00-{SID}.jsonl"


def _line(ltype: str, payload: dict, second: int = 0) -> bytes:
    return json.dumps({"timestamp": f"2026-01-02T10:00:{second:02d}.000Z", "type": ltype,
                       "payload": payload}).encode() + b"\n"


def _item(item_type: str, **fields) -> bytes:
    return _line("response_item", {"type": item_type, **fields})


def _meta(**extra) -> bytes:
    return _line("session_meta", {"id": SID, "timestamp": "2026-01-02T10:00:00.000Z",
                                  "cwd": "/w/proj", "originator": "codex_cli_rs",
                                  "cli_version": "0.70.0", "instructions": None, "source": "cli",
                                  "model_provider": "openai", **extra})


def _turn(model: str) -> bytes:
    return _line("turn_context", {"cwd": "/w/proj", "model": model, "approval_policy": "never"})


def _tokens(total: dict | None, second: int = 0, last: dict | None = None) -> bytes:
    """A token_count event; its call (``last_token_usage``) only when given: the reader then
    counts it, else the total's increase (test_a_token_counts_call_is_its_last_token_usage)."""
    info = None if total is None else {"total_token_usage": total, "model_context_window": 272000}
    if last is not None:
        info["last_token_usage"] = last
    return _line("event_msg", {"type": "token_count", "info": info, "rate_limits": None}, second)


def _usage(inp: int, cached: int, out: int, reasoning: int) -> dict:
    return {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out,
            "reasoning_output_tokens": reasoning, "total_tokens": inp + out}


def _say(role: str, text: str) -> bytes:
    kind = "input_text" if role == "user" else "output_text"
    return _line("response_item", {"type": "message", "role": role,
                                   "content": [{"type": kind, "text": text}]})


A = _usage(1000, 600, 50, 20)
B = _usage(2500, 1800, 120, 40)


def test_token_counts_written_twice_give_one_delta_each(tmp_path):
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join([
        _meta(), _turn("gpt-5-codex"), _say("user", "hi"), _tokens(None, 1), _tokens(A, 2),
        _say("assistant", "hello"), _tokens(A, 3), _turn("gpt-5.1-codex"), _tokens(B, 4),
        _tokens(B, 5),
    ]))
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (10, 0)
    assert rows(lake, "SELECT line_no, model, input_tokens, cache_read_tokens, output_tokens, "
                      "reasoning_tokens, usage_scope, api_call_id, role, kind FROM messages "
                      "WHERE subtype = 'token_count' ORDER BY seq") == [
        (5, "gpt-5-codex", 400, 600, 50, 20, "call", None, "assistant", "other"),
        (9, "gpt-5.1-codex", 1500 - 1200, 1200, 70, 20, "call", None, "assistant", "other"),
    ]
    assert rows(lake, "SELECT sum(input_tokens) + sum(cache_read_tokens), sum(output_tokens) "
                      "FROM messages") == [(B["input_tokens"], B["output_tokens"])]


def test_a_total_that_goes_down_starts_a_new_baseline(tmp_path):
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    small = _usage(300, 100, 10, 0)
    path.write_bytes(b"".join([_meta(), _tokens(B, 1), _tokens(small, 2)]))
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT input_tokens, cache_read_tokens, output_tokens FROM messages "
                      "ORDER BY seq") == [
        (700, 1800, 120), (200, 100, 10)]


def _old_lines() -> list[bytes]:
    objs = [
        {"id": SID, "timestamp": "2025-07-01T10:00:00.000Z", "instructions": None,
         "git": {"commit_hash": "abc", "branch": "main", "repository_url": "git@x:y.git"}},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<user_instructions>\nbe brief\n</user_instructions>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "**Listing**"}],
         "encrypted_content": "gAAA"},
        {"type": "function_call", "id": "fc_1", "name": "shell",
         "arguments": json.dumps({"command": ["bash", "-lc", "ls nope"]}), "call_id": "call_1"},
        {"type": "function_call_output", "call_id": "call_1",
         "output": json.dumps({"output": "ls: nope: No such file",
                               "metadata": {"exit_code": 2, "duration_seconds": 0.1}})},
        {"record_type": "state"},
        {"type": "message", "id": "msg_1", "role": "assistant",
         "content": [{"type": "output_text", "text": "There is no such file."}]},
    ]
    return [json.dumps(o).encode() + b"\n" for o in objs]


def test_the_older_header_and_state_form_is_read(tmp_path):
    path = tmp_path / "sessions" / "rollout-2025-07-01T10-00-00-x.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(_old_lines()))
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.lines, summary.records, summary.quarantined) == (9, 9, 0)
    assert rows(lake, "SELECT format FROM sources") == [("codex_cli",)]
    assert rows(lake, "SELECT session_id, git_branch, project FROM sessions") == [(SID, "main", None)]
    assert rows(lake, "SELECT line_no, role, kind, subtype, is_prompt, text FROM messages "
                      "ORDER BY seq") == [
        (3, "user", "meta", "user_instructions", False,
         "<user_instructions>\nbe brief\n</user_instructions>"),
        (4, "user", "text", None, True, "list files"),
        (5, "assistant", "thinking", None, False, "**Listing**"),
        (6, "assistant", "tool_use", None, False, '{"command": ["bash", "-lc", "ls nope"]}'),
        (7, "tool", "tool_result", None, False, json.loads(_old_lines()[6])["output"]),
        (9, "assistant", "text", None, False, "There is no such file."),
    ]
    assert rows(lake, "SELECT call_id, tool_name, tool_family FROM tool_calls") == [
        ("call_1", "shell", "shell")]
    assert rows(lake, "SELECT call_id, tool_name, is_error FROM tool_results") == [
        ("call_1", "shell", True)]
    assert rows(lake, "SELECT record_type, count(*) FROM records GROUP BY ALL ORDER BY 1") == [
        ("response_item", 6), ("session_meta", 1), ("state", 2)]


def test_an_append_reads_only_the_new_lines_and_continues_the_usage_delta(tmp_path):
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    call = _line("response_item", {"type": "function_call", "name": "shell_command",
                                   "arguments": '{"command":"false"}', "call_id": "call_9"})
    first = [_meta(), _turn("gpt-5-codex"), _say("user", "go"), _tokens(None), _tokens(A), call,
             _tokens(A)]
    path.write_bytes(b"".join(first))
    lake, _ = ingest_paths(tmp_path, path)
    output = _line("response_item", {"type": "function_call_output", "call_id": "call_9",
                                     "output": "Exit code: 1\nWall time: 0 seconds\nOutput:\n"})
    appended = [output, _tokens(B), _say("assistant", "it failed"), _tokens(B)]
    with open(path, "ab") as handle:
        handle.write(b"".join(appended))
    summary = ingest([path], lake=lake, workers=1)
    assert (summary.files_appended, summary.lines, summary.records, summary.quarantined) == \
        (1, len(appended), len(appended), 0)
    assert rows(lake, "SELECT lines, records, generation FROM sources") == [
        (len(first) + len(appended), len(first) + len(appended), 1)]
    assert scalar(lake, "SELECT count(*) FROM records") == len(first) + len(appended)
    assert rows(lake, "SELECT line_no, input_tokens, cache_read_tokens, output_tokens, model "
                      "FROM messages WHERE subtype = 'token_count' ORDER BY seq") == [
        (5, 400, 600, 50, "gpt-5-codex"),
        (9, (2500 - 1000) - (1800 - 600), 1800 - 600, 70, "gpt-5-codex"),
    ]
    # the call is before the watermark, its output after: the name comes from the saved state
    assert rows(lake, "SELECT call_id, tool_name, is_error, line_no FROM tool_results") == [
        ("call_9", "shell_command", True, 8)]
    assert scalar(lake, "SELECT count(*) FROM session_info") == 1
    assert rows(lake, "SELECT n_prompts, n_tool_calls, n_tool_results FROM sessions") == [(1, 1, 1)]


def test_a_spawned_subagent_rollout_points_to_its_parent(tmp_path):
    parent = "0199aaaa-0000-7000-8000-000000000001"
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(_meta(source={"subagent": {"thread_spawn": {
        "parent_thread_id": parent, "depth": 1, "agent_nickname": "scout"}}}) + _say("user", "look"))
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT session_id, parent_session_id, agent_id FROM sessions") == [
        (SID, parent, "scout")]


def test_a_response_item_with_a_bad_content_is_quarantined_alone(tmp_path):
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(_meta() + _line("response_item", {"type": "message", "role": "user",
                                                       "content": 42}) + _say("user", "fine"))
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (2, 1)
    assert rows(lake, "SELECT line_no, reason FROM quarantine") == [
        (2, "message.content must be a list of content items, found int")]
    assert rows(lake, "SELECT text FROM messages") == [("fine",)]


def test_compaction_markers_and_injected_messages_are_not_prompts(tmp_path):
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join([
        _meta(),
        _line("response_item", {"type": "message", "role": "developer",
                                "content": [{"type": "input_text", "text": "<permissions>..."}]}),
        _say("user", "# AGENTS.md instructions for /w/proj\n\nbe brief"),
        _say("user", "fix it"),
        _line("event_msg", {"type": "turn_aborted", "reason": "interrupted"}),
        _line("compacted", {"message": "Summary: fixed half of it.", "replacement_history": []}),
        _line("event_msg", {"type": "context_compacted"}),
        _line("response_item", {"type": "local_shell_call", "call_id": "ls_1", "status": "completed",
                                "action": {"type": "exec", "command": ["ls"]}}),
    ]))
    lake, summary = ingest_paths(tmp_path, path)
    assert summary.quarantined == 0
    assert rows(lake, "SELECT line_no, role, kind, subtype, is_prompt FROM messages ORDER BY seq") == [
        (2, "system", "meta", "developer", False),
        (3, "user", "meta", "instructions", False),
        (4, "user", "text", None, True),
        (5, "system", "meta", "turn_aborted", False),
        (6, "system", "boundary", "compacted", False),
        (6, "user", "summary", "compacted", False),
        (8, "assistant", "tool_use", None, False),
    ]
    assert rows(lake, "SELECT call_id, tool_name, tool_family FROM tool_calls") == [
        ("ls_1", "local_shell", "shell")]


# ---------------------------------------------------------------------------------------
# Forks: the parent's rollout copied into the fork's file, its usage counted once
# ---------------------------------------------------------------------------------------
FORK = "0199bbbb-0000-7000-8000-000000000002"
SPAWN = "0199cccc-0000-7000-8000-000000000003"


def _fork_archive(tmp_path, parent_lines: list[bytes]):
    """A parent rollout, a fork of it (``forked_from_id``, the parent's lines copied after
    its own session_meta with the fork's time, then one call of its own) and a spawned
    thread (``thread_spawn``, the same copy, one call of its own)."""
    day = tmp_path / "sessions" / "2026" / "01" / "02"
    day.mkdir(parents=True)
    (day / ROLLOUT).write_bytes(b"".join(parent_lines))

    def copy(second: int) -> list[bytes]:
        out = []
        for raw in parent_lines:
            obj = json.loads(raw)
            obj["timestamp"] = f"2026-01-02T10:00:{second:02d}.000Z"
            out.append(json.dumps(obj).encode() + b"\n")
        return out

    C = _usage(B["input_tokens"] + 700, B["cached_input_tokens"] + 500, B["output_tokens"] + 30, 40)
    fork = _line("session_meta", {"id": FORK, "forked_from_id": SID, "timestamp": "2026-01-02T10:00:30.000Z",
                                  "cwd": "/w/proj", "cli_version": "0.130.0", "source": "cli"}, 30)
    (day / f"rollout-2026-01-02T10-00-30-{FORK}.jsonl").write_bytes(b"".join(
        [fork, *copy(30), _say("user", "now the tests"), _tokens(C, 40)]))
    spawn = _line("session_meta", {"id": SPAWN, "timestamp": "2026-01-02T10:00:45.000Z", "cwd": "/w/proj",
                                   "cli_version": "0.130.0", "source": {"subagent": {"thread_spawn": {
                                       "parent_thread_id": SID, "depth": 1, "agent_role": "worker"}}}}, 45)
    D = _usage(B["input_tokens"] + 100, B["cached_input_tokens"], B["output_tokens"] + 9, 40)
    (day / f"rollout-2026-01-02T10-00-45-{SPAWN}.jsonl").write_bytes(b"".join(
        [spawn, *copy(45), _say("user", "look around"), _tokens(D, 50)]))
    return tmp_path / "sessions", C, D


def test_a_forks_copy_of_its_parents_usage_is_counted_once_and_its_own_calls_in_full(tmp_path):
    from pipeline.stages.usage import usage_report
    parent = [_meta(), _turn("gpt-5-codex"), _say("user", "hi"), _tokens(None, 1), _tokens(A, 2),
              _say("assistant", "hello"), _tokens(A, 3), _tokens(B, 4)]
    root, C, D = _fork_archive(tmp_path, parent)
    lake, summary = ingest_paths(tmp_path, root)
    assert (summary.files, summary.quarantined) == (3, 0)
    # every file keeps its rows: each copy has the parent's two usage rows, with the same
    # fingerprints (the parent's id and the running total), then one row of its own
    fingerprints = rows(lake, "SELECT session_id, uuid, input_tokens, output_tokens FROM messages "
                              "WHERE subtype = 'token_count' ORDER BY session_id, seq")
    a = f"{SID}:1000:600:50:20"
    b = f"{SID}:2500:1800:120:40"
    assert fingerprints == [
        (SID, a, 400, 50), (SID, b, 300, 70),
        (FORK, a, 400, 50), (FORK, b, 300, 70),
        (FORK, f"{SID}:3200:2300:150:40", 200, 30),
        (SPAWN, a, 400, 50), (SPAWN, b, 300, 70),
        (SPAWN, f"{SID}:2600:1800:129:40", 100, 9),
    ]
    report = usage_report(lake, period="session", tz="UTC").to_dict()
    by_id = {row["session_id"]: row for row in report["rows"]}
    # the parent's two calls stay with the parent (recorded first); each fork has its own call
    assert {sid: (row["api_calls"], row["input_tokens"], row["cache_read_tokens"],
                  row["output_tokens"]) for sid, row in by_id.items()} == {
        SID: (2, 2500 - 1800, 1800, 120),
        FORK: (1, 200, 500, 30),
        SPAWN: (1, 100, 0, 9),
    }
    total = usage_report(lake, period="day", tz="UTC").to_dict()["rows"]
    assert [(r["api_calls"], r["input_tokens"] + r["cache_read_tokens"], r["output_tokens"])
            for r in total] == [(4, 2500 + 700 + 100, 120 + 30 + 9)]


def test_independent_sessions_with_the_same_running_total_are_both_counted(tmp_path):
    from pipeline.stages.usage import usage_report
    day = tmp_path / "sessions" / "2026" / "01" / "02"
    day.mkdir(parents=True)
    (day / ROLLOUT).write_bytes(b"".join([_meta(), _say("user", "hi"), _tokens(A, 2)]))
    other = _line("session_meta", {"id": FORK, "timestamp": "2026-01-02T10:00:00.000Z",
                                   "cwd": "/w/proj", "source": "cli"})
    (day / f"rollout-2026-01-02T10-00-00-{FORK}.jsonl").write_bytes(b"".join(
        [other, _say("user", "hi"), _tokens(A, 2)]))
    lake, _ = ingest_paths(tmp_path, tmp_path / "sessions")
    report = usage_report(lake, period="day", tz="UTC").to_dict()["rows"]
    assert [(r["api_calls"], r["input_tokens"], r["output_tokens"]) for r in report] == [(2, 800, 100)]


def test_a_fork_without_its_parents_session_meta_copied_still_counts_the_copy_once(tmp_path):
    from pipeline.stages.usage import usage_report
    day = tmp_path / "sessions" / "2026" / "01" / "02"
    day.mkdir(parents=True)
    (day / ROLLOUT).write_bytes(b"".join([_meta(), _say("user", "hi"), _tokens(A, 2)]))
    fork = _line("session_meta", {"id": FORK, "forked_from_id": SID, "cwd": "/w/proj",
                                  "timestamp": "2026-01-02T10:00:30.000Z"}, 30)
    (day / f"rollout-2026-01-02T10-00-30-{FORK}.jsonl").write_bytes(b"".join(
        [fork, _say("user", "hi"), _tokens(A, 30), _say("user", "more"), _tokens(B, 40)]))
    lake, _ = ingest_paths(tmp_path, tmp_path / "sessions")
    assert rows(lake, "SELECT session_id, uuid FROM messages WHERE subtype = 'token_count' "
                      "ORDER BY session_id, seq") == [
        (SID, f"{SID}:1000:600:50:20"), (FORK, f"{SID}:1000:600:50:20"),
        (FORK, f"{SID}:2500:1800:120:40")]
    report = usage_report(lake, period="day", tz="UTC").to_dict()["rows"]
    assert [(r["api_calls"], r["input_tokens"] + r["cache_read_tokens"], r["output_tokens"])
            for r in report] == [(2, 2500, 120)]


def test_unified_exec_outputs_with_a_nonzero_exit_are_errors_and_write_stdin_is_a_shell_call(tmp_path):
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)

    def call(call_id: str, name: str, arguments: str) -> bytes:
        return _item("function_call", name=name, arguments=arguments, call_id=call_id)

    def output(call_id: str, text: str) -> bytes:
        return _item("function_call_output", call_id=call_id, output=text)

    path.write_bytes(b"".join([
        _meta(), _turn("gpt-5-codex"), _say("user", "run the tests"),
        call("call_a", "exec_command", '{"cmd": "pytest -q", "yield_time_ms": 10000}'),
        output("call_a", "Chunk ID: 9f2c1a\nWall time: 1.2034 seconds\nProcess exited with code 1\n"
                         "Original token count: 5\nOutput:\n1 failed\n"),
        call("call_b", "exec_command", '{"cmd": "python -i", "yield_time_ms": 1000}'),
        output("call_b", "Chunk ID: 77aa01\nWall time: 1.0005 seconds\nProcess running with session "
                         "ID 3\nOriginal token count: 2\nOutput:\n>>> \n"),
        call("call_c", "write_stdin", '{"session_id": 3, "chars": "exit()\\n"}'),
        output("call_c", "Chunk ID: 77aa02\nWall time: 0.1 seconds\nProcess exited with code 0\n"
                         "Original token count: 0\nOutput:\n"),
        # the program's own output naming an exit code is not the header's
        call("call_d", "exec_command", '{"cmd": "cat log"}'),
        output("call_d", "Chunk ID: 77aa03\nWall time: 0.1 seconds\nProcess exited with code 0\n"
                         "Output:\nProcess exited with code 1\n"),
    ]))
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT call_id, tool_name, tool_family FROM tool_calls ORDER BY call_id") == [
        ("call_a", "exec_command", "shell"), ("call_b", "exec_command", "shell"),
        ("call_c", "write_stdin", "shell"), ("call_d", "exec_command", "shell")]
    assert rows(lake, "SELECT call_id, is_error FROM tool_results ORDER BY call_id") == [
        ("call_a", True), ("call_b", False), ("call_c", False), ("call_d", False)]


# ---------------------------------------------------------------------------------------
# Tool search, compaction's replacement history, the TypeScript CLI's JSON rollouts
# ---------------------------------------------------------------------------------------
# the shapes codex-rs writes (protocol/src/models.rs ResponseItem::ToolSearchCall /
# ToolSearchOutput): a client search has a call_id and an ``arguments`` OBJECT; one the
# server ran has ``call_id: null`` on both items
SEARCH_TOOLS = [{"type": "function", "name": "mcp__codex_apps__calendar_create_event",
                 "description": "Create a calendar event.", "defer_loading": True,
                 "parameters": {"type": "object", "properties": {"title": {"type": "string"}},
                                "required": ["title"], "additionalProperties": False}}]


def _tool_search_lines() -> list[bytes]:
    return [
        _meta(), _turn("gpt-5.4"), _say("user", "add a meeting"),
        _item("tool_search_call", call_id="search-1", execution="client",
              arguments={"query": "calendar create", "limit": 1}),
        _item("tool_search_output", call_id="search-1", status="completed", execution="client",
              tools=SEARCH_TOOLS),
        _item("tool_search_call", execution="server", call_id=None, status="completed",
              arguments={"paths": ["crm"]}),
        _item("tool_search_output", execution="server", call_id=None, status="completed", tools=[]),
    ]


def test_a_tool_search_call_and_its_output_are_a_tool_call_and_its_linked_result(tmp_path):
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(_tool_search_lines()))
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (7, 0)
    tools = json.dumps(SEARCH_TOOLS, separators=(",", ":"))
    assert rows(lake, "SELECT line_no, role, kind, call_id, tool_name, text FROM messages "
                      "ORDER BY seq") == [
        (3, "user", "text", None, None, "add a meeting"),
        (4, "assistant", "tool_use", "search-1", "tool_search",
         '{"query":"calendar create","limit":1}'),
        (5, "tool", "tool_result", "search-1", "tool_search", tools),
        (6, "assistant", "tool_use", None, "tool_search", '{"paths":["crm"]}'),
        (7, "tool", "tool_result", None, "tool_search", "[]"),
    ]
    assert rows(lake, "SELECT line_no, json_path, call_id, tool_name, tool_family, input_json "
                      "FROM tool_calls ORDER BY seq") == [
        (4, "/payload/arguments", "search-1", "tool_search", "other",
         '{"query":"calendar create","limit":1}'),
        (6, "/payload/arguments", None, "tool_search", "other", '{"paths":["crm"]}')]
    # json_path is the payload itself: the server's search has no call_id to find it by
    assert rows(lake, "SELECT line_no, json_path, call_id, tool_name, is_error, payload_shape "
                      "FROM tool_results ORDER BY seq") == [
        (5, "/payload/tools", "search-1", "tool_search", False, "json"),
        (7, "/payload/tools", None, "tool_search", False, "json")]
    assert scalar(lake, "SELECT count(*) FROM tool_results r JOIN tool_calls c "
                        "ON r.call_id = c.call_id AND r.session_id = c.session_id") == 1
    # apply finds the search's payloads where Codex keeps them
    call, output = (json.loads(line) for line in _tool_search_lines()[3:5])
    assert CodexCliReader.input_holders(call, "search-1") == [("payload", "arguments")]
    assert CodexCliReader.result_holders(output, "search-1") == [("payload", "tools")]


def _compacting_rollout(compacted: dict) -> list[bytes]:
    return [
        _meta(), _turn("gpt-5.1-codex"), _say("user", "fix the parser"), _tokens(None, 1),
        _tokens(A, 2), _say("assistant", "Fixed half of it."), _tokens(A, 3),
        _line("compacted", compacted, 4), _line("event_msg", {"type": "context_compacted"}, 4),
        _say("user", "go on"), _tokens(B, 5),
    ]


SUMMARY = ("Another language model started to solve this problem and produced a summary of its "
           "thinking process.\nFixed half of the parser.")


def test_a_local_compactions_replacement_history_is_the_new_context_and_counts_nothing_again(tmp_path):
    # codex-rs core/src/compact.rs: the user messages kept, the summary (the line's message)
    # last, injected context and ghost snapshots as they were
    history = [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n  <cwd>/w/proj</cwd>\n"
                                           "</environment_context>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the parser"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": SUMMARY}]},
        {"type": "ghost_snapshot", "ghost_commit": {"id": "abc", "parent": None}},
    ]
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(_compacting_rollout({"message": SUMMARY,
                                                   "replacement_history": history})))
    lake, summary = ingest_paths(tmp_path, path)
    assert summary.quarantined == 0
    assert rows(lake, "SELECT line_no, role, kind, subtype, is_prompt, json_path, text FROM messages "
                      "WHERE subtype IS DISTINCT FROM 'token_count' ORDER BY seq") == [
        (3, "user", "text", None, True, None, "fix the parser"),
        (6, "assistant", "text", None, False, None, "Fixed half of it."),
        (8, "system", "boundary", "compacted", False, None, ""),
        (8, "user", "meta", "environment_context", False, "/payload/replacement_history/0",
         history[0]["content"][0]["text"]),
        (8, "user", "summary", "replacement_history", False, "/payload/replacement_history/1",
         "fix the parser"),
        (8, "user", "summary", "compacted", False, "/payload/replacement_history/2", SUMMARY),
        (10, "user", "text", None, True, None, "go on"),
    ]
    # the copied prompt is no prompt, the copies are no reply, and usage is the events' alone
    assert rows(lake, "SELECT n_prompts, n_assistant FROM sessions") == [(2, 1)]
    assert rows(lake, "SELECT sum(input_tokens) + sum(cache_read_tokens), sum(output_tokens), "
                      "count(input_tokens) FROM messages") == [
        (B["input_tokens"], B["output_tokens"], 2)]


def test_a_remote_compaction_keeps_its_encrypted_item_and_has_no_empty_summary(tmp_path):
    # codex-rs core/src/compact_remote.rs: message "", the server's items (user messages and
    # an encrypted ``compaction``) as the replacement history
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the parser"}]},
        {"type": "compaction", "encrypted_content": "gAAAAABpZ"},
    ]
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(_compacting_rollout({"message": "", "replacement_history": history})))
    lake, summary = ingest_paths(tmp_path, path)
    assert summary.quarantined == 0
    assert rows(lake, "SELECT line_no, role, kind, subtype, is_prompt, text FROM messages "
                      "WHERE line_no = 8 ORDER BY seq") == [
        (8, "system", "boundary", "compacted", False, ""),
        (8, "user", "summary", "replacement_history", False, "fix the parser"),
        (8, "system", "other", "compaction", False, ""),
    ]
    assert rows(lake, "SELECT n_prompts, n_tool_calls FROM sessions") == [(2, 0)]


def test_a_compaction_message_no_replacement_item_repeats_keeps_its_own_summary_row(tmp_path):
    history = [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "fix the parser"}]}]
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(_compacting_rollout({"message": SUMMARY,
                                                   "replacement_history": history})))
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT role, kind, subtype, json_path, text FROM messages "
                      "WHERE line_no = 8 ORDER BY seq") == [
        ("system", "boundary", "compacted", None, ""),
        ("user", "summary", "compacted", None, SUMMARY),
        ("user", "summary", "replacement_history", "/payload/replacement_history/0",
         "fix the parser"),
    ]


def test_a_replacement_history_item_that_is_not_an_object_quarantines_the_line(tmp_path):
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(_compacting_rollout({"message": "", "replacement_history": ["x"]})))
    lake, summary = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT line_no, reason FROM quarantine") == [
        (8, "replacement_history[0] must be a response item object, found str")]
    assert scalar(lake, "SELECT count(*) FROM messages WHERE line_no = 8") == 0


@pytest.mark.parametrize("history, found", [(True, "bool"), (3, "int"), ("x", "str"),
                                            ({"a": 1}, "dict")])
def test_a_replacement_history_that_is_not_a_list_quarantines_the_line(tmp_path, history, found):
    # it was iterated as a list: the line was lost to "reader failed: TypeError/AttributeError"
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(_compacting_rollout({"message": SUMMARY,
                                                   "replacement_history": history})))
    lake, summary = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT line_no, reason FROM quarantine") == [
        (8, f"replacement_history must be a list of response items, found {found}")]
    assert (summary.records, summary.quarantined) == (10, 1)


# the TypeScript CLI (codex-cli/src/utils/storage/save-rollout.ts, removed in Aug 2025):
# JSON.stringify({session: {timestamp, id, instructions}, items}, null, 2), items as the
# Responses API and the agent loop made them
TS_ID = "5f7a1c2e-8b9d-4e3f-a1b2-c3d4e5f60718"
TS_NAME = f"rollout-2025-05-02-{TS_ID}.json"
TS_SHELL = json.dumps({"output": "ls: nope: No such file or directory\n",
                       "metadata": {"exit_code": 1, "duration_seconds": 0.1}})
TS_DOC = {
    "session": {"timestamp": "2025-05-02T09:14:03.120Z", "id": TS_ID,
                "instructions": "Prefer small diffs."},
    "items": [
        {"role": "user", "content": [{"type": "input_text", "text": "list the nope folder"}],
         "type": "message"},
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "**Listing**"}],
         "duration_ms": 2107},
        {"id": "fc_1", "type": "function_call", "status": "completed",
         "arguments": "{\"command\":[\"ls\",\"nope\"]}", "call_id": "call_1", "name": "shell"},
        {"type": "function_call_output", "call_id": "call_1", "output": TS_SHELL},
        {"id": "lsh_1", "type": "local_shell_call", "call_id": "call_2", "status": "completed",
         "action": {"type": "exec", "command": ["ls"], "env": {}}},
        {"type": "local_shell_call_output", "call_id": "call_2",
         "output": json.dumps({"output": "a.txt\n", "metadata": {"exit_code": 0}})},
        {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "annotations": [], "text": "There is no nope folder."}]},
        {"id": "error-1746177250000", "type": "message", "role": "system",
         "content": [{"type": "input_text", "text": "⚠️  Network error while contacting OpenAI."}]},
    ],
}


def _ts_rollout(tmp_path) -> Path:
    path = tmp_path / ".codex" / "sessions" / TS_NAME
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(TS_DOC, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


def test_the_typescript_clis_whole_json_rollout_is_read_as_one_document(tmp_path):
    path = _ts_rollout(tmp_path)
    head = path.read_bytes()[:65536]
    assert detect(str(path), head) == "codex_cli_json"
    assert CodexCliReader.sniff(str(path), head) == 0
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.files, summary.lines, summary.records, summary.quarantined) == (1, 1, 1, 0)
    assert rows(lake, "SELECT format FROM sources") == [("codex_cli_json",)]
    assert rows(lake, "SELECT record_type FROM records") == [("rollout",)]
    # the session's time is when it was last saved; the items have none: the session is undated
    assert rows(lake, "SELECT session_id, format, project, started_at FROM sessions") == [
        (TS_ID, "codex_cli", None, None)]
    assert rows(lake, "SELECT json_path FROM session_info") == [("/session",)]
    assert rows(lake, "SELECT json_path, role, kind, subtype, is_prompt, call_id, text FROM messages "
                      "ORDER BY seq") == [
        ("/items/0", "user", "text", None, True, None, "list the nope folder"),
        ("/items/1", "assistant", "thinking", None, False, None, "**Listing**"),
        ("/items/2", "assistant", "tool_use", None, False, "call_1", '{"command":["ls","nope"]}'),
        ("/items/3", "tool", "tool_result", None, False, "call_1", TS_SHELL),
        ("/items/4", "assistant", "tool_use", None, False, "call_2",
         '{"type":"exec","command":["ls"],"env":{}}'),
        ("/items/5", "tool", "tool_result", None, False, "call_2",
         TS_DOC["items"][5]["output"]),
        ("/items/6", "assistant", "text", None, False, None, "There is no nope folder."),
        ("/items/7", "system", "meta", "system", False, None,
         "⚠️  Network error while contacting OpenAI."),
    ]
    assert rows(lake, "SELECT line_no, json_path, call_id, tool_name, tool_family FROM tool_calls "
                      "ORDER BY seq") == [
        (1, "/items/2", "call_1", "shell", "shell"), (1, "/items/4", "call_2", "local_shell", "shell")]
    assert rows(lake, "SELECT line_no, json_path, call_id, tool_name, is_error FROM tool_results "
                      "ORDER BY seq") == [
        (1, "/items/3", "call_1", "shell", True), (1, "/items/5", "call_2", "local_shell", False)]


def test_a_json_rollout_item_with_a_bad_content_costs_that_item_naming_it(tmp_path):
    # the reason used to be the JSONL form's "message.content must be ...": no item named;
    # and the whole rollout was quarantined for it
    whole = tmp_path / "whole" / ".codex" / "sessions" / TS_NAME
    whole.parent.mkdir(parents=True)
    whole.write_text(json.dumps(TS_DOC, indent=2), encoding="utf-8")
    expected = rows(ingest_paths(tmp_path / "whole", whole)[0],
                    "SELECT json_path, role, kind, text FROM messages ORDER BY seq")
    doc = json.loads(json.dumps(TS_DOC))
    doc["items"][6]["content"] = 7
    path = tmp_path / ".codex" / "sessions" / TS_NAME
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (1, 0)
    assert rows(lake, "SELECT line_no, reason FROM quarantine") == [
        (0, "items[6].content must be a list of content items, found int")]
    # every other item is read as in the rollout left whole
    assert rows(lake, "SELECT json_path, role, kind, text FROM messages ORDER BY seq") == [
        row for row in expected if not row[0].startswith("/items/6")]
    assert len(expected) - scalar(lake, "SELECT count(*) FROM messages") == 1


def test_sniffing_claims_a_json_rollout_by_its_session_object_and_not_other_json():
    doc = json.dumps(TS_DOC, indent=2).encode()
    assert CodexCliJsonReader.sniff(f"/h/.codex/sessions/{TS_NAME}", doc) == 95
    assert CodexCliJsonReader.sniff("/h/.codex/sessions/old.json", doc) == 90
    assert CodexCliJsonReader.sniff("/tmp/x.json", doc) == 70
    assert CodexCliJsonReader.sniff(f"/h/{TS_NAME}l", doc) == 0      # .jsonl
    for path in REAL.rglob("*"):
        if path.is_file():
            assert CodexCliJsonReader.sniff(str(path), path.read_bytes()[:65536]) == 0, path
    assert CodexCliJsonReader.sniff("/tmp/x.json", b'{"sessionId": "s", "messages": []}') == 0


def test_apply_and_restore_are_byte_exact_on_a_json_rollout_and_a_tool_search(tmp_path):
    from pipeline.stages.apply import apply_policy
    from pipeline.stages.restore import restore
    from tests.test_apply import CLEARED, hand_evictions

    archive = tmp_path / "archive"
    ts = archive / TS_NAME
    ts.parent.mkdir(parents=True)
    ts.write_text(json.dumps(TS_DOC, indent=2, ensure_ascii=False), encoding="utf-8")
    search = archive / ROLLOUT
    search.write_bytes(b"".join(_tool_search_lines()))
    lake, summary = ingest_paths(tmp_path, archive)
    assert summary.quarantined == 0
    for action in ("clear", "clear_input"):
        table = hand_evictions(lake, policy=action, action=action)
        # the local_shell_call's input is its typed action: not an input clear_input takes
        assert table.num_rows == (4 if action == "clear" else 3)
        result = apply_policy(lake, policy=action, out=tmp_path / "out", evictions=table)
        assert result.problems == [] and result.files_pruned == 2, action
        pruned_ts = json.loads((tmp_path / "out" / action / TS_NAME).read_bytes())
        pruned_search = [json.loads(line) for line in
                         (tmp_path / "out" / action / ROLLOUT).read_bytes().splitlines()]
        if action == "clear":
            assert [pruned_ts["items"][i]["output"] for i in (3, 5)] == [CLEARED, CLEARED]
            assert pruned_search[4]["payload"]["tools"] == CLEARED
        else:
            assert pruned_ts["items"][2]["arguments"] == "{}"
            assert pruned_ts["items"][4] == TS_DOC["items"][4]
            assert pruned_search[3]["payload"]["arguments"] == {}
        for source in (ts, search):
            output = tmp_path / "out" / action / source.name
            assert restore(output, store=lake.store_dir).data == source.read_bytes(), (action, source)


def test_clearing_tool_inputs_keeps_a_local_shell_calls_action_and_still_clears_its_output(tmp_path):
    # the action object is the input Codex reads back on resume: a plan asking to clear it
    # made every night exit 1 ("no input for call ... here") and left the file unpruned
    from pipeline.core.lake import Lake
    from pipeline.stages.nightly import run_nightly
    from pipeline.stages.restore import restore

    action = {"type": "exec", "command": ["ls", "-la"], "timeout_ms": 10000}
    archive = tmp_path / "archive"
    path = archive / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join([
        _meta(), _turn("gpt-5-codex"), _say("user", "list the files"),
        _item("local_shell_call", call_id="ls_1", status="completed", action=action),
        _item("function_call_output", call_id="ls_1", output="total 0\n" + "-rw-r--r-- a.py\n" * 300),
        _item("web_search_call", id="ws_1", status="completed",
              action={"type": "search", "query": "ctxlake"}),
        _say("assistant", "done")]))
    lake = Lake(tmp_path / "lake")
    summary = run_nightly([archive], lake=lake, tz="UTC", workers=1,
                          policies=("context_editing(trigger=1, keep=0, clear_tool_inputs=true)",))
    assert summary.exit_code == 0 and summary.warnings == []
    (applied,) = summary.applied.values()
    assert applied.problems == [] and applied.evictions_applied == applied.evictions == 1
    pruned = Path(applied.out) / "sessions" / ROLLOUT
    lines = [json.loads(line) for line in pruned.read_text(encoding="utf-8").splitlines()]
    assert lines[3]["payload"]["action"] == action
    assert lines[5]["payload"]["action"] == {"type": "search", "query": "ctxlake"}
    assert "a.py" not in lines[4]["payload"]["output"]
    assert restore(pruned, store=lake.store_dir).data == path.read_bytes()
    assert run_nightly([archive], lake=lake, tz="UTC", workers=1, policies=(
        "context_editing(trigger=1, keep=0, clear_tool_inputs=true)",)).exit_code == 0


def test_usage_before_any_turn_context_names_a_model_is_priced_as_gpt_5_as_ccusage_does(tmp_path):
    # older rollouts have no turn_context: their calls were unpriced where ccusage prices
    # them as gpt-5 (its fallback); a later turn_context's model is used from then on
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join([
        _meta(), _say("user", "hi"), _tokens(_usage(1000, 200, 50, 10), 1),
        _turn("gpt-5-codex"), _tokens(_usage(3000, 1200, 90, 10), 2)]))
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT model, input_tokens, cache_read_tokens FROM messages "
                      "WHERE subtype = 'token_count' ORDER BY seq") == [
        ("gpt-5", 800, 200), ("gpt-5-codex", 1000, 1000)]


def test_a_token_counts_call_is_its_last_token_usage_as_ccusage_counts_it(tmp_path):
    # probed on ccusage 20.0.24: a repeated total is no call; the call is last_token_usage
    # when given (not the total's increase), else the increase; cached input is at most input
    path = tmp_path / "sessions" / ROLLOUT
    path.parent.mkdir(parents=True)
    first, second = _usage(100, 0, 10, 0), _usage(300, 0, 30, 0)
    path.write_bytes(b"".join([
        _meta(), _turn("gpt-5"),
        _tokens(first, 1, last=first), _tokens(first, 2, last=first),   # the same call again
        _tokens(second, 3, last=_usage(50, 0, 5, 0)),                  # not the increase (200)
        _line("event_msg", {"type": "token_count",                     # no total at all
                            "info": {"last_token_usage": _usage(40, 0, 4, 0)}}, 4),
        _tokens(_usage(500, 0, 40, 0), 5, last=_usage(20, 30, 2, 0)),  # cached over input
    ]))
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT input_tokens, cache_read_tokens, output_tokens FROM messages "
                      "WHERE subtype = 'token_count' ORDER BY seq") == [
        (100, 0, 10), (50, 0, 5), (40, 0, 4), (0, 20, 2)]
