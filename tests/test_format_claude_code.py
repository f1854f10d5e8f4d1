"""Claude Code reader on the real samples: exact counts worked out from the raw JSON."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict

from tests.helpers.lake import REAL, ingest_paths, rows, scalar

CLAUDE = REAL / "claude_code"


def _lines(name: str) -> list[dict]:
    return [json.loads(line) for line in (CLAUDE / name).read_text(encoding="utf-8").splitlines()]


def _expected_usage(objs: list[dict]) -> dict[str, int]:
    """Usage once per (message.id, requestId), keeping the largest output_tokens (docs/formats.md)."""
    calls: dict[tuple, dict] = {}
    totals = defaultdict(int)
    for obj in objs:
        message = obj.get("message") or {}
        usage = message.get("usage")
        if obj.get("type") != "assistant" or not usage:
            continue
        key = (message.get("id"), obj.get("requestId"))
        if None in key:
            calls[("line", id(obj))] = usage
        elif key not in calls or usage["output_tokens"] > calls[key]["output_tokens"]:
            calls[key] = usage
    for usage in calls.values():
        totals["input"] += usage.get("input_tokens", 0)
        totals["output"] += usage.get("output_tokens", 0)
        totals["cache_write"] += usage.get("cache_creation_input_tokens", 0)
        totals["cache_read"] += usage.get("cache_read_input_tokens", 0)
    totals["calls"] = len(calls)
    return dict(totals)


def _expected_blocks(objs: list[dict]) -> dict[str, int]:
    counts = defaultdict(int)
    for obj in objs:
        content = (obj.get("message") or {}).get("content")
        if obj.get("type") not in ("user", "assistant"):
            continue
        blocks = [{"type": "text"}] if isinstance(content, str) else content
        for block in blocks:
            counts[block["type"]] += 1
            if block["type"] == "tool_result" and block.get("is_error"):
                counts["errors"] += 1
    return dict(counts)


def test_every_real_claude_file_ingests_with_nothing_quarantined(tmp_path):
    lake, summary = ingest_paths(tmp_path, CLAUDE)
    expected_lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in CLAUDE.glob("*.jsonl"))
    assert (summary.files, summary.lines, summary.records, summary.quarantined, summary.held_back) == \
        (4, expected_lines, expected_lines, 0, 0)
    assert scalar(lake, "SELECT count(*) FROM records") == expected_lines


def test_split_assistant_lines_are_counted_once_with_their_final_output_tokens(tmp_path):
    lake, _ = ingest_paths(tmp_path, CLAUDE / "claude_session.jsonl")
    objs = _lines("claude_session.jsonl")
    expected = _expected_usage(objs)
    got = rows(lake, "SELECT sum(input_tokens), sum(output_tokens), sum(cache_creation_tokens), "
                     "sum(cache_read_tokens), count(input_tokens) FROM messages")[0]
    assert got == (expected["input"], expected["output"], expected["cache_write"],
                   expected["cache_read"], expected["calls"])
    # the sample really has split lines: fewer API calls than assistant lines
    assert expected["calls"] < sum(1 for o in objs if o["type"] == "assistant")


def test_messages_tool_calls_and_results_match_the_content_blocks(tmp_path):
    for name in ("claude_session.jsonl", "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
                 "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"):
        lake, _ = ingest_paths(tmp_path / name, CLAUDE / name)
        blocks = _expected_blocks(_lines(name))
        assert scalar(lake, "SELECT count(*) FROM tool_calls") == blocks.get("tool_use", 0), name
        assert scalar(lake, "SELECT count(*) FROM tool_results") == blocks.get("tool_result", 0), name
        assert scalar(lake, "SELECT count(*) FILTER (WHERE is_error) FROM tool_results") == \
            blocks.get("errors", 0), name
        assert scalar(lake, "SELECT count(*) FROM messages WHERE kind = 'thinking'") == \
            blocks.get("thinking", 0), name
        paired = scalar(lake, "SELECT count(*) FROM tool_results r SEMI JOIN tool_calls c "
                              "ON r.session_id = c.session_id AND r.call_id = c.call_id")
        assert paired == blocks.get("tool_result", 0), name


def test_sub_agent_file_is_its_own_session_pointing_to_its_parent(tmp_path):
    lake, _ = ingest_paths(tmp_path, CLAUDE / "claude_session.jsonl", CLAUDE / "claude_agent.jsonl")
    agent = _lines("claude_agent.jsonl")[0]
    got = rows(lake, "SELECT session_id, parent_session_id, n_prompts FROM sessions "
                     "WHERE parent_session_id IS NOT NULL")
    assert got == [(f"{agent['sessionId']}/agent-{agent['agentId']}", agent["sessionId"], 1)]


def test_inline_sidechains_are_flagged_sub_agent_sessions_of_the_main_one(tmp_path):
    name = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
    lake, _ = ingest_paths(tmp_path, CLAUDE / name)
    objs = _lines(name)
    sidechain_lines = sum(1 for o in objs if o.get("isSidechain"))
    assert sidechain_lines == 22  # SOURCES.md
    assert scalar(lake, "SELECT count(DISTINCT line_no) FROM messages WHERE is_sidechain") == 22
    main = objs[0]["sessionId"]
    roots = [o["uuid"][:8] for o in objs if o.get("isSidechain") and o["parentUuid"] is None]
    assert scalar(lake, "SELECT list(session_id ORDER BY session_id) FROM sessions "
                        "WHERE parent_session_id = ?", [main]) == \
        sorted(f"{main}/sidechain-{root}" for root in roots)
    assert scalar(lake, "SELECT count(*) FROM messages WHERE is_sidechain AND session_id = ?",
                  [main]) == 0
    # the main session's own prompts: none (only Task prompts, inside the sidechains)
    human = [o for o in objs if o["type"] == "user" and not o.get("isSidechain") and not o.get("isMeta")
             and isinstance(o["message"]["content"], str)
             and not o["message"]["content"].lstrip().startswith("<command-")]
    assert scalar(lake, "SELECT n_prompts FROM sessions WHERE session_id = ?", [main]) == \
        len(human) == 0


def test_slash_commands_and_meta_records_are_not_prompts(tmp_path):
    name = "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
    lake, _ = ingest_paths(tmp_path, CLAUDE / name)
    objs = _lines(name)
    prompts = [o for o in objs if o["type"] == "user" and isinstance(o["message"]["content"], str)
               and not o.get("isMeta") and not o["message"]["content"].lstrip().startswith("<command-")]
    assert scalar(lake, "SELECT count(*) FROM messages WHERE is_prompt") == len(prompts)
    assert scalar(lake, "SELECT count(*) FROM messages WHERE kind = 'meta'") >= 1


def test_flags_written_as_strings_are_not_taken_as_true(tmp_path):
    # "false" is a non-empty string: bool() of it made every such message a sidechain's and a
    # meta record (no prompt), while the session itself was not split (that test was `is True`)
    name = "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
    objs = _lines(name)
    for obj in objs:
        if "isSidechain" in obj:
            obj["isSidechain"] = "false"
        if obj.get("type") == "user":
            obj["isMeta"] = "false"
    path = tmp_path / "archive" / name
    path.parent.mkdir()
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    lake, _ = ingest_paths(tmp_path, path)
    assert scalar(lake, "SELECT count(*) FROM messages WHERE is_sidechain OR is_meta") == 0
    assert scalar(lake, "SELECT count(*) FROM sessions") == 1


def test_file_history_snapshots_are_records_but_not_messages(tmp_path):
    lake, _ = ingest_paths(tmp_path, CLAUDE / "claude_session.jsonl")
    snapshots = sum(1 for o in _lines("claude_session.jsonl") if o["type"] == "file-history-snapshot")
    assert snapshots == 4
    assert scalar(lake, "SELECT count(*) FROM records WHERE record_type = 'file-history-snapshot'") == 4
    assert scalar(lake, "SELECT count(*) FROM messages m JOIN records r USING (source_id, line_no) "
                        "WHERE r.record_type = 'file-history-snapshot'") == 0


def test_session_metadata_lines_of_newer_versions_are_records_but_not_messages(tmp_path):
    sid = "5a1e0c55-0000-4000-8000-000000000001"
    lines = [
        {"type": "last-prompt", "lastPrompt": "fix the build", "sessionId": sid},
        {"type": "ai-title", "aiTitle": "Build fix", "sessionId": sid},
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": sid, "version": "2.1.75",
         "cwd": "/w/p", "timestamp": "2026-03-14T10:00:00.000Z",
         "message": {"role": "user", "content": "fix the build"}},
        {"type": "agent-name", "agentName": "fixer", "sessionId": sid},
        {"type": "mode", "mode": "plan", "sessionId": sid},
        {"type": "pr-link", "prNumber": 42, "prUrl": "https://example.invalid/pr/42",
         "sessionId": sid, "timestamp": "2026-03-14T10:05:00.000Z"},
        {"type": "permission-mode", "permissionMode": "acceptEdits", "sessionId": sid},
        {"type": "cost-state", "sessionId": sid},
        {"type": "some-future-type", "sessionId": sid},
    ]
    path = tmp_path / "projects" / "p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (9, 0)
    assert rows(lake, "SELECT format FROM sources") == [("claude_code",)]
    assert rows(lake, "SELECT line_no, role, kind, subtype FROM messages ORDER BY seq") == [
        (3, "user", "text", None), (9, "system", "other", "some-future-type")]
    assert rows(lake, "SELECT record_type, count(*) FROM records GROUP BY ALL ORDER BY 1") == [
        ("agent-name", 1), ("ai-title", 1), ("cost-state", 1), ("last-prompt", 1), ("mode", 1),
        ("permission-mode", 1), ("pr-link", 1), ("some-future-type", 1), ("user", 1)]


def test_the_marker_of_an_interrupted_request_is_not_a_prompt(tmp_path):
    sid = "5a1e0c55-0000-4000-8000-000000000002"

    def user(uuid: str, content) -> dict:
        return {"type": "user", "uuid": uuid, "parentUuid": None, "sessionId": sid, "cwd": "/w/p",
                "timestamp": "2026-03-14T10:00:00.000Z", "message": {"role": "user", "content": content}}

    lines = [user("u1", "fix the build"),
             user("u2", [{"type": "text", "text": "[Request interrupted by user for tool use]"}]),
             user("u3", "[Request interrupted by user]"),
             user("u4", "[Request interrupted by user] no, fix the tests first")]
    path = tmp_path / "projects" / "p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT line_no, kind, is_prompt FROM messages ORDER BY seq") == [
        (1, "text", True), (2, "meta", False), (3, "meta", False), (4, "text", True)]
    assert rows(lake, "SELECT n_prompts FROM sessions") == [(2,)]


def test_a_block_list_with_media_is_measured_by_its_json_and_text_only_blocks_by_their_text():
    from pipeline.formats.base import media_payload

    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}}
    compact = b'[{"type":"text","text":"shot"},{"type":"image","source":{"type":"base64",' \
              b'"media_type":"image/png","data":"iVBORw0K"}}]'
    assert media_payload([{"type": "text", "text": "shot"}, image]) == \
        (len(compact), hashlib.sha256(compact).hexdigest())
    codex = {"content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}
    assert media_payload(codex)[0] == len(json.dumps(codex, separators=(",", ":")))
    assert media_payload([{"type": "text", "text": "a"}, "b", {"no_type": 1}]) is None
    assert media_payload("[image]") is None and media_payload({"text": "x"}) is None


def test_a_resumed_session_opened_by_summary_lines_gets_its_facts_from_the_first_line_with_them(tmp_path):
    from pipeline.stages.ingest import ingest

    sid = "5a1e0c55-0000-4000-8000-000000000003"
    lines = [{"type": "summary", "summary": "Build fix", "leafUuid": "a1"},
             {"type": "summary", "summary": "Tests", "leafUuid": "a2"},
             {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": sid, "version": "1.0.98",
              "cwd": "/w/p", "gitBranch": "main", "timestamp": "2025-09-14T10:00:00.000Z",
              "message": {"role": "user", "content": "fix the build"}}]
    path = tmp_path / "projects" / "p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(o) + "\n" for o in lines[:2]), encoding="utf-8")
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT session_id, project, git_branch, cli_version FROM sessions") == [
        (sid, None, None, None)]
    # the facts arrive in a later append: read from the saved reader state
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(lines[2]) + "\n")
    ingest([path], lake=lake, workers=1)
    assert rows(lake, "SELECT session_id, project, git_branch, cli_version FROM sessions") == [
        (sid, "/w/p", "main", "1.0.98")]
    whole = tmp_path / "whole" / "projects" / "p" / f"{sid}.jsonl"
    whole.parent.mkdir(parents=True)
    whole.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    again, _ = ingest_paths(tmp_path / "whole", whole)
    assert rows(again, "SELECT session_id, project, git_branch, cli_version FROM sessions") == [
        (sid, "/w/p", "main", "1.0.98")]


def test_a_session_whose_first_line_runs_past_the_sniffed_head_is_read_outside_a_claude_folder(tmp_path):
    # a real session exported outside ~/.claude, its first prompt a 100 KB paste: the sniffed
    # head (64 KiB) holds no whole line, only the members written before the message
    lines = (CLAUDE / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["message"]["content"] = "paste of a build log\n" + "x" * 100_000
    archive = tmp_path / "export"
    archive.mkdir()
    (archive / "session.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n",
                                           encoding="utf-8")
    lake, summary = ingest_paths(tmp_path, archive)
    assert (summary.files, summary.lines, summary.records, summary.quarantined) == \
        (1, len(lines), len(lines), 0)
    assert rows(lake, "SELECT format, count(*) FROM sources GROUP BY ALL") == [("claude_code", 1)]
    assert rows(lake, "SELECT session_id FROM sessions") == [("1af7fc5e-8455-4414-9ccd-011d40f70b2a",)]
    assert rows(lake, "SELECT seq, length(text) FROM messages ORDER BY seq LIMIT 1") == [(10000, 100_021)]


# -- tools the API runs: server tools (web_search, web_fetch, code execution) and MCP connector
# tools, whose calls and results are blocks of the same assistant message -------------------
def _response_lines(blocks: list[dict]) -> list[dict]:
    """One API response as Claude Code writes it: one assistant line per content block (the
    real sample's text line with its block replaced), sharing message.id and requestId."""
    template = _lines("claude_session.jsonl")[3]
    out, parent = [], template["parentUuid"]
    for index, block in enumerate(blocks):
        line = json.loads(json.dumps(template))
        line["uuid"] = f"5e7e0000-0000-4000-8000-{index:012d}"
        line["parentUuid"], parent = parent, line["uuid"]
        line["message"]["id"], line["requestId"] = "msg_server_tools", "req_server_tools"
        line["message"]["content"] = [block]
        out.append(line)
    return out


def write_with_server_tools(target, blocks: list[dict]) -> bytes:
    """The real sample's snapshot and prompt lines, then ``blocks`` as one response (line 3 on),
    written compactly as Claude Code writes: the bytes written to ``target``."""
    head = (CLAUDE / "claude_session.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    lines = head + [json.dumps(o, separators=(",", ":"), ensure_ascii=False)
                    for o in _response_lines(blocks)]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return data


def _server_call(call_id: str, name: str, input_obj: dict, kind: str = "server_tool_use") -> dict:
    block = {"type": kind, "id": call_id, "name": name, "input": input_obj}
    if kind == "mcp_tool_use":
        block["server_name"] = "demo"
    return block


def test_server_and_mcp_tool_blocks_of_an_assistant_message_are_tool_calls_and_results(tmp_path):
    search_hit = {"type": "web_search_result", "url": "https://example.com/ctxlake",
                  "title": "ctxlake", "encrypted_content": "EqgfCioIARgBIiQ3", "page_age": "2 days ago"}
    fetched = {"type": "web_fetch_result", "url": "https://example.com/ctxlake",
               "retrieved_at": "2026-03-14T10:00:00Z",
               "content": {"type": "document", "title": "ctxlake",
                           "source": {"type": "text", "media_type": "text/plain",
                                      "data": "ctxlake keeps every byte."}}}
    blocks = [
        {"type": "text", "text": "Let me look that up."},
        _server_call("srvtoolu_01", "web_search", {"query": "ctxlake compaction"}),
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [search_hit]},
        _server_call("srvtoolu_02", "web_fetch", {"url": "https://example.com/ctxlake"}),
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_02", "content": fetched},
        _server_call("mcptoolu_03", "echo", {"text": "hi"}, kind="mcp_tool_use"),
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_03", "is_error": False,
         "content": [{"type": "text", "text": "hi"}]},
        {"type": "text", "text": "Found it."},
    ]
    path = tmp_path / "archive" / "proj" / "claude_session.jsonl"
    write_with_server_tools(path, blocks)
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (10, 0)
    assert rows(lake, "SELECT line_no, role, kind, subtype, call_id, tool_name FROM messages "
                      "WHERE line_no >= 3 ORDER BY seq") == [
        (3, "assistant", "text", None, None, None),
        (4, "assistant", "tool_use", "server_tool_use", "srvtoolu_01", "web_search"),
        (5, "tool", "tool_result", "web_search_tool_result", "srvtoolu_01", None),
        (6, "assistant", "tool_use", "server_tool_use", "srvtoolu_02", "web_fetch"),
        (7, "tool", "tool_result", "web_fetch_tool_result", "srvtoolu_02", None),
        (8, "assistant", "tool_use", "mcp_tool_use", "mcptoolu_03", "echo"),
        (9, "tool", "tool_result", "mcp_tool_result", "mcptoolu_03", None),
        (10, "assistant", "text", None, None, None)]
    assert rows(lake, "SELECT line_no, call_id, tool_name, tool_family, input_json FROM tool_calls "
                      "ORDER BY seq") == [
        (4, "srvtoolu_01", "web_search", "web", '{"query":"ctxlake compaction"}'),
        (6, "srvtoolu_02", "web_fetch", "web", '{"url":"https://example.com/ctxlake"}'),
        (8, "mcptoolu_03", "echo", "other", '{"text":"hi"}')]
    # the payload is the block's content: its text as content_text reads it
    assert rows(lake, "SELECT r.line_no, r.call_id, r.is_error, r.payload_shape, m.text "
                      "FROM tool_results r JOIN messages m USING (source_id, seq) ORDER BY seq") == [
        (5, "srvtoolu_01", False, "blocks", "[web_search_result]"),
        (7, "srvtoolu_02", False, "json", json.dumps(fetched, separators=(",", ":"))),
        (9, "mcptoolu_03", False, "blocks", "hi")]
    assert rows(lake, "SELECT call_id, tool_name, status FROM tool_links ORDER BY call_seq") == [
        ("srvtoolu_01", "web_search", "paired"), ("srvtoolu_02", "web_fetch", "paired"),
        ("mcptoolu_03", "echo", "paired")]


def test_a_server_tool_error_content_or_an_mcp_is_error_marks_the_result_as_an_error(tmp_path):
    blocks = [
        _server_call("srvtoolu_e1", "web_search", {"query": "ctxlake"}),
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_e1",
         "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}},
        _server_call("srvtoolu_e2", "web_fetch", {"url": "https://example.invalid/"}),
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_e2",
         "content": {"type": "web_fetch_tool_result_error", "error_code": "url_not_accessible"}},
        # a command that ran and failed is a result, not a tool error
        _server_call("srvtoolu_e3", "bash_code_execution", {"command": "false"}),
        {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_e3",
         "content": {"type": "bash_code_execution_result", "stdout": "", "stderr": "",
                     "return_code": 1, "content": []}},
        _server_call("mcptoolu_e4", "echo", {"text": "hi"}, kind="mcp_tool_use"),
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_e4", "is_error": True,
         "content": [{"type": "text", "text": "server down"}]},
    ]
    path = tmp_path / "archive" / "proj" / "claude_session.jsonl"
    write_with_server_tools(path, blocks)
    lake, _ = ingest_paths(tmp_path, path)
    assert rows(lake, "SELECT call_id, is_error, payload_shape FROM tool_results ORDER BY seq") == [
        ("srvtoolu_e1", True, "json"), ("srvtoolu_e2", True, "json"),
        ("srvtoolu_e3", False, "json"), ("mcptoolu_e4", True, "blocks")]
    assert rows(lake, "SELECT call_id, tool_family, status, is_error FROM tool_links "
                      "ORDER BY call_seq") == [
        ("srvtoolu_e1", "web", "paired", True), ("srvtoolu_e2", "web", "paired", True),
        ("srvtoolu_e3", "other", "paired", False), ("mcptoolu_e4", "other", "paired", True)]


def test_an_mcp_call_and_result_without_ids_are_found_by_their_place_and_restored(tmp_path):
    """Blocks without an id (nothing for apply to find them by) point at themselves: the
    nightly prune of such a large result used to stop on "no tool result for call None here"
    and leave the whole file unpruned."""
    from pipeline.stages.apply import apply_policy
    from pipeline.stages.restore import restore
    from tests.test_apply import hand_evictions

    big = "".join(f"row {i}: what the MCP server returned\n" for i in range(1000))
    call = _server_call("mcptoolu_01", "echo", {"text": "hi"}, kind="mcp_tool_use")
    del call["id"]
    blocks = [call, {"type": "mcp_tool_result", "tool_use_id": None, "is_error": False,
                     "content": [{"type": "text", "text": big}]}]
    path = tmp_path / "archive" / "proj" / "claude_session.jsonl"
    original = write_with_server_tools(path, blocks)
    lake, summary = ingest_paths(tmp_path, path.parent)
    assert summary.quarantined == 0
    assert rows(lake, "SELECT line_no, json_path, call_id FROM tool_calls") == [
        (3, "/message/content/0", None)]
    assert rows(lake, "SELECT line_no, json_path, call_id FROM tool_results") == [
        (4, "/message/content/0", None)]
    for action, key, line in (("prune", "content", 3), ("clear_input", "input", 2)):
        table = hand_evictions(lake, policy=action, action=action)
        assert table.num_rows == 1
        result = apply_policy(lake, policy=action, out=tmp_path / "out", evictions=table)
        assert result.problems == [] and result.files_pruned == 1, action
        output = tmp_path / "out" / action / path.name
        block = json.loads(output.read_bytes().splitlines()[line])["message"]["content"][0]
        assert block[key] == ({} if action == "clear_input"
                              else table.column("replacement")[0].as_py())
        assert restore(output, store=lake.store_dir).data == original
