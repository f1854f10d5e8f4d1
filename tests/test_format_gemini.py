"""Gemini CLI readers: the real legacy session (exact counts worked out from the raw JSON) and
hand-made JSONL recordings for ``$set``, ``$rewindTo`` and re-appended message ids."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pipeline.formats import detect
from pipeline.formats.base import SEQ_STRIDE
from pipeline.formats.codex_cli import CodexCliReader
from pipeline.formats.gemini_cli import GeminiCliJsonlReader, GeminiCliReader
from pipeline.stages.ingest import ingest
from tests.helpers.lake import REAL, ingest_paths, rows, scalar

SAMPLE = REAL / "gemini" / "gemini_session.json"


def _doc() -> dict:
    return json.loads(SAMPLE.read_text(encoding="utf-8"))


def _calls(doc: dict) -> list[dict]:
    return [call for m in doc["messages"] for call in m.get("toolCalls") or []]


def _output(call: dict) -> dict:
    return call["result"][0]["functionResponse"]["response"]


def _failed(call: dict) -> bool:
    output = _output(call)
    codes = re.findall(r"^Exit Code: (-?\d+)$", output.get("output", ""), re.MULTILINE)
    return call["status"] != "success" or "error" in output or bool(codes and codes[-1] != "0")


# ---------------------------------------------------------------------------------------
# The real sample
# ---------------------------------------------------------------------------------------
def test_the_real_session_ingests_whole_with_nothing_quarantined(tmp_path):
    lake, summary = ingest_paths(tmp_path, SAMPLE)
    assert (summary.files, summary.lines, summary.records, summary.quarantined) == (1, 1, 1, 0)
    doc = _doc()
    assert rows(lake, "SELECT session_id, format, project, first_user_text, model FROM sessions") == [
        (doc["sessionId"], "gemini_cli", doc["projectHash"],
         next(m["content"] for m in doc["messages"] if m["type"] == "user"),
         doc["messages"][-1]["model"])]
    assert rows(lake, "SELECT format FROM sources") == [("gemini_cli",)]


def test_the_real_session_has_one_row_per_thought_text_call_and_result(tmp_path):
    lake, _ = ingest_paths(tmp_path, SAMPLE)
    doc = _doc()
    gemini = [m for m in doc["messages"] if m["type"] == "gemini"]
    expected = {
        ("user", "text"): sum(1 for m in doc["messages"] if m["type"] == "user"),
        ("assistant", "thinking"): sum(len(m.get("thoughts") or []) for m in gemini),
        ("assistant", "text"): sum(1 for m in gemini if m["content"]),
        ("assistant", "tool_use"): len(_calls(doc)),
        ("tool", "tool_result"): sum(1 for c in _calls(doc) if c.get("result")),
    }
    got = dict(((role, kind), n) for role, kind, n in rows(
        lake, "SELECT role, kind, count(*) FROM messages GROUP BY ALL"))
    assert got == expected
    assert scalar(lake, "SELECT count(*) FROM messages WHERE is_prompt") == expected[("user", "text")]
    # one API call per gemini message
    assert scalar(lake, "SELECT n_api_calls FROM sessions") == len(gemini)


def test_real_tool_calls_pair_with_their_results_and_a_failed_exit_code_is_an_error(tmp_path):
    lake, _ = ingest_paths(tmp_path, SAMPLE)
    calls = _calls(_doc())
    # the CLI says status "success" for every call; one shell output reports Exit Code: 1
    failed = sum(1 for c in calls if _failed(c))
    assert failed == 1
    assert scalar(lake, "SELECT count(*) FROM tool_calls") == len(calls)
    assert scalar(lake, "SELECT count(*) FROM tool_results") == len(calls)
    assert scalar(lake, "SELECT count(*) FROM tool_results r SEMI JOIN tool_calls c "
                        "ON r.call_id = c.call_id AND r.session_id = c.session_id") == len(calls)
    assert scalar(lake, "SELECT count(*) FROM tool_results WHERE is_error") == failed
    assert sorted(rows(lake, "SELECT tool_name, tool_family FROM tool_calls")) == sorted(
        (c["name"], {"run_shell_command": "shell", "write_file": "write"}[c["name"]]) for c in calls)
    # the result text is the functionResponse output, the json_path points at that string
    texts = rows(lake, "SELECT m.text, r.json_path FROM messages m JOIN tool_results r "
                       "USING (call_id) WHERE m.kind = 'tool_result' ORDER BY m.seq")
    doc = _doc()
    pointer = "/messages/{}/toolCalls/{}/result/0/functionResponse/response/output"
    expected = [(_output(c)["output"], pointer.format(i, k))
                for i, m in enumerate(doc["messages"]) for k, c in enumerate(m.get("toolCalls") or [])]
    assert texts == expected


def test_real_usage_is_counted_once_per_message_with_cache_outside_input(tmp_path):
    lake, _ = ingest_paths(tmp_path, SAMPLE)
    tokens = [m["tokens"] for m in _doc()["messages"] if m.get("tokens")]
    expected = (sum(t["input"] - t["cached"] + t["tool"] for t in tokens),
                sum(t["output"] + t["thoughts"] for t in tokens),
                sum(t["cached"] for t in tokens),
                sum(t["thoughts"] for t in tokens),
                len(tokens))
    got = rows(lake, "SELECT sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), "
                     "sum(reasoning_tokens), count(input_tokens) FROM messages")[0]
    assert got == expected
    # input + cache read + output adds up to the recorded total
    assert got[0] + got[1] + got[2] == sum(t["total"] for t in tokens)
    assert rows(lake, "SELECT DISTINCT usage_scope FROM messages "
                      "WHERE input_tokens IS NOT NULL") == [("call",)]


def test_sniffing_claims_the_gemini_files_and_nothing_else():
    head = SAMPLE.read_bytes()[:65536]
    assert detect(str(SAMPLE), head) == "gemini_cli"
    for path in REAL.rglob("*"):
        if path.is_file() and path != SAMPLE:
            other = path.read_bytes()[:65536]
            assert GeminiCliReader.sniff(str(path), other) == 0, path
            assert GeminiCliJsonlReader.sniff(str(path), other) == 0, path
    foreign = [b'{"messages": [{"role": "user", "content": "hi"}]}\n',
               b'{"role": "user", "content": [{"type": "text", "text": "hi"}]}\n',
               b'{"type": "user", "sessionId": "x", "uuid": "u", '
               b'"message": {"role": "user", "content": "hi"}}\n',
               b'{"timestamp": "t", "type": "session_meta", "payload": {"id": "x"}}\n']
    for line in foreign:
        assert GeminiCliJsonlReader.sniff("/a/b.jsonl", line) == 0, line
    assert GeminiCliJsonlReader.sniff("/a/session-2025-01-01T10-00-abcd1234.jsonl", _meta_line()) == 95
    assert CodexCliReader.sniff("/a/session-2025-01-01T10-00-abcd1234.jsonl", _meta_line()) == 0
    assert GeminiCliReader.sniff("/a/x.traj.json", head) == 0


# ---------------------------------------------------------------------------------------
# Hand-made JSONL recordings
# ---------------------------------------------------------------------------------------
SID = "5e55101d-0000-4000-8000-000000000001"


def _meta_line(**extra) -> bytes:
    meta = {"sessionId": SID, "projectHash": "ab" * 32, "startTime": "2026-01-02T10:00:00.000Z",
            "lastUpdated": "2026-01-02T10:00:00.000Z", "kind": "main", **extra}
    return json.dumps(meta).encode() + b"\n"


def _msg(mid: str, mtype: str, content, **extra) -> dict:
    return {"id": mid, "timestamp": "2026-01-02T10:00:01.000Z", "type": mtype, "content": content,
            **extra}


def _write(path: Path, objs: list) -> list[tuple[int, int]]:
    """Write JSONL; return (byte_offset, byte_len) per line (1-based index = position + 1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data, spans = b"", []
    for obj in objs:
        line = obj if isinstance(obj, bytes) else json.dumps(obj).encode() + b"\n"
        spans.append((len(data), len(line)))
        data += line
    path.write_bytes(data)
    return spans


SHELL_FAIL = [{"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {
    "output": "Command: false\nDirectory: (root)\nOutput: (empty)\nError: (none)\n"
              "Exit Code: 1\nSignal: 0"}}}]
TOKENS = {"input": 100, "output": 10, "cached": 40, "thoughts": 5, "tool": 2, "total": 117}


def test_last_definition_wins_and_rewind_drops_the_message_and_everything_after(tmp_path):
    path = tmp_path / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    objs = [
        _meta_line(),                                                          # 1
        _msg("u1", "user", [{"text": "first prompt"}]),                        # 2
        _msg("g1", "gemini", [{"text": "draft"}], model="gemini-2.5-pro"),     # 3
        _msg("g1", "gemini", [{"text": "final answer"}], model="gemini-2.5-pro",  # 4
             tokens=TOKENS, thoughts=[{"subject": "Plan", "description": "run it",
                                       "timestamp": "2026-01-02T10:00:00.500Z"}],
             toolCalls=[{"id": "c1", "name": "run_shell_command", "args": {"command": "false"},
                         "status": "success", "timestamp": "2026-01-02T10:00:02.000Z",
                         "result": SHELL_FAIL}]),
        _msg("u2", "user", "second prompt"),                                   # 5
        _msg("g2", "gemini", "to be rewound", model="gemini-2.5-pro"),         # 6
        {"$rewindTo": "u2"},                                                   # 7
        _msg("u3", "user", "/help", displayContent="/help"),                  # 8
        {"$set": {"lastUpdated": "2026-01-02T10:05:00.000Z", "summary": "a test"}},  # 9
        _msg("u4", "user", "third prompt"),                                    # 10
        _msg("i1", "info", "Switched model"),                                  # 11
    ]
    spans = _write(path, objs)
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.lines, summary.records, summary.quarantined) == (11, 11, 0)
    got = rows(lake, "SELECT line_no, block_no, seq, byte_offset, byte_len, uuid, role, kind, text, "
                     "is_prompt, input_tokens, json_path FROM messages ORDER BY seq")

    def at(line_no, block):
        return (line_no, block, line_no * SEQ_STRIDE + block, *spans[line_no - 1])

    assert got == [
        (*at(2, 0), "u1", "user", "text", "first prompt", True, None, "/content"),
        (*at(4, 0), "g1", "assistant", "thinking", "Plan\n\nrun it", False, 62, "/thoughts/0"),
        (*at(4, 1), "g1", "assistant", "text", "final answer", False, None, "/content"),
        (*at(4, 2), "g1", "assistant", "tool_use", '{"command":"false"}', False, None,
         "/toolCalls/0/args"),
        (*at(4, 3), "g1", "tool", "tool_result", SHELL_FAIL[0]["functionResponse"]["response"]["output"],
         False, None, "/toolCalls/0/result/0/functionResponse/response/output"),
        (*at(8, 0), "u3", "user", "meta", "/help", False, None, "/content"),
        (*at(10, 0), "u4", "user", "text", "third prompt", True, None, "/content"),
        (*at(11, 0), "i1", "system", "meta", "Switched model", False, None, "/content"),
    ]
    assert rows(lake, "SELECT input_tokens, output_tokens, cache_read_tokens, reasoning_tokens, "
                      "api_call_id FROM messages WHERE input_tokens IS NOT NULL") == [
        (100 - 40 + 2, 10 + 5, 40, 5, "g1")]
    assert rows(lake, "SELECT call_id, is_error, line_no, seq FROM tool_results") == [
        ("c1", True, 4, 4 * SEQ_STRIDE + 3)]
    assert rows(lake, "SELECT call_id, line_no, seq, tool_family FROM tool_calls") == [
        ("c1", 4, 4 * SEQ_STRIDE + 2, "shell")]
    info = rows(lake, "SELECT session_id, format, project, line_no, meta_json FROM session_info")
    assert [i[:4] for i in info] == [(SID, "gemini_cli", "ab" * 32, 1)]
    assert json.loads(info[0][4])["summary"] == "a test"
    assert rows(lake, "SELECT format FROM sources") == [("gemini_cli_jsonl",)]
    assert rows(lake, "SELECT line_no, record_type, session_id FROM records ORDER BY line_no")[6:9] == [
        (7, "rewind", SID), (8, "message:user", SID), (9, "set", SID)]


def test_a_set_of_messages_replaces_the_list_and_later_lines_append_to_it(tmp_path):
    path = tmp_path / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    replaced = [_msg("u1", "user", [{"text": "first prompt (masked)"}]),
                _msg("g9", "gemini", [{"text": "summary of the work"}], model="m")]
    spans = _write(path, [
        _meta_line(),
        _msg("u1", "user", "first prompt"),
        _msg("g1", "gemini", "answer", model="m"),
        {"$set": {"messages": replaced, "lastUpdated": "2026-01-02T10:09:00.000Z"}},
        _msg("u5", "user", "next prompt"),
    ])
    lake, summary = ingest_paths(tmp_path, path)
    assert summary.quarantined == 0
    assert rows(lake, "SELECT uuid, text, line_no, block_no, byte_offset, json_path FROM messages "
                      "ORDER BY seq") == [
        ("u1", "first prompt (masked)", 4, 0, spans[3][0], "/$set/messages/0/content"),
        ("g9", "summary of the work", 4, 1, spans[3][0], "/$set/messages/1/content"),
        ("u5", "next prompt", 5, 0, spans[4][0], "/content"),
    ]


def test_a_rewind_to_an_unknown_id_drops_every_message(tmp_path):
    path = tmp_path / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    _write(path, [_meta_line(), _msg("u1", "user", "a"), {"$rewindTo": "nope"},
                  _msg("u2", "user", "b")])
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT uuid FROM messages") == [("u2",)]


def test_growing_a_jsonl_recording_rereads_it_whole_without_duplicates(tmp_path):
    path = tmp_path / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    _write(path, [_meta_line(), _msg("u1", "user", "a"), _msg("g1", "gemini", "draft", model="m")])
    lake, _ = ingest_paths(tmp_path, path)
    with open(path, "ab") as handle:
        final = _msg("g1", "gemini", "final", model="m", tokens=TOKENS)
        handle.write(json.dumps(final).encode() + b"\n")
        handle.write(json.dumps({"$rewindTo": "u1"}).encode() + b"\n")
        handle.write(json.dumps(_msg("u2", "user", "again")).encode() + b"\n")
    summary = ingest([path], lake=lake, workers=1)
    assert (summary.files_reingested, summary.lines, summary.records) == (1, 6, 6)
    # the rewound g1 leaves only its usage (a billed call), the transcript has no text of it
    assert rows(lake, "SELECT uuid, kind, subtype, text, line_no FROM messages ORDER BY seq") == [
        ("g1", "meta", "usage_rewound", "", 4), ("u2", "text", None, "again", 6)]
    assert rows(lake, "SELECT generation, records FROM sources") == [(2, 6)]
    assert scalar(lake, "SELECT count(*) FROM records") == 6


def test_a_copied_jsonl_recording_with_the_same_bytes_is_not_read_again(tmp_path):
    # a restore or an rsync gives every file a new inode and ctime: same bytes, no new work
    path = tmp_path / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    _write(path, [_meta_line(), _msg("u1", "user", "a"), _msg("g1", "gemini", "b", model="m")])
    lake, _ = ingest_paths(tmp_path, path)
    copy = path.with_name(path.name + ".copy")
    copy.write_bytes(path.read_bytes())
    copy.replace(path)
    summary = ingest([path], lake=lake, workers=1)
    assert (summary.files_unchanged, summary.files_reingested, summary.records) == (1, 0, 0)
    assert rows(lake, "SELECT generation, records FROM sources") == [(1, 3)]


def test_a_subagent_recording_points_to_its_parent_folder(tmp_path):
    parent = "11111111-2222-3333-4444-555555555555"
    path = tmp_path / "chats" / parent / f"{SID}.jsonl"
    _write(path, [_meta_line(kind="subagent", directories=["/work/proj"]),
                  _msg("u1", "user", "do the sub-task")])
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT session_id, project, parent_session_id FROM sessions") == [
        (SID, "/work/proj", parent)]


def test_a_malformed_message_line_is_quarantined_and_the_rest_survives(tmp_path):
    path = tmp_path / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    _write(path, [_meta_line(), _msg("u1", "user", "ok"),
                  {"id": "bad", "type": "gemini", "content": "x", "toolCalls": {"not": "a list"}},
                  _msg("u2", "user", "still here")])
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (3, 1)
    assert rows(lake, "SELECT line_no, reason FROM quarantine") == [
        (3, "message record (bad): 'toolCalls' must be a list, found dict")]
    assert rows(lake, "SELECT uuid FROM messages ORDER BY seq") == [("u1",), ("u2",)]


def test_a_jsonl_reply_whose_count_no_table_holds_costs_that_reply_not_the_file(tmp_path):
    # its line is read (a message record); the file's messages are emitted at its end, where
    # the reply's row fails the row check: that reply alone is quarantined (line 0)
    path = tmp_path / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    _write(path, [_meta_line(), _msg("u1", "user", "ok"),
                  _msg("g1", "gemini", "big", tokens=dict(TOKENS, output=2 ** 65), model="m"),
                  _msg("g2", "gemini", "fine", tokens=TOKENS, model="m")])
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.lines, summary.records, summary.quarantined) == (4, 4, 0)
    assert [p.where for p in summary.problems] == [str(path)]
    assert rows(lake, "SELECT line_no, left(reason, 68), excerpt LIKE '{\"id\": \"g1\"%' "
                      "FROM quarantine") == [
        (0, "line 3: a value of the wrong type or range: usage output_tokens is 3", True)]
    assert rows(lake, "SELECT uuid, output_tokens FROM messages ORDER BY seq") == [
        ("u1", None), ("g2", 15)]
    assert rows(lake, "SELECT lines, records, quarantined FROM sources") == [(4, 4, 1)]


def test_function_parts_in_content_count_only_when_no_tool_call_entry_holds_them(tmp_path):
    path = tmp_path / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    synced = [
        _msg("u1", "user", [{"text": "run it"}]),
        _msg("g1", "gemini", [{"text": "ok"}, {"functionCall": {"id": "c1", "name": "run_shell_command",
                                                                  "args": {"command": "true"}}}],
             model="m", toolCalls=[{"id": "c1", "name": "run_shell_command", "args": {"command": "true"},
                                    "status": "success", "result": [{"functionResponse": {
                                        "id": "c1", "name": "run_shell_command",
                                        "response": {"output": "Exit Code: 0"}}}]}]),
        _msg("u2", "user", [{"functionResponse": {"id": "c1", "name": "run_shell_command",
                                                  "response": {"output": "Exit Code: 0"}}}]),
        _msg("g2", "gemini", [{"functionCall": {"id": "c2", "name": "read_file",
                                                "args": {"file_path": "a.txt"}}}], model="m"),
        _msg("u3", "user", [{"functionResponse": {"id": "c2", "name": "read_file",
                                                  "response": {"error": "no such file"}}}]),
    ]
    _write(path, [_meta_line(), {"$set": {"messages": synced}}])
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT uuid, role, kind, call_id, text FROM messages ORDER BY seq") == [
        ("u1", "user", "text", None, "run it"),
        ("g1", "assistant", "text", None, "ok"),
        ("g1", "assistant", "tool_use", "c1", '{"command":"true"}'),
        ("g1", "tool", "tool_result", "c1", "Exit Code: 0"),
        ("g2", "assistant", "tool_use", "c2", '{"file_path":"a.txt"}'),
        ("u3", "tool", "tool_result", "c2", "no such file"),
    ]
    assert rows(lake, "SELECT call_id, is_error FROM tool_results ORDER BY call_id") == [
        ("c1", False), ("c2", True)]
    assert rows(lake, "SELECT call_id, tool_family FROM tool_calls ORDER BY call_id") == [
        ("c1", "shell"), ("c2", "read")]


def test_a_rewound_or_replaced_model_reply_keeps_its_usage_as_a_meta_row_without_text(tmp_path):
    path = tmp_path / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    other = {"input": 50, "output": 4, "cached": 0, "thoughts": 0, "tool": 0, "total": 54}
    objs = [
        _meta_line(),                                                                   # 1
        _msg("u1", "user", "first"),                                                    # 2
        _msg("g1", "gemini", "kept", model="gemini-2.5-pro", tokens=TOKENS),            # 3
        _msg("u2", "user", "second"),                                                   # 4
        _msg("g2", "gemini", "to be rewound", model="gemini-2.5-pro", tokens=TOKENS),   # 5
        {"$rewindTo": "u2"},                                                            # 6
        _msg("g3", "gemini", "left out by the re-sync", model="gemini-2.5-flash", tokens=other),  # 7
        {"$set": {"messages": [_msg("u1", "user", "first"),
                               _msg("g1", "gemini", "kept", model="gemini-2.5-pro", tokens=TOKENS)]}},
    ]
    _write(path, objs)
    lake, summary = ingest_paths(tmp_path, path)
    assert summary.quarantined == 0
    got = rows(lake, "SELECT uuid, role, kind, subtype, text, line_no, json_path, model, input_tokens, "
                     "output_tokens, cache_read_tokens, reasoning_tokens FROM messages "
                     "WHERE input_tokens IS NOT NULL ORDER BY seq")
    # input - cached + tool, output + thoughts, cached, thoughts (the module's normalisation)
    usage = (100 - 40 + 2, 10 + 5, 40, 5)
    assert got == [
        ("g2", "assistant", "meta", "usage_rewound", "", 5, "/tokens", "gemini-2.5-pro", *usage),
        ("g3", "assistant", "meta", "usage_replaced", "", 7, "/tokens", "gemini-2.5-flash", 50, 4, 0, 0),
        ("g1", "assistant", "text", None, "kept", 8, "/$set/messages/1/content", "gemini-2.5-pro", *usage),
    ]
    # the usage report counts the three billed calls, as ccusage (which reads every gemini line)
    from pipeline.stages.usage import usage_report
    totals = usage_report(lake, period="day", tz="UTC").to_dict()["totals"]
    assert (totals["api_calls"], totals["input_tokens"], totals["cache_read_tokens"]) == (3, 62 * 2 + 50, 80)
