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
