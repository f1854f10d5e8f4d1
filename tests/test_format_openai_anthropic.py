"""OpenAI chat and Anthropic Messages logs: both line shapes, tool pairing, usage, sniffing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.formats import detect
from pipeline.formats.anthropic_messages import AnthropicMessagesReader
from pipeline.formats.openai_chat import OpenAIChatReader
from tests.helpers.lake import REAL, ingest_paths, rows, scalar


def _jsonl(tmp_path: Path, name: str, lines: list) -> Path:
    archive = tmp_path / "archive"
    archive.mkdir(exist_ok=True)
    path = archive / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _call(call_id: str, name: str, args: dict) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


OPENAI_CONVERSATIONS = [
    {"id": "conv-a", "model": "gpt-4.1", "messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("call_1", "shell", {"command": ["ls"]}),
                        _call("call_2", "read_file", {"path": "a.py"})],
         "usage": {"prompt_tokens": 120, "completion_tokens": 30,
                   "prompt_tokens_details": {"cached_tokens": 100},
                   "completion_tokens_details": {"reasoning_tokens": 12}}},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "print(1)"}]},
        {"role": "assistant", "content": "two files"},
    ]},
    {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": "", "function_call": {"name": "lookup", "arguments": "{\"q\": 1}"}},
        {"role": "function", "name": "lookup", "content": "found"},
        {"role": "assistant", "content": "done", "reasoning_content": "thinking..."},
    ], "usage": {"prompt_tokens": 50, "completion_tokens": 5}},
]


def test_openai_conversations_per_line_pair_tools_and_keep_usage(tmp_path):
    path = _jsonl(tmp_path, "chats.jsonl", OPENAI_CONVERSATIONS)
    lake, summary = ingest_paths(tmp_path, path.parent)
    assert summary.quarantined == 0 and summary.records == 2
    assert rows(lake, "SELECT session_id, format FROM session_info ORDER BY session_id") == [
        ("chats:2", "openai_chat"), ("conv-a", "openai_chat")]
    assert rows(lake, "SELECT json_path, role, kind, subtype, is_prompt FROM messages "
                      "WHERE session_id = 'conv-a' ORDER BY seq") == [
        ("/messages/0", "system", "text", "developer", None),
        ("/messages/1", "user", "text", None, True),
        ("/messages/2/tool_calls/0", "assistant", "tool_use", None, None),
        ("/messages/2/tool_calls/1", "assistant", "tool_use", None, None),
        ("/messages/3", "tool", "tool_result", None, None),
        ("/messages/4", "tool", "tool_result", None, None),
        ("/messages/5", "assistant", "text", None, None),
    ]
    assert rows(lake, "SELECT c.call_id, c.tool_name, c.tool_family, c.input_json, r.tool_name "
                      "FROM tool_calls c JOIN tool_results r USING (session_id, call_id) "
                      "WHERE session_id = 'conv-a' ORDER BY c.call_id") == [
        ("call_1", "shell", "shell", '{"command":["ls"]}', "shell"),
        ("call_2", "read_file", "read", '{"path":"a.py"}', "read_file")]
    # usage once, on the first row of the assistant message; input excludes cached reads
    assert rows(lake, "SELECT input_tokens, cache_read_tokens, output_tokens, reasoning_tokens, "
                      "usage_scope, model FROM messages WHERE usage_scope IS NOT NULL "
                      "AND session_id = 'conv-a'") == [(20, 100, 30, 12, "call", "gpt-4.1")]
    # the rows of one assistant message count as one API call
    assert scalar(lake, "SELECT count(DISTINCT api_call_id) FROM messages "
                        "WHERE session_id = 'conv-a' AND role = 'assistant'") == 2
    # conversation 2: legacy function_call pairing, thinking, line-level usage as a run row
    assert rows(lake, "SELECT c.call_id, c.tool_name, r.json_path FROM tool_calls c "
                      "JOIN tool_results r USING (session_id, call_id) "
                      "WHERE session_id = 'chats:2'") == [
        ("chats:2#/messages/1/function_call", "lookup", "/messages/2")]
    assert rows(lake, "SELECT kind, text FROM messages WHERE session_id = 'chats:2' "
                      "AND json_path IN ('/messages/0', '/messages/3') ORDER BY seq") == [
        ("text", "hi\n[image_url]"), ("thinking", "thinking..."), ("text", "done")]
    assert rows(lake, "SELECT role, kind, subtype, input_tokens, output_tokens, usage_scope "
                      "FROM messages WHERE session_id = 'chats:2' AND usage_scope IS NOT NULL") \
        == [("assistant", "other", "usage", 50, 5, "run")]


def test_openai_messages_per_line_form_one_session_that_continues_after_an_append(tmp_path):
    lines = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "id": "resp-1", "content": "ok",
         "tool_calls": [_call("c9", "grep_search", {"pattern": "x"})],
         "usage": {"prompt_tokens": 10, "completion_tokens": 4}},
    ]
    path = _jsonl(tmp_path, "flat.jsonl", lines)
    lake, summary = ingest_paths(tmp_path, path)
    assert summary.records == 3
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"role": "tool", "tool_call_id": "c9", "content": "hit"}) + "\n")
    _, summary = ingest_paths(tmp_path, path)
    assert summary.files_appended == 1 and summary.records == 1
    assert rows(lake, "SELECT DISTINCT session_id FROM messages") == [("flat",)]
    assert scalar(lake, "SELECT count(*) FROM session_info") == 1
    assert rows(lake, "SELECT line_no, role, kind, call_id, tool_name FROM messages "
                      "WHERE call_id IS NOT NULL ORDER BY seq") == [
        (3, "assistant", "tool_use", "c9", "grep_search"),
        (4, "tool", "tool_result", "c9", "grep_search")]
    assert rows(lake, "SELECT api_call_id, input_tokens, output_tokens FROM messages "
                      "WHERE usage_scope = 'call'") == [("resp-1", 10, 4)]


def test_same_named_logs_in_two_folders_are_two_sessions_and_both_usages_count(tmp_path):
    # teams (or days) each keep a `chat.jsonl`: without ids, the stem alone merged them into
    # one session whose made-up call ids collided, and one file's usage was dropped
    archive = tmp_path / "archive"
    for team, tokens in (("team-a", 100), ("team-b", 7000)):
        (archive / team).mkdir(parents=True)
        (archive / team / "chat.jsonl").write_text("".join(json.dumps(line) + "\n" for line in [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "ok", "model": "gpt-4o-mini",
             "usage": {"prompt_tokens": tokens, "completion_tokens": 10}}]), encoding="utf-8")
        (archive / team / "history.jsonl").write_text(json.dumps({"model": "claude-sonnet-4-5", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "yo"}],
             "usage": {"input_tokens": tokens * 2, "output_tokens": 3}}]}) + "\n", encoding="utf-8")
    (archive / "chat.jsonl").write_text(json.dumps({"role": "user", "content": "root"}) + "\n",
                                        encoding="utf-8")
    lake, summary = ingest_paths(tmp_path, archive)
    assert summary.files_new == 5 and summary.quarantined == 0
    assert rows(lake, "SELECT session_id, api_call_id, input_tokens FROM messages "
                      "WHERE usage_scope = 'call' ORDER BY session_id") == [
        ("chat@team-a", "chat@team-a#L2", 100), ("chat@team-b", "chat@team-b#L2", 7000),
        ("history@team-a:1", "history@team-a:1#/messages/1", 200),
        ("history@team-b:1", "history@team-b:1#/messages/1", 14000)]
    # a log at the archive root keeps its stem
    assert scalar(lake, "SELECT count(*) FROM session_info WHERE session_id = 'chat'") == 1


ANTHROPIC_CONVERSATION = {
    "id": "msgs-1", "model": "claude-sonnet-4-5", "system": "You are terse.",
    "messages": [
        {"role": "user", "content": "read a.py"},
        {"role": "assistant", "id": "msg_01", "content": [
            {"type": "thinking", "thinking": "need to read", "signature": "s"},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a.py"}},
            {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "false"}}],
         "usage": {"input_tokens": 12, "output_tokens": 40, "cache_creation_input_tokens": 300,
                   "cache_read_input_tokens": 900}},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "exit 1"}]}]},
        {"role": "assistant", "content": "Done."},
    ],
}


def test_anthropic_conversation_blocks_pairing_errors_and_usage(tmp_path):
    path = _jsonl(tmp_path, "claude_api.jsonl", [ANTHROPIC_CONVERSATION])
    lake, summary = ingest_paths(tmp_path, path)
    assert summary.quarantined == 0
    assert scalar(lake, "SELECT format FROM session_info") == "anthropic_messages"
    assert rows(lake, "SELECT json_path, role, kind FROM messages ORDER BY seq") == [
        ("/system", "system", "text"),
        ("/messages/0", "user", "text"),
        ("/messages/1/content/0", "assistant", "thinking"),
        ("/messages/1/content/1", "assistant", "text"),
        ("/messages/1/content/2", "assistant", "tool_use"),
        ("/messages/1/content/3", "assistant", "tool_use"),
        ("/messages/2/content/0", "tool", "tool_result"),
        ("/messages/2/content/1", "tool", "tool_result"),
        ("/messages/3", "assistant", "text"),
    ]
    assert rows(lake, "SELECT call_id, tool_name, is_error FROM tool_results ORDER BY call_id") \
        == [("toolu_1", "Read", False), ("toolu_2", "Bash", True)]
    assert rows(lake, "SELECT tool_family FROM tool_calls ORDER BY call_id") == [("read",), ("shell",)]
    assert rows(lake, "SELECT api_call_id, input_tokens, output_tokens, cache_creation_tokens, "
                      "cache_read_tokens, model FROM messages WHERE usage_scope = 'call'") == [
        ("msg_01", 12, 40, 300, 900, "claude-sonnet-4-5")]
    assert scalar(lake, "SELECT text FROM messages WHERE json_path = '/messages/2/content/1'") \
        == "exit 1"


def test_anthropic_messages_per_line_use_the_file_stem_as_session(tmp_path):
    lines = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Glob",
                                           "input": {"pattern": "*.md"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "README.md"}]},
    ]
    lake, summary = ingest_paths(tmp_path, _jsonl(tmp_path, "anthropic-log.jsonl", lines))
    assert summary.records == 3
    assert rows(lake, "SELECT DISTINCT session_id FROM messages") == [("anthropic-log",)]
    assert scalar(lake, "SELECT format FROM session_info") == "anthropic_messages"
    assert rows(lake, "SELECT r.call_id, r.tool_name, r.line_no FROM tool_results r "
                      "JOIN tool_calls c USING (session_id, call_id)") == [("t1", "Glob", 3)]
    # no message id recorded: the API call is named after the line
    assert rows(lake, "SELECT DISTINCT api_call_id FROM messages WHERE role = 'assistant'") == [
        ("anthropic-log#L2",)]


# -- server tools (web_search, web_fetch, ...) in a log with one message per line: apply finds
# their results and inputs in the assistant message's blocks -------------------------------
def _server_tool_log(tmp_path: Path) -> tuple[Path, list[dict]]:
    """An Anthropic Messages log (one message per line): a Glob call and its result, then an
    assistant message calling web_search and web_fetch, each answered by a large result in
    the same message (line 4)."""
    hits = [{"type": "web_search_result", "url": f"https://example.com/{i}", "title": f"Hit {i}",
             "encrypted_content": "Eq" + "x" * 6000, "page_age": None} for i in range(5)]
    page = "".join(f"line {i}: what the fetched page says about ctxlake\n" for i in range(2000))
    fetched = {"type": "web_fetch_result", "url": "https://example.com/ctxlake",
               "retrieved_at": "2026-03-14T10:00:00Z",
               "content": {"type": "document", "title": "ctxlake",
                           "source": {"type": "text", "media_type": "text/plain", "data": page}}}
    lines = [
        {"role": "user", "content": "what does ctxlake keep?"},
        {"role": "assistant", "id": "msg_01", "content": [
            {"type": "tool_use", "id": "toolu_01", "name": "Glob", "input": {"pattern": "*.md"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01",
                                      "content": "README.md"}]},
        {"role": "assistant", "id": "msg_02", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search",
             "input": {"query": "ctxlake"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": hits},
            {"type": "server_tool_use", "id": "srvtoolu_02", "name": "web_fetch",
             "input": {"url": "https://example.com/ctxlake"}},
            {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_02", "content": fetched},
            {"type": "text", "text": "It keeps every byte."}],
         "usage": {"input_tokens": 20, "output_tokens": 8}},
        {"role": "user", "content": "thanks"},
    ]
    return _jsonl(tmp_path, "anthropic-log.jsonl", lines), lines


def test_anthropic_messages_finds_server_tool_results_and_inputs_in_a_message_line():
    message = {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []},
        {"type": "mcp_tool_use", "id": "m1", "name": "echo", "server_name": "demo", "input": {}},
        {"type": "mcp_tool_result", "tool_use_id": "m1", "is_error": False, "content": "hi"}]}
    reader = AnthropicMessagesReader
    assert reader.result_holders(message, "s1") == [("content", 1, "content")]
    assert reader.input_holders(message, "s1") == [("content", 0, "input")]
    assert reader.result_holders(message, "m1") == [("content", 3, "content")]
    assert reader.input_holders(message, "m1") == [("content", 2, "input")]
    assert reader.result_holders(message, "other") == reader.input_holders(message, "other") == []


def test_large_server_tool_results_in_a_message_line_are_pruned_and_restored_byte_for_byte(tmp_path):
    import hashlib

    import pyarrow as pa

    from pipeline.stages.apply import apply_policy
    from pipeline.stages.restore import restore
    from tests.test_apply import hand_evictions

    path, lines = _server_tool_log(tmp_path)
    original = path.read_bytes()
    lake, summary = ingest_paths(tmp_path, path.parent)
    assert summary.quarantined == 0
    assert scalar(lake, "SELECT format FROM session_info") == "anthropic_messages"
    blocks = lines[3]["content"]
    payloads = {b["tool_use_id"]: json.dumps(b["content"], separators=(",", ":")).encode()
                for b in blocks if b["type"].endswith("_tool_result")}
    assert rows(lake, "SELECT call_id, tool_name, line_no, payload_sha256 FROM tool_results "
                      "WHERE call_id LIKE 'srvtoolu_%' ORDER BY call_id") == [
        ("srvtoolu_01", "web_search", 4, hashlib.sha256(payloads["srvtoolu_01"]).hexdigest()),
        ("srvtoolu_02", "web_fetch", 4, hashlib.sha256(payloads["srvtoolu_02"]).hexdigest())]
    # both server tool results pruned; only the web_fetch call's input cleared
    table = pa.concat_tables([
        hand_evictions(lake, policy="p", action="prune", where="r.call_id LIKE 'srvtoolu_%'"),
        hand_evictions(lake, policy="p", action="clear_input", where="c.call_id = 'srvtoolu_02'")])
    assert table.num_rows == 3
    summary = apply_policy(lake, policy="p", evictions=table)
    assert summary.problems == [] and summary.files_pruned == 1
    output = lake.root / "out" / "p" / "anthropic-log.jsonl"
    data = output.read_bytes()
    prunes = {ev["call_id"]: ev["replacement"] for ev in table.to_pylist()
              if ev["action"] == "prune"}
    expected = json.loads(json.dumps(lines[3]))
    expected["content"][1]["content"] = prunes["srvtoolu_01"]
    expected["content"][3]["content"] = prunes["srvtoolu_02"]
    expected["content"][2]["input"] = {}
    assert json.loads(data.splitlines()[3]) == expected
    # the other lines are untouched, the web_search call keeps its input
    assert [line for i, line in enumerate(data.splitlines()) if i != 3] == \
        [line for i, line in enumerate(original.splitlines()) if i != 3]
    assert b'"input": {"query": "ctxlake"}' in data.splitlines()[3]
    for payload in payloads.values():
        sha = hashlib.sha256(payload).hexdigest()
        assert (lake.store_dir / f"{sha}.payload").read_bytes() == payload
        assert f"compaction://{sha}".encode() in data
    assert b"x" * 100 not in data and b"line 1999:" not in data
    assert restore(output, store=lake.store_dir).data == original


@pytest.mark.parametrize("tool_use_id", [None, "", 7])
def test_a_server_tool_block_without_an_id_in_a_message_line_is_found_by_its_place(
        tmp_path, tool_use_id):
    """Such a block has no id for apply to find it by: its rows point at the block itself
    (apply used to take the line's whole ``content`` for it, refuse it on its hash check and
    leave the file unpruned, a problem of the nightly apply stage)."""
    from pipeline.stages.apply import apply_policy
    from pipeline.stages.restore import restore
    from tests.test_apply import hand_evictions

    path, lines = _server_tool_log(tmp_path)
    lines[3]["content"][0]["id"] = tool_use_id            # the web_search call
    lines[3]["content"][1]["tool_use_id"] = tool_use_id   # its result
    path = _jsonl(tmp_path, "anthropic-log.jsonl", lines)
    original = path.read_bytes()
    lake, summary = ingest_paths(tmp_path, path.parent)
    assert summary.quarantined == 0
    kept = tool_use_id if isinstance(tool_use_id, str) else None
    assert rows(lake, "SELECT line_no, json_path, call_id FROM tool_calls ORDER BY seq") == [
        (2, None, "toolu_01"), (4, "/content/0", kept), (4, None, "srvtoolu_02")]
    assert rows(lake, "SELECT line_no, json_path, call_id FROM tool_results ORDER BY seq") == [
        (3, None, "toolu_01"), (4, "/content/1", kept), (4, None, "srvtoolu_02")]
    for action in ("prune", "clear_input"):
        where = f"coalesce({'r' if action == 'prune' else 'c'}.call_id, '') = ''"
        table = hand_evictions(lake, policy=action, action=action, where=where)
        assert table.num_rows == 1
        result = apply_policy(lake, policy=action, out=tmp_path / "out", evictions=table)
        assert result.problems == [] and result.files_pruned == 1, action
        output = tmp_path / "out" / action / path.name
        block = json.loads(output.read_bytes().splitlines()[3])["content"][0 if action != "prune" else 1]
        assert block[("input" if action == "clear_input" else "content")] == \
            ({} if action == "clear_input" else table.column("replacement")[0].as_py())
        assert restore(output, store=lake.store_dir).data == original


def test_sniffing_tells_the_two_dialects_apart_and_leaves_other_formats_alone(tmp_path):
    def head(lines):
        return "".join(json.dumps(line) + "\n" for line in lines).encode()

    assert detect("/x/a.jsonl", head(OPENAI_CONVERSATIONS)) == "openai_chat"
    assert detect("/x/a.jsonl", head([ANTHROPIC_CONVERSATION])) == "anthropic_messages"
    assert detect("/x/a.jsonl", head([{"role": "tool", "tool_call_id": "c", "content": "x"}])) \
        == "openai_chat"
    assert detect("/x/a.jsonl", head([{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "n", "input": {}}]}])) == "anthropic_messages"
    # plain string messages fit both: either reader gives the same rows
    assert detect("/x/a.jsonl", head([{"role": "user", "content": "hi"}])) in (
        "openai_chat", "anthropic_messages")
    # a conversation line longer than the sniffed head is still recognised from its bytes
    long_line = json.dumps({"messages": [{"role": "user", "content": "x" * 70000},
                                         {"role": "tool", "tool_call_id": "c", "content": "y"}]})
    assert detect("/x/a.jsonl", long_line.encode()[:65536]) == "openai_chat"
    assert OpenAIChatReader.sniff("/x/a.json", head(OPENAI_CONVERSATIONS)) == 0
    for rel in ("claude_code/claude_session.jsonl", "claude_code/claude_agent.jsonl",
                "codex/codex_session.jsonl"):
        data = (REAL / rel).read_bytes()[:65536]
        assert OpenAIChatReader.sniff(str(REAL / rel), data) == 0, rel
        assert AnthropicMessagesReader.sniff(str(REAL / rel), data) == 0, rel
    old_codex = head([{"id": "u", "timestamp": "2025-05-01T00:00:00Z", "instructions": ""},
                      {"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "hi"}]}])
    assert OpenAIChatReader.sniff("/x/rollout.jsonl", old_codex) == 0
    assert AnthropicMessagesReader.sniff("/x/rollout.jsonl", old_codex) == 0


@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
def test_a_log_whose_first_request_opens_with_a_large_document_is_read_in_its_own_dialect(
        tmp_path, dialect):
    # the first 64 KiB hold only the document's text: no byte says which dialect it is, so
    # the sniff reads the whole first line (before: an Anthropic log was taken for OpenAI and
    # its tool_use/tool_result blocks were not calls)
    document = "lorem ipsum " * 10000
    if dialect == "anthropic":
        line = {"model": "claude-sonnet-4-5", "messages": [
            {"role": "user", "content": [{"type": "text", "text": document}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.py"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)"}]}],
            "system": "be brief"}
    else:
        line = {"model": "gpt-4o", "messages": [
            {"role": "user", "content": [{"type": "text", "text": document}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "Read", "arguments": "{\"path\": \"a.py\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"}]}
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "log.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert b"\n" not in (archive / "log.jsonl").read_bytes()[:65536]
    lake, summary = ingest_paths(tmp_path, archive)
    assert summary.problems == []
    assert rows(lake, "SELECT format FROM sources") == [
        ("anthropic_messages" if dialect == "anthropic" else "openai_chat",)]
    assert rows(lake, "SELECT tool_name, call_id FROM tool_calls") == [
        ("Read", "toolu_1" if dialect == "anthropic" else "call_1")]
    assert rows(lake, "SELECT call_id FROM tool_results") == [
        ("toolu_1" if dialect == "anthropic" else "call_1",)]


@pytest.mark.parametrize("line, reason", [
    ({"messages": "nope"}, "'messages' must be a list"),
    ({"messages": [{"role": 3, "content": "x"}]}, "needs a string 'role'"),
    ({"messages": [{"role": "user", "content": {"a": 1}}]}, "content must be a string"),
    ({"messages": [{"role": "assistant", "content": "x", "tool_calls": {"id": 1}}]},
     "tool_calls must be a list"),
])
def test_a_malformed_openai_line_is_quarantined_and_its_neighbours_kept(tmp_path, line, reason):
    good = {"messages": [{"role": "user", "content": "fine"},
                         {"role": "tool", "tool_call_id": "c", "content": "r"}]}
    path = _jsonl(tmp_path, "mixed.jsonl", [good, line, good])
    lake, summary = ingest_paths(tmp_path, path)
    assert summary.records == 2 and summary.quarantined == 1
    assert summary.problems[0].line_no == 2 and reason in summary.problems[0].reason
    assert rows(lake, "SELECT DISTINCT session_id FROM messages ORDER BY 1") == [
        ("mixed:1",), ("mixed:3",)]


def test_a_malformed_anthropic_block_is_quarantined(tmp_path):
    lines = [ANTHROPIC_CONVERSATION,
             {"messages": [{"role": "assistant", "content": [{"type": "tool_use"}, "text"]}]}]
    _, summary = ingest_paths(tmp_path, _jsonl(tmp_path, "a.jsonl", lines))
    assert summary.quarantined == 1
    assert "content block 1 is a str" in summary.problems[0].reason
