"""The correlate stage and the tool_links view: statuses, paths, memory classes, later references."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.core.lake import session_bucket
from pipeline.stages.correlate import TOOL_PATHS, correlate
from pipeline.text.memory import MemoryRoots
from tests.helpers.lake import REAL, ingest_paths, rows, scalar

T0 = "2025-01-01T00:00:{:02d}Z"


def _use(line_seconds: int, call_id: str, name: str, tool_input: dict, *, session="s1",
         cwd="/Users/alice/proj") -> dict:
    return {"type": "assistant", "sessionId": session, "uuid": f"a{call_id}{line_seconds}",
            "timestamp": T0.format(line_seconds), "cwd": cwd,
            "message": {"id": f"m{call_id}{line_seconds}", "role": "assistant", "model": "claude-x",
                        "content": [{"type": "tool_use", "id": call_id, "name": name,
                                     "input": tool_input}]}}


def _result(line_seconds: int, call_id: str, text: str, *, is_error=False, session="s1",
            cwd="/Users/alice/proj") -> dict:
    return {"type": "user", "sessionId": session, "uuid": f"u{call_id}{line_seconds}",
            "timestamp": T0.format(line_seconds), "cwd": cwd,
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                                     "content": text, "is_error": is_error}]}}


# seq = line_no * 10000 + block_no (block 0 here): line 1 -> 10000, line 10 -> 100000
SESSION = [
    _use(0, "t1", "Read", {"file_path": "CLAUDE.md"}),                      # 1 paired, project
    _result(5, "t1", "# memory"),                                           # 2
    _use(10, "t2", "Bash", {"command": "cat src/a.py"}),                    # 3 orphan call
    _result(12, "t9", "an answer to nothing"),                              # 4 orphan result
    _use(20, "t3", "Read", {"file_path": "notes.md"}),                      # 5 ambiguous ...
    _use(21, "t3", "Read", {"file_path": "/etc/hosts"}),                    # 6 ... same id again
    _result(22, "t3", "x"),                                                 # 7
    _use(30, "t4", "Read", {"file_path": "src/b.py"}),                      # 8 paired
    _result(35, "t4", "print(1)"),                                          # 9
    _use(50, "t5", "Edit", {"file_path": "/Users/alice/proj/src/b.py",      # 10 re-reference
                            "old_string": "1", "new_string": "2"}),
    _result(51, "t5", "ok"),                                                # 11
    _use(52, "t6", "Read", {"file_path": "~/.claude/CLAUDE.md"}),           # 12 user memory
    _result(53, "t6", "no such file", is_error=True),                       # 13
]


def _write(tmp_path: Path, objs: list[dict], name="session.jsonl") -> Path:
    path = tmp_path / "archive" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path.parent


LINK_COLUMNS = ("call_id, tool_name, tool_family, call_seq, result_seq, status, n_calls, "
                "n_results, is_error, paths, memory_classes, protected, paths_known, "
                "later_ref_seq, later_ref_gap_s")


def test_tool_links_statuses_paths_classes_and_later_references(tmp_path):
    lake, _ = ingest_paths(tmp_path, _write(tmp_path, SESSION))
    summary = correlate(lake, roots=MemoryRoots())
    got = rows(lake, f"SELECT {LINK_COLUMNS} FROM tool_links ORDER BY call_id")
    proj = "/Users/alice/proj"
    assert got == [
        ("t1", "Read", "read", 10000, 20000, "paired", 1, 1, False, [f"{proj}/CLAUDE.md"],
         ["project"], True, True, None, None),
        ("t2", "Bash", "shell", 30000, None, "orphan_call", 1, 0, False, [f"{proj}/src/a.py"],
         ["none"], False, True, None, None),
        ("t3", "Read", "read", 50000, 70000, "ambiguous", 2, 1, False,
         [f"{proj}/notes.md", "/etc/hosts"], ["none", "none"], False, True, None, None),
        ("t4", "Read", "read", 80000, 90000, "paired", 1, 1, False, [f"{proj}/src/b.py"],
         ["none"], False, True, 100000, 15.0),
        ("t5", "Edit", "edit", 100000, 110000, "paired", 1, 1, False, [f"{proj}/src/b.py"],
         ["none"], False, True, None, None),
        ("t6", "Read", "read", 120000, 130000, "paired", 1, 1, True,
         ["/Users/alice/.claude/CLAUDE.md"], ["user"], True, True, None, None),
        # a result without a call: its tool name is unknown to the transcript, family 'other'
        ("t9", None, "other", None, 40000, "orphan_result", 0, 1, False, [], [], False, False,
         None, None),
    ]
    assert summary.statuses == {"ambiguous": 1, "orphan_call": 1, "orphan_result": 1, "paired": 4}
    assert (summary.calls, summary.calls_with_paths, summary.paths, summary.protected) == (7, 7, 7, 2)
    assert summary.by_class == {"project": 1, "user": 1, "team": 0, "none": 5, "escape": 0}


def test_an_ambiguous_id_is_never_protected_even_when_every_path_is_memory(tmp_path):
    objs = [_use(0, "d1", "Read", {"file_path": "CLAUDE.md"}),
            _use(1, "d1", "Read", {"file_path": "GEMINI.md"}),
            _result(2, "d1", "x")]
    lake, _ = ingest_paths(tmp_path, _write(tmp_path, objs))
    correlate(lake)
    assert rows(lake, "SELECT status, memory_classes, protected FROM tool_links") == [
        ("ambiguous", ["project", "project"], False)]


def test_the_later_reference_is_the_first_after_the_result_not_after_the_call(tmp_path):
    # two parallel reads of the same file: the second call comes before the first result
    objs = [_use(0, "p1", "Read", {"file_path": "a.py"}),
            _use(1, "p2", "Read", {"file_path": "a.py"}),
            _result(2, "p1", "x"),
            _result(3, "p2", "x"),
            _use(9, "p3", "Bash", {"command": "sed -n 1,5p a.py"}),
            _result(10, "p3", "x")]
    lake, _ = ingest_paths(tmp_path, _write(tmp_path, objs))
    correlate(lake)
    got = rows(lake, "SELECT call_id, later_ref_seq, later_ref_gap_s FROM tool_links ORDER BY call_id")
    assert got == [("p1", 50000, 7.0), ("p2", 50000, 6.0), ("p3", None, None)]


def test_tool_links_exists_before_correlate_with_unknown_paths(tmp_path):
    lake, _ = ingest_paths(tmp_path, _write(tmp_path, SESSION))
    assert rows(lake, "SELECT count(*), count(*) FILTER (WHERE paths_known), "
                      "count(*) FILTER (WHERE len(paths) > 0) FROM tool_links") == [(7, 0, 0)]
    assert scalar(lake, "SELECT count(*) FROM tool_paths") == 0


def test_tool_paths_is_written_with_its_fixed_schema_even_for_an_empty_lake(tmp_path):
    lake, _ = ingest_paths(tmp_path, _write(tmp_path, [
        {"type": "user", "sessionId": "e", "uuid": "u", "timestamp": T0.format(0),
         "message": {"role": "user", "content": "hi"}}]))
    summary = correlate(lake)
    table = pq.read_table(lake.derived_dir / "tool_paths" / "all.b00.parquet")
    assert table.schema.equals(TOOL_PATHS) and table.num_rows == 0
    assert (summary.calls, summary.paths, summary.statuses) == (0, 0, {})


def test_calls_without_paths_get_one_null_row_and_rerunning_gives_the_same_bytes(tmp_path):
    todo = _use(54, "t7", "TodoWrite", {"todos": [{"content": "read CLAUDE.md"}]})
    lake, _ = ingest_paths(tmp_path, _write(tmp_path, SESSION + [todo]))
    correlate(lake)
    target = lake.derived_dir / "tool_paths" / f"all.b{session_bucket('s1'):02d}.parquet"
    first_bytes = target.read_bytes()
    correlate(lake)
    assert target.read_bytes() == first_bytes
    table = pq.read_table(target)
    # 8 tool_use blocks, one path each except the TodoWrite: one NULL row for it
    assert table.num_rows == 8
    assert table.column("path").null_count == 1
    assert table.filter(table.column("path").is_null()).column("call_id").to_pylist() == ["t7"]
    assert rows(lake, "SELECT paths, paths_known FROM tool_links WHERE call_id = 't7'") == [
        ([], True)]


def test_a_later_ingest_shows_new_calls_as_not_yet_correlated(tmp_path):
    archive = _write(tmp_path, SESSION[:2])
    lake, _ = ingest_paths(tmp_path, archive)
    correlate(lake)
    with open(archive / "session.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(SESSION[7]) + "\n")
    ingest_paths(tmp_path, archive)
    assert rows(lake, "SELECT call_id, paths_known FROM tool_links ORDER BY call_id") == [
        ("t1", True), ("t4", False)]
    correlate(lake)
    assert rows(lake, "SELECT call_id, paths_known FROM tool_links ORDER BY call_id") == [
        ("t1", True), ("t4", True)]


# -- real samples: pairing worked out from the raw JSON -----------------------------------------

def _claude_pairs(path: Path) -> dict[str, tuple[int, int]]:
    """session -> (paired ids, orphan calls): tool_use ids against tool_result tool_use_ids."""
    uses, results = defaultdict(list), defaultdict(set)
    for line in path.read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        content = (obj.get("message") or {}).get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                uses[obj["sessionId"]].append(block["id"])
            elif block.get("type") == "tool_result":
                results[obj["sessionId"]].add(block["tool_use_id"])
    return {s: (len(set(ids) & results[s]), len(set(ids) - results[s])) for s, ids in uses.items()}


def test_real_samples_pair_as_the_raw_json_says(tmp_path):
    lake, _ = ingest_paths(tmp_path, REAL)
    correlate(lake)
    got = dict(((fmt, status), n) for fmt, status, n in rows(
        lake, "SELECT s.format, l.status, count(*) FROM tool_links l JOIN sessions s "
              "USING (session_id) WHERE s.format IN ('claude_code', 'codex_cli', 'gemini_cli') "
              "GROUP BY ALL"))
    # Claude Code: every file, tool_use ids vs tool_result ids (sub-agent files are sessions too)
    claude = [_claude_pairs(p) for p in sorted((REAL / "claude_code").glob("*.jsonl"))]
    paired = sum(p for counts in claude for p, _ in counts.values())
    orphans = sum(o for counts in claude for _, o in counts.values())
    assert (got.get(("claude_code", "paired")), got.get(("claude_code", "orphan_call"))) == \
        (paired, orphans or None)
    # Codex: function_call/custom_tool_call call_ids vs their *_output call_ids
    calls, outputs = set(), set()
    for line in (REAL / "codex" / "codex_session.jsonl").read_text(encoding="utf-8").splitlines():
        payload = json.loads(line).get("payload") or {}
        if payload.get("type") in ("function_call", "custom_tool_call"):
            calls.add(payload["call_id"])
        elif payload.get("type") in ("function_call_output", "custom_tool_call_output"):
            outputs.add(payload["call_id"])
    assert got.get(("codex_cli", "paired")) == len(calls & outputs) == 5
    # Gemini: toolCalls[].id with a functionResponse of the same id in their result
    doc = json.loads((REAL / "gemini" / "gemini_session.json").read_text(encoding="utf-8"))
    gemini_paired = sum(
        1 for message in doc["messages"] for call in message.get("toolCalls") or []
        if any((r.get("functionResponse") or {}).get("id") == call["id"] for r in call.get("result") or []))
    assert got.get(("gemini_cli", "paired")) == gemini_paired == 5
    assert not any(status != "paired" for (_, status) in got)


def test_real_mini_swe_agent_pairs_tool_call_ids_with_tool_messages(tmp_path):
    path = REAL / "mini_swe_agent" / "pvlib__pvlib-python-1606.traj.json"
    messages = json.loads(path.read_text(encoding="utf-8"))["messages"]
    # tool_calls here are Python reprs of lists; the ids are in extra.actions[].tool_call_id
    results = {m["tool_call_id"] for m in messages if m.get("role") == "tool"}
    calls = [a["tool_call_id"] for m in messages if m.get("role") == "assistant"
             for a in (_literal(m.get("extra")) or {}).get("actions", [])]
    lake, _ = ingest_paths(tmp_path, path)
    correlate(lake)
    got = dict(rows(lake, "SELECT status, count(*) FROM tool_links GROUP BY ALL"))
    assert got == {"paired": len(set(calls) & results), "orphan_call": len(set(calls) - results)}
    assert got == {"paired": 83, "orphan_call": 1}


def _literal(value):
    import ast
    if isinstance(value, str):
        return ast.literal_eval(value)
    return value


def test_real_claude_memory_edits_are_project_class(tmp_path):
    # 5c0375b4 edits, reads and multi-edits /path/to/Demo/CLAUDE.md (cwd /path/to/Demo)
    source = REAL / "claude_code" / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
    expected = 0
    for line in source.read_text(encoding="utf-8").splitlines():
        for block in (json.loads(line).get("message") or {}).get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use" and \
                    (block.get("input") or {}).get("file_path") == "/path/to/Demo/CLAUDE.md":
                expected += 1
    lake, _ = ingest_paths(tmp_path, source)
    correlate(lake)
    got = rows(lake, "SELECT tool_name, memory_classes, protected FROM tool_links "
                     "WHERE list_contains(paths, '/path/to/Demo/CLAUDE.md') ORDER BY call_seq")
    assert len(got) == expected == 3
    assert all(classes == ["project"] and protected for _, classes, protected in got)


def test_the_correlate_command_uses_config_memory_roots(tmp_path):
    from click.testing import CliRunner

    from pipeline.cli import cli

    lake, _ = ingest_paths(tmp_path, _write(tmp_path, SESSION))
    config = tmp_path / "ctxlake.toml"
    config.write_text('[memory]\nproject = ["src/"]\n', encoding="utf-8")
    runner = CliRunner()
    plain = json.loads(runner.invoke(cli, ["--lake", str(lake.root), "correlate", "--json"],
                                     catch_exceptions=False).output)
    assert (plain["paths"], plain["by_class"]["project"], plain["protected"]) == (7, 1, 2)
    configured = json.loads(runner.invoke(
        cli, ["--lake", str(lake.root), "correlate", "--config", str(config), "--json"],
        catch_exceptions=False).output)
    # src/a.py (t2), src/b.py (t4, t5) are now project memory: t4 and t5 protected too;
    # t2 is protected as well (one call, every path memory) though it has no result
    assert configured["by_class"]["project"] == 4
    assert configured["protected"] == 5
    assert rows(lake, "SELECT call_id FROM tool_links WHERE protected ORDER BY call_id") == [
        ("t1",), ("t2",), ("t4",), ("t5",), ("t6",)]
