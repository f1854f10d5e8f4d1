"""Claude Code 1.0.x inline sidechains (Task sub-agent threads written into the main file with
``isSidechain: true``): each thread is a sub-agent session of its own (parent = the main
session), planned, applied, replayed and summarised like a sub-agent file, usage counted once."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.stages.apply import apply_policy
from pipeline.core.config import Config
from pipeline.stages.ingest import ingest
from pipeline.core.lake import Lake
from pipeline.stages.plan import plan
from pipeline.stages.replay import replay
from pipeline.stages.restore import restore
from pipeline.stages.summarize import summarize
from tests.helpers.lake import REAL, ingest_paths, rows

SID = "9a9a9a9a-0000-4000-8000-000000000001"
BIG = "x" * 20000


class Writer:
    def __init__(self):
        self.lines: list[dict] = []
        self.second = 0

    def add(self, kind: str, uuid: str, parent: str | None, content, *, side: bool = False,
            api: str | None = None) -> None:
        self.second += 1
        obj = {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": SID,
               "timestamp": f"2025-09-03T00:{self.second // 60:02d}:{self.second % 60:02d}.000Z",
               "cwd": "/work/demo", "version": "1.0.98", "isSidechain": side,
               "userType": "external", "message": {"role": kind, "content": content}}
        if api:
            obj["requestId"] = f"req_{api}"
            obj["message"].update(id=f"msg_{api}", model="claude-sonnet-4-20250514",
                                  usage={"input_tokens": 10, "output_tokens": 7,
                                         "cache_creation_input_tokens": 0,
                                         "cache_read_input_tokens": 0})
        self.lines.append(obj)

    def bytes(self) -> bytes:
        return "".join(json.dumps(line) + "\n" for line in self.lines).encode()


def task_session() -> Writer:
    """Main thread: a prompt, two parallel Task calls; two sidechain threads, interleaved."""
    w = Writer()
    w.add("user", "m1", None, "Look at the project and its dependencies")
    w.add("assistant", "m2", "m1", [{"type": "tool_use", "id": "task1", "name": "Task",
                                     "input": {"prompt": "Examine package.json"}}], api="1")
    w.add("assistant", "m3", "m2", [{"type": "tool_use", "id": "task2", "name": "Task",
                                     "input": {"prompt": "Analyze the structure"}}], api="1")
    w.add("user", "a1", None, "Examine package.json", side=True)
    w.add("user", "b1", None, "Analyze the structure", side=True)
    w.add("assistant", "a2", "a1", [{"type": "tool_use", "id": "r1", "name": "Read",
                                     "input": {"file_path": "/work/demo/package.json"}}],
          side=True, api="a1")
    w.add("assistant", "b2", "b1", [{"type": "tool_use", "id": "g1", "name": "Glob",
                                     "input": {"pattern": "**/*"}}], side=True, api="b1")
    w.add("user", "a3", "a2", [{"type": "tool_result", "tool_use_id": "r1", "content": BIG}],
          side=True)
    w.add("user", "b3", "b2", [{"type": "tool_result", "tool_use_id": "g1", "content": "a.py"}],
          side=True)
    w.add("assistant", "a4", "a3", [{"type": "text", "text": "It uses react."}], side=True,
          api="a2")
    w.add("assistant", "b4", "b3", [{"type": "text", "text": "One file."}], side=True, api="b2")
    w.add("user", "m4", "m3", [{"type": "tool_result", "tool_use_id": "task1",
                                "content": "It uses react."},
                               {"type": "tool_result", "tool_use_id": "task2",
                                "content": "One file."}])
    w.add("assistant", "m5", "m4", [{"type": "text", "text": "A react app with one file."}],
          api="2")
    return w


def _lake(tmp_path: Path) -> tuple[Lake, Path, bytes]:
    data = task_session().bytes()
    path = tmp_path / "archive" / "projects" / "-work-demo" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    lake, _ = ingest_paths(tmp_path, tmp_path / "archive")
    return lake, path, data


A, B = f"{SID}/sidechain-a1", f"{SID}/sidechain-b1"


def test_each_inline_sidechain_thread_is_a_sub_agent_session_of_the_main_one(tmp_path):
    lake, _, _ = _lake(tmp_path)
    assert rows(lake, "SELECT session_id, parent_session_id, n_messages, n_tool_calls "
                      "FROM sessions ORDER BY session_id") == [
        (SID, None, 6, 2), (A, SID, 4, 1), (B, SID, 4, 1)]
    # the sub-agent's first "user" text (the Task prompt) is its prompt, as in an agent file
    assert rows(lake, "SELECT session_id, text FROM messages WHERE is_prompt "
                      "ORDER BY session_id") == [
        (SID, "Look at the project and its dependencies"), (A, "Examine package.json"),
        (B, "Analyze the structure")]
    # usage belongs to the thread that made the call, once: 2 + 2 + 2 API calls, 6 in all
    assert rows(lake, "SELECT session_id, api_calls, input_tokens FROM session_summary "
                      "ORDER BY session_id") == [(SID, 2, 20), (A, 2, 20), (B, 2, 20)]
    assert rows(lake, "SELECT count(*), sum(input_tokens) FROM usage_calls") == [(6, 60)]


def test_a_sidechain_payload_is_planned_applied_and_restored_like_a_sub_agent_files(tmp_path):
    lake, path, data = _lake(tmp_path)
    summary = plan(lake, policy="payload_prune", config=Config())
    assert summary.evictions == 1
    assert rows(lake, "SELECT session_id, call_id FROM evictions") == [(A, "r1")]
    applied = apply_policy(lake, policy="payload_prune", out=tmp_path / "out")
    assert applied.problems == []
    [pruned] = list((tmp_path / "out").rglob("*.jsonl"))
    assert b"[ctxlake compaction]" in pruned.read_bytes() and BIG.encode() not in pruned.read_bytes()
    restore(pruned, store=lake.store_dir, out=tmp_path / "restored.jsonl")
    assert (tmp_path / "restored.jsonl").read_bytes() == data


def test_replay_covers_every_api_call_of_the_file_and_summaries_fold_threads_into_the_parent(
        tmp_path):
    lake, _, _ = _lake(tmp_path)
    replay(lake, policies=["microcompact"], config=Config())
    assert rows(lake, "SELECT session_id, turns FROM policy_eval WHERE policy = 'none' "
                      "ORDER BY session_id") == [(SID, 2), (A, 2), (B, 2)]
    summarize(lake, tz="UTC")
    log = (lake.summaries_dir / "sessions" / "2025-09-03.md").read_text(encoding="utf-8")
    assert log.count("### ") == 1 and "Look at the project and its dependencies" in log
    assert sorted(p.name for p in (lake.summaries_dir / "recovery").iterdir()) == [f"{SID}.md"]
    doc = (lake.summaries_dir / "recovery" / f"{SID}.md").read_text(encoding="utf-8")
    assert f"- Sub-agent sessions: 2 ({A}, {B})" in doc


def test_an_appended_sidechain_record_joins_its_thread(tmp_path):
    w = task_session()
    data = w.bytes()
    path = tmp_path / "archive" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    lake = Lake(tmp_path / "lake")
    ingest([path], lake=lake, workers=1)
    with open(path, "ab") as handle:
        handle.write(json.dumps({**w.lines[-3], "uuid": "a5", "parentUuid": "a4",
                                 "message": {"role": "user", "content": "and the lockfile?"}})
                     .encode() + b"\n")
    assert ingest([path], lake=lake, workers=1).files_appended == 1
    assert rows(lake, "SELECT session_id, n_messages FROM sessions ORDER BY 1") == [
        (SID, 6), (A, 5), (B, 4)]


def test_the_real_1_0_108_session_is_replayed_with_all_its_api_calls(tmp_path):
    name = "claude_code/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
    lines = [json.loads(line) for line in (REAL / name).read_text(encoding="utf-8").splitlines()]
    calls = {(o["message"]["id"], o["requestId"]) for o in lines if o["type"] == "assistant"}
    lake, _ = ingest_paths(tmp_path, REAL / name)
    sessions = rows(lake, "SELECT session_id, parent_session_id FROM sessions ORDER BY 1")
    main = lines[0]["sessionId"]
    assert [s for s, _ in sessions][0] == main and len(sessions) == 3
    assert all(parent == main for _, parent in sessions[1:])
    replay(lake, policies=["microcompact"], config=Config())
    assert rows(lake, "SELECT sum(turns) FROM policy_eval WHERE policy = 'none'") == \
        [(len(calls),)]
    assert rows(lake, "SELECT count(*) FROM usage_calls") == [(len(calls),)]
