"""apply reads each file's format from the lake: the payload locations a format module declares.

Each reader class says where its format keeps tool results, tool-call inputs and the copies of
a payload (``pipeline/formats/base.py``: ``result_holders``, ``input_holders``,
``duplicate_paths``); apply dispatches on the format ingest recorded, never on the JSON shape.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.core.errors import UnknownFormatError
from pipeline.core.lake import Lake, write_parquet_atomic
from pipeline.formats import READERS
from pipeline.stages.apply import apply_policy, format_of
from tests.test_apply import CLEARED, two_session_lake

CLAUDE_RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "out"}
CODEX_RESULT = {"type": "function_call_output", "call_id": "t1", "output": "out"}
CHAT_RESULT = {"role": "tool", "tool_call_id": "t1", "content": "out"}
GEMINI_CALL = {"id": "t1", "name": "read_file", "args": {"path": "a"},
               "result": [{"functionResponse": {"id": "t1", "response": {"output": "out"}}}]}
GEMINI_RESPONSE = ("toolCalls", 0, "result", 0, "functionResponse", "response")
GEMINI_PATHS = [GEMINI_RESPONSE + ("output",), GEMINI_RESPONSE, ("toolCalls", 0, "result"),
                GEMINI_RESPONSE + ("output",), GEMINI_RESPONSE]


def test_each_format_finds_only_the_tool_result_shape_it_declares():
    line = {"message": {"content": [CLAUDE_RESULT, CODEX_RESULT, CHAT_RESULT]},
            "toolCalls": [GEMINI_CALL]}
    found = {name: cls.result_holders(line, "t1") for name, cls in sorted(READERS.items())}
    assert found == {
        "anthropic_messages": [("message", "content", 0, "content")],
        "claude_code": [("message", "content", 0, "content")],
        "codex_cli": [("message", "content", 1, "output")],
        "codex_cli_json": [("message", "content", 1, "output")],
        # the toolCalls entry (its response's output, the response, the result list), then
        # the functionResponse part inside it (apply drops the repeated paths)
        "gemini_cli": GEMINI_PATHS, "gemini_cli_jsonl": GEMINI_PATHS,
        "mini_swe_agent": [("message", "content", 2, "content")],
        "openai_chat": [("message", "content", 2, "content")],
        "swe_agent": [("message", "content", 2, "content")],
    }


def test_each_format_finds_only_the_tool_input_shape_it_declares():
    line = [{"type": "tool_use", "id": "c", "input": {}},
            {"type": "function_call", "call_id": "c", "arguments": "{}"},
            {"id": "c", "function": {"name": "bash", "arguments": "{}"}},
            {"functionCall": {"id": "c", "args": {}}}]
    found = {name: cls.input_holders(line, "c") for name, cls in sorted(READERS.items())}
    assert found == {
        "anthropic_messages": [(0, "input")], "claude_code": [(0, "input")],
        "codex_cli": [(1, "arguments")],
        "codex_cli_json": [(1, "arguments")],
        "gemini_cli": [(3, "functionCall", "args")], "gemini_cli_jsonl": [(3, "functionCall", "args")],
        "mini_swe_agent": [(2, "function", "arguments")], "openai_chat": [(2, "function", "arguments")],
        "swe_agent": [(2, "function", "arguments")],
    }


def test_only_claude_code_knows_the_tool_use_result_copy_of_a_payload():
    line = {"message": {"content": [CLAUDE_RESULT]}, "toolUseResult": {"stdout": "out"}}
    copies = {name: cls.duplicate_paths(line, ("message", "content", 0, "content"))
              for name, cls in sorted(READERS.items())}
    assert {name: paths for name, paths in copies.items() if paths} == \
        {"claude_code": [("toolUseResult",)]}


def test_a_recorded_format_no_reader_knows_is_a_named_error_not_a_guess():
    with pytest.raises(UnknownFormatError) as caught:
        format_of({"format": "cursor_chat", "path": "/archive/x.jsonl"})
    assert caught.value.path == "/archive/x.jsonl"
    assert "records the format 'cursor_chat'" in caught.value.message
    assert format_of({"format": "codex_cli", "path": "x"}) is READERS["codex_cli"]


def test_a_file_whose_recorded_format_is_unknown_is_copied_unpruned_and_named(tmp_path):
    lake, other, table = two_session_lake(tmp_path)
    sources = lake.read_sources()
    renamed = pc.if_else(pc.equal(sources.column("path"), str(other)),
                         pa.scalar("cursor_chat"), sources.column("format"))
    write_parquet_atomic(sources.set_column(sources.schema.get_field_index("format"), "format",
                                            renamed), lake.sources_path)
    summary = apply_policy(Lake(lake.root), policy="p", evictions=table)
    assert [(p.path, p.kind) for p in summary.problems] == [(str(other), "format")]
    assert "records the format 'cursor_chat'" in summary.problems[0].error
    assert "(output left unpruned)" in summary.problems[0].error
    assert (lake.root / "out" / "p" / "b" / "s-1.jsonl").read_bytes() == other.read_bytes()
    assert CLEARED.encode() in (lake.root / "out" / "p" / "a" / "s-1.jsonl").read_bytes()
    assert (summary.files_pruned, summary.files_failed) == (1, 1)


# -- Claude Code: the results of tools the API runs sit in assistant lines --------------------
def _fetch_blocks(page: str) -> list[dict]:
    """A web_fetch server tool call and its result (the fetched page as a text document)."""
    return [
        {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_fetch",
         "input": {"url": "https://example.com/ctxlake"}},
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_01",
         "content": {"type": "web_fetch_result", "url": "https://example.com/ctxlake",
                     "retrieved_at": "2026-03-14T10:00:00Z",
                     "content": {"type": "document", "title": "ctxlake",
                                 "source": {"type": "text", "media_type": "text/plain",
                                            "data": page}}}},
        {"type": "text", "text": "The page says ctxlake keeps every byte."}]


def test_claude_code_finds_server_and_mcp_tool_results_and_inputs_in_an_assistant_line():
    search = [{"type": "web_search_result", "url": "https://example.com", "title": "t",
               "encrypted_content": "Eq"}]
    line = {"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "s1", "content": search},
        {"type": "mcp_tool_use", "id": "m1", "name": "echo", "server_name": "demo", "input": {}},
        {"type": "mcp_tool_result", "tool_use_id": "m1", "is_error": False, "content": "hi"}]}}
    claude = READERS["claude_code"]
    assert claude.result_holders(line, "s1") == [("message", "content", 1, "content")]
    assert claude.input_holders(line, "s1") == [("message", "content", 0, "input")]
    assert claude.result_holders(line, "m1") == [("message", "content", 3, "content")]
    assert claude.input_holders(line, "m1") == [("message", "content", 2, "input")]
    assert claude.result_holders(line, "other") == claude.input_holders(line, "other") == []


def test_a_large_web_fetch_result_in_an_assistant_line_is_pruned_and_restored_byte_for_byte(tmp_path):
    import hashlib
    import json

    from pipeline.stages.restore import restore
    from tests.helpers.lake import ingest_paths, rows
    from tests.test_apply import hand_evictions
    from tests.test_format_claude_code import write_with_server_tools

    page = "".join(f"line {i}: what the fetched page says about ctxlake\n" for i in range(2000))
    source = tmp_path / "archive" / "proj" / "claude_session.jsonl"
    original = write_with_server_tools(source, _fetch_blocks(page))
    lake, _ = ingest_paths(tmp_path, tmp_path / "archive")
    fetched = json.loads(original.splitlines()[3])["message"]["content"][0]["content"]
    payload = json.dumps(fetched, separators=(",", ":")).encode()
    assert rows(lake, "SELECT call_id, payload_shape, payload_bytes, payload_sha256 FROM tool_results") \
        == [("srvtoolu_01", "json", len(payload), hashlib.sha256(payload).hexdigest())]
    # the result pruned and the call's input cleared, both on assistant lines
    table = pa.concat_tables([hand_evictions(lake, policy="p", action="prune"),
                              hand_evictions(lake, policy="p", action="clear_input")])
    summary = apply_policy(lake, policy="p", evictions=table)
    assert summary.problems == [] and summary.files_pruned == 1
    output = lake.root / "out" / "p" / "proj" / "claude_session.jsonl"
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    [prune] = [ev for ev in table.to_pylist() if ev["action"] == "prune"]
    assert lines[3]["message"]["content"][0] == {"type": "web_fetch_tool_result",
                                                 "tool_use_id": "srvtoolu_01",
                                                 "content": prune["replacement"]}
    assert lines[2]["message"]["content"][0]["input"] == {}
    assert output.read_bytes().splitlines()[4] == original.splitlines()[4]    # the text line
    assert (lake.store_dir / f"{hashlib.sha256(payload).hexdigest()}.payload").read_bytes() == payload
    assert len(original) - output.stat().st_size > len(page) - 4096
    assert restore(output, store=lake.store_dir).data == original


def test_an_oversized_web_search_result_is_pruned_by_the_policy_and_restored_byte_for_byte(tmp_path):
    import hashlib
    import json

    from click.testing import CliRunner

    from pipeline.cli import cli
    from tests.helpers.lake import rows
    from tests.test_format_claude_code import write_with_server_tools

    hits = [{"type": "web_search_result", "url": f"https://example.com/{i}", "title": f"Hit {i}",
             "encrypted_content": "Eq" + "x" * 6000, "page_age": None} for i in range(5)]
    blocks = [{"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search",
               "input": {"query": "ctxlake"}},
              {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": hits},
              {"type": "text", "text": "Five hits."}]
    archive = tmp_path / "archive"
    original = write_with_server_tools(archive / "proj" / "claude_session.jsonl", blocks)
    lake_dir = tmp_path / "lake"
    runner = CliRunner()
    result = runner.invoke(cli, ["--lake", str(lake_dir), "-q", "run", str(archive), "--tz", "UTC"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    compact = json.dumps(hits, separators=(",", ":")).encode()
    sha = hashlib.sha256(compact).hexdigest()
    lake = Lake(lake_dir)
    assert rows(lake, "SELECT call_id, action, payload_sha256 FROM evictions") == \
        [("srvtoolu_01", "prune", sha)]
    [pruned] = (lake_dir / "out").glob("*/proj/claude_session.jsonl")
    output = pruned.read_bytes()
    assert b"x" * 100 not in output and f"compaction://{sha}".encode() in output
    assert (lake_dir / "store" / f"{sha}.payload").read_bytes() == compact
    back = runner.invoke(cli, ["--lake", str(lake_dir), "restore", str(pruned), "--out",
                               str(tmp_path / "back.jsonl")], catch_exceptions=False)
    assert back.exit_code == 0, back.output
    assert (tmp_path / "back.jsonl").read_bytes() == original
