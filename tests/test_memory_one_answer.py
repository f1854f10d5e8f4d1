"""Managed-memory classes are decided once, by correlate: plan, apply and replay read that
answer (``tool_paths`` / ``tool_links``) instead of classifying paths again."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.stages.apply import apply_policy
from pipeline.core.config import Config, config_from_dict
from pipeline.stages.correlate import correlate
from pipeline.stages.plan import plan
from pipeline.stages.replay import replay
from tests.helpers.lake import REAL, ingest_paths, rows

HASH = "ab" * 32


def _read(cid: str, path: str, text: str) -> dict:
    return {"id": cid, "name": "read_file", "args": {"absolute_path": path}, "status": "success",
            "timestamp": "2026-01-02T10:00:02.000Z",
            "result": [{"functionResponse": {"id": cid, "name": "read_file",
                                             "response": {"output": text}}}]}


def gemini_memory_session(root: Path) -> Path:
    """A Gemini CLI session (no cwd recorded, only the project hash) that reads its project's
    GEMINI.md by absolute path, then two code files; two hours idle; then a new prompt."""
    path = root / ".gemini" / "tmp" / HASH / "chats" / "session-2026-01-02T10-00-5e55101d.jsonl"
    path.parent.mkdir(parents=True)
    lines = [
        {"sessionId": "gem-mem", "projectHash": HASH, "startTime": "2026-01-02T10:00:00.000Z",
         "lastUpdated": "2026-01-02T12:00:05.000Z", "kind": "main"},
        {"id": "u1", "timestamp": "2026-01-02T10:00:01.000Z", "type": "user",
         "content": [{"text": "read the project notes and the code"}]},
        {"id": "g1", "timestamp": "2026-01-02T10:00:03.000Z", "type": "gemini",
         "model": "gemini-2.5-pro", "content": [{"text": "Read them."}],
         "toolCalls": [_read("c1", "/home/bob/proj/GEMINI.md", "# notes " * 200),
                       _read("c2", "/home/bob/proj/a.py", "print(1) " * 200),
                       _read("c3", "/home/bob/proj/b.py", "print(2) " * 200)]},
        {"id": "u2", "timestamp": "2026-01-02T12:00:00.000Z", "type": "user",
         "content": [{"text": "back after lunch, continue"}]},
        {"id": "g2", "timestamp": "2026-01-02T12:00:05.000Z", "type": "gemini",
         "model": "gemini-2.5-pro", "content": [{"text": "Continuing."}]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return root / ".gemini"


POLICY = "microcompact(keep_recent=1)"


def test_a_gemini_memory_read_tool_links_calls_project_is_preserved_by_plan_apply_and_replay(
        tmp_path):
    lake, _ = ingest_paths(tmp_path, gemini_memory_session(tmp_path / "archive"))
    correlate(lake)
    assert rows(lake, "SELECT call_id, memory_classes, protected FROM tool_links "
                      "ORDER BY call_id") == [("c1", ["project"], True), ("c2", ["none"], False),
                                              ("c3", ["none"], False)]
    summary = plan(lake, policy=POLICY, config=Config())
    assert (summary.evictions, summary.preserved) == (1, 1)
    assert rows(lake, "SELECT call_id FROM evictions") == [("c2",)]
    applied = apply_policy(lake, policy=POLICY, out=tmp_path / "out")
    [pruned] = list((tmp_path / "out").rglob("*.jsonl"))
    text = pruned.read_text(encoding="utf-8")
    assert applied.problems == [] and "# notes " * 200 in text and "print(1) " * 200 not in text
    replay(lake, policies=[POLICY], config=Config())
    assert rows(lake, "SELECT evictions, protected_violations FROM policy_eval "
                      "WHERE policy = ?", [POLICY]) == [(1, 0)]


def test_planning_before_correlate_gives_correlates_answer(tmp_path):
    lake, _ = ingest_paths(tmp_path, gemini_memory_session(tmp_path / "archive"))
    before = plan(lake, policy=POLICY, config=Config())          # tool_paths not written yet
    first = rows(lake, "SELECT call_id FROM evictions")
    correlate(lake)
    after = plan(lake, policy=POLICY, config=Config())
    assert first == rows(lake, "SELECT call_id FROM evictions") == [("c2",)]
    assert (before.preserved, after.preserved) == (1, 1)


def test_plan_reads_the_stored_classes_of_correlate(tmp_path):
    """Correlate ran with an extra project root: planning with the default config follows
    correlate's stored answer, it does not classify again."""
    lake, _ = ingest_paths(tmp_path, gemini_memory_session(tmp_path / "archive"))
    correlate(lake, roots=config_from_dict({"memory": {"project": ["a.py"]}}).memory_roots())
    assert rows(lake, "SELECT memory_classes FROM tool_links WHERE call_id = 'c2'") == \
        [(["project"],)]
    summary = plan(lake, policy=POLICY, config=Config())
    assert (summary.evictions, summary.preserved) == (0, 2)     # c3 is the 1 kept recent
    assert rows(lake, "SELECT call_id FROM evictions") == []


def test_on_the_real_samples_every_read_plan_sees_has_the_tool_links_class(tmp_path):
    from pipeline.stages.session_engine import iter_session_inputs

    lake, _ = ingest_paths(tmp_path, REAL)
    correlate(lake)
    expected = {(sid, cid): classes for sid, cid, classes in rows(
        lake, "SELECT session_id, call_id, memory_classes FROM tool_links "
              "WHERE tool_family = 'read' AND status <> 'orphan_result'")}
    seen = {}
    for session in iter_session_inputs(lake, Config()):
        for call in session.view().call_by_seq.values():
            if call.family == "read" and call.call_id is not None:
                seen[(session.session_id, call.call_id)] = list(call.memory_classes)
    assert seen and {k: v for k, v in seen.items() if k in expected} == \
        {k: expected[k] for k in seen if k in expected}
