"""The demo package's context objects (pipeline/demo/context.py) and the Claude todo calls: the
pieces every format writer shares, whose draws must stay those of the archive's contract."""

from __future__ import annotations

from pathlib import Path
from random import Random

import orjson

from pipeline.demo.claude_tools import ClaudeTools, todo_item
from pipeline.demo.context import DemoContext, Draws, FormatFigures, JsonLines
from pipeline.demo.projects import make_projects


def _context(tmp_path: Path, seed: int = 11) -> DemoContext:
    return DemoContext(tmp_path, seed, 1_000_000, 1_793_491_200_000, make_projects(seed))


def test_a_writer_s_random_source_is_seeded_with_the_seed_and_its_labels(tmp_path):
    draws = _context(tmp_path).draws("claude", 2)
    same = Random("11:claude:2")
    assert [draws.random() for _ in range(5)] == [same.random() for _ in range(5)]


def test_ids_are_drawn_in_their_vendor_shapes_and_repeat_for_the_same_seed():
    first, second = Draws("ids"), Draws("ids")
    ids = [first.uuid4(), first.uuid7(1_793_491_200_000), first.tool_use_id(), first.call_id(), first.hex(7)]
    assert ids == [second.uuid4(), second.uuid7(1_793_491_200_000), second.tool_use_id(), second.call_id(),
                   second.hex(7)]
    assert ids[0][14] == "4" and ids[1][14] == "7"
    assert ids[1].replace("-", "")[:12] == f"{1_793_491_200_000:012x}"
    assert ids[2].startswith("toolu_01") and len(ids[2]) == 30
    assert ids[3].startswith("call_") and len(ids[3]) == 29
    assert len(ids[4]) == 7 and set(ids[4]) <= set("0123456789abcdef")


def test_json_lines_count_every_byte_they_will_write():
    log = JsonLines()
    log.add({"type": "user", "text": "テスト ✅"})
    log.extend([b'{"inline":1}', b'{"inline":2}'])
    assert log.size == len(log.data())
    assert log.data() == orjson.dumps({"type": "user", "text": "テスト ✅"}) + b'\n{"inline":1}\n{"inline":2}\n'


def test_a_written_file_is_counted_in_the_manifest_the_summary_and_its_mtime(tmp_path):
    ctx = _context(tmp_path)
    ctx.write("codex_cli", "codex/sessions/a.jsonl", b"{}\n", 1_793_491_260_000, sessions=1)
    path = tmp_path / "codex" / "sessions" / "a.jsonl"
    assert path.read_bytes() == b"{}\n"
    assert path.stat().st_mtime_ns == 1_793_491_260_000 * 1_000_000
    assert ctx.manifest == [("codex/sessions/a.jsonl", 3)]
    assert ctx.done == 3
    assert ctx.summary.formats == {"codex_cli": FormatFigures(files=1, bytes=3, sessions=1)}
    assert ctx.summary.to_dict()["formats"] == {"codex_cli": {"files": 1, "bytes": 3, "sessions": 1}}


def test_a_todo_call_records_the_list_before_and_after_the_update():
    tools = ClaudeTools(Draws("todo"), make_projects(1)[0], lambda: 8192)
    items = [todo_item("write", "parser tests"), todo_item("fix", "cache bug")]
    first = tools.todo(items, started=0, new=True)
    assert first.result == {"oldTodos": [], "newTodos": [
        {"content": "Write parser tests", "status": "in_progress", "activeForm": "Writing parser tests"},
        {"content": "Fix cache bug", "status": "pending", "activeForm": "Fixing cache bug"}]}
    second = tools.todo(items, completed=(0,), started=1)
    assert [x["status"] for x in second.result["oldTodos"]] == ["in_progress", "pending"]
    assert [x["status"] for x in second.input["todos"]] == ["completed", "in_progress"]
    last = tools.todo(items, completed=range(2))
    assert [x["status"] for x in last.result["newTodos"]] == ["completed", "completed"]
