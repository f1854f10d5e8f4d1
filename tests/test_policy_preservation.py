"""The managed-memory preservation predicate (docs/policies.md, microcompact): a read is protected
only when its call id maps to exactly one request-side call AND every path is inside a memory
root after resolving real paths. Built on real folders in tmp_path (pipeline.text.memory resolves
them), cleared with microcompact's force trigger at the last turn, keep_recent=1."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from pipeline.core.config import Config
from pipeline.text.memory import MemoryRoots
from pipeline.stages.plan import plan_session_input
from pipeline.policies.base import SessionInput
from tests.helpers.sessions import SessionBuilder

FORCE = "microcompact(force_at_turn=[{turn}], idle_minutes=-1, size_chars=-1, keep_recent=1)"


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "home" / "dev" / "proj"
    (root / ".claude").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "CLAUDE.md").write_text("# memory\n")
    (root / ".claude" / "CLAUDE.md").write_text("# more memory\n")
    (root / "src" / "app.py").write_text("print(1)\n")
    (root / ".qwen" / "team-memory").mkdir(parents=True)
    (root / ".qwen" / "team-memory" / "conventions.md").write_text("team\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret.md").write_text("not memory\n")
    return root


def session_with_reads(project, reads: list[tuple[str, dict]], *, tool_ids: list[str] | None = None
                       ) -> tuple[SessionInput, list[str], int]:
    """Reads (tool, input) in order, then one ordinary trailing read (kept by keep_recent=1)
    and a final assistant turn; returns (session, call ids, final turn number)."""
    b = SessionBuilder(project=str(project))
    b.prompt("look at the memory files and the code", at=0)
    ids = []
    for index, (tool, input_obj) in enumerate(reads):
        cid = tool_ids[index] if tool_ids else None
        ids.append(b.call(tool, input_obj, at=1, call_id=cid))
        b.result(ids[-1], f"content of read {index} " * 20)
    tail = b.call("Read", {"file_path": "src/app.py"})
    b.result(tail, "print(1) " * 20)
    b.assistant("done reading", at=2)
    turns = len({r["api_call_id"] for r in b.messages if r["role"] == "assistant"})
    return b.build(roots=MemoryRoots()), ids, turns


def cleared_and_preserved(session: SessionInput, turn: int, extra: str = ""
                          ) -> tuple[list[str], list[str]]:
    spec = FORCE.format(turn=turn)
    if extra:
        spec = spec[:-1] + ", " + extra + ")"
    result = plan_session_input(session, Config().resolve(spec))
    assert len(result.plans) == 1
    meta = json.loads(result.plans[0]["metadata_json"])
    assert [e["call_id"] for e in result.evictions] == meta["compactedToolIds"]
    return meta["compactedToolIds"], meta["preservedToolIds"]


def test_reads_of_memory_files_by_absolute_and_relative_path_are_preserved(project):
    session, ids, turn = session_with_reads(project, [
        ("Read", {"file_path": str(project / "CLAUDE.md")}),
        ("Read", {"file_path": "CLAUDE.md"}),                     # relative to the session cwd
        ("Read", {"file_path": ".claude/CLAUDE.md"}),
        ("read_file", {"absolute_path": str(project / ".qwen" / "team-memory" / "conventions.md")}),
        ("Read", {"file_path": "src/app.py"}),
    ])
    cleared, preserved = cleared_and_preserved(session, turn)
    assert preserved == ids[:4]
    assert cleared == [ids[4]]


def test_a_symlink_escaping_a_memory_root_is_not_preserved(project, tmp_path):
    link = project / ".qwen" / "team-memory" / "shortcut.md"
    os.symlink(tmp_path / "elsewhere" / "secret.md", link)
    memory_file = project / ".claude" / "CLAUDE.md"
    memory_file.unlink()
    os.symlink(tmp_path / "elsewhere" / "secret.md", memory_file)
    session, ids, turn = session_with_reads(project, [
        ("Read", {"file_path": str(link)}),
        ("Read", {"file_path": ".claude/CLAUDE.md"}),
        ("Read", {"file_path": "CLAUDE.md"}),
    ])
    cleared, preserved = cleared_and_preserved(session, turn)
    assert preserved == [ids[2]]
    assert cleared == ids[:2]


def test_a_dotdot_escape_from_a_memory_root_is_not_preserved(project):
    escape = str(project / ".qwen" / "team-memory" / ".." / ".." / "src" / "app.py")
    session, ids, turn = session_with_reads(project, [
        ("Read", {"file_path": escape}),
        ("Read", {"file_path": ".qwen/team-memory/../team-memory/conventions.md"}),
    ])
    cleared, preserved = cleared_and_preserved(session, turn)
    assert cleared == [ids[0]]
    # ".." that stays inside the root is still inside after resolution
    assert preserved == [ids[1]]


def test_a_read_whose_paths_are_only_partly_memory_is_ordinary(project):
    session, ids, turn = session_with_reads(project, [
        ("read_many_files", {"paths": ["CLAUDE.md", "src/app.py"]}),
        ("read_many_files", {"paths": ["CLAUDE.md", ".claude/CLAUDE.md"]}),
    ])
    # read_many_files is not compactable by default (docs/policies.md lists): add it
    cleared, preserved = cleared_and_preserved(
        session, turn, 'compactable_tools=["Read", "read_many_files"]')
    assert cleared == [ids[0]]
    assert preserved == [ids[1]]


def test_ambiguous_and_unambiguous_ids_in_one_session(project):
    # ids[0] and ids[1] share a call id (two request-side calls): ambiguous, both ordinary;
    # ids[2] is unique: preserved
    session, ids, turn = session_with_reads(project, [
        ("Read", {"file_path": "CLAUDE.md"}),
        ("Read", {"file_path": ".claude/CLAUDE.md"}),
        ("Read", {"file_path": "CLAUDE.md"}),
    ], tool_ids=["toolu_dup", "toolu_dup", "toolu_unique"])
    result = plan_session_input(session, Config().resolve(FORCE.format(turn=turn)))
    meta = json.loads(result.plans[0]["metadata_json"])
    assert meta["preservedToolIds"] == ["toolu_unique"]
    assert meta["compactedToolIds"] == ["toolu_dup", "toolu_dup"]


def test_a_call_id_shared_with_a_call_left_out_of_the_session_tables_is_ambiguous(project):
    # id_calls (computed in SQL over every call, inline sidechains included) says 2
    session, ids, turn = session_with_reads(project, [("Read", {"file_path": "CLAUDE.md"})])
    calls = session.tool_calls
    id_calls = pa.array([2 if c == ids[0] else 1 for c in calls.column("call_id").to_pylist()],
                        pa.int64())
    shared = SessionInput(session.session_id, session.messages,
                          calls.append_column("id_calls", id_calls), session.tool_results,
                          session.call_paths, session.info)
    cleared, preserved = cleared_and_preserved(shared, turn)
    assert (cleared, preserved) == ([ids[0]], [])
    # the same session without the extra call: preserved, so nothing is cleared (no plan row)
    alone = plan_session_input(session, Config().resolve(FORCE.format(turn=turn)))
    assert (alone.plans, alone.evictions, alone.preserved) == ([], [], 1)


def test_only_read_family_results_are_preserved(project):
    session, ids, turn = session_with_reads(project, [
        ("Edit", {"file_path": "CLAUDE.md", "old_string": "a", "new_string": "b"}),
        ("Bash", {"command": "cat CLAUDE.md"}),
        ("Read", {"file_path": "CLAUDE.md"}),
    ])
    cleared, preserved = cleared_and_preserved(session, turn)
    assert (cleared, preserved) == (ids[:2], [ids[2]])


def test_a_read_without_any_path_is_ordinary(project):
    session, ids, turn = session_with_reads(project, [("Read", {"limit": 10})])
    assert cleared_and_preserved(session, turn) == ([ids[0]], [])


def test_extra_memory_roots_from_the_config_protect_their_files(project):
    notes = project / "docs" / "agent-notes"
    notes.mkdir(parents=True)
    (notes / "plan.md").write_text("notes\n")
    b = SessionBuilder(project=str(project))
    b.prompt("read the notes", at=0)
    first = b.call("Read", {"file_path": "docs/agent-notes/plan.md"}, at=1)
    b.result(first, "notes " * 50)
    last = b.call("Read", {"file_path": "src/app.py"})
    b.result(last, "code " * 50)
    b.assistant("ok", at=2)
    spec = FORCE.format(turn=3)
    plain = plan_session_input(b.build(roots=MemoryRoots()), Config().resolve(spec))
    assert [e["call_id"] for e in plain.evictions] == [first]
    extra = MemoryRoots.from_config({"project": ["docs/agent-notes/"]})
    protected = plan_session_input(b.build(roots=extra), Config().resolve(spec))
    assert protected.evictions == [] and protected.preserved == 1
