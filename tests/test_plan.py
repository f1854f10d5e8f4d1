"""The plan stage over a lake: real samples, determinism, ignore patterns, sidechains,
session filters, and the `plan` / `suggest` commands."""

from __future__ import annotations

import hashlib
import os
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.helpers.lake import REAL, ingest_paths, rows
from pipeline.cli import cli
from pipeline.core.config import Config, config_from_dict
from pipeline.core.errors import UsageError
from pipeline.core.lake import DERIVED_BUCKETS, session_bucket
from pipeline.policies.base import CONTEXT_EDIT_TEXT
from pipeline.text.tokens import estimate_tokens
from pipeline.stages.plan import EVICTIONS_SCHEMA, PLANS_SCHEMA, plan, plan_many, suggest
from pipeline.stages.session_engine import iter_session_inputs, load_session_input

ALL = ["none", "microcompact", "payload_prune", "context_editing", "observation_masking",
       "strategic", "tail_protect+microcompact", "payload_prune+microcompact",
       "observation_masking(window=10)", "context_editing(trigger=0, keep=0)"]


@pytest.fixture(scope="module")
def real_lake(tmp_path_factory):
    lake, _ = ingest_paths(tmp_path_factory.mktemp("real"), REAL)
    return lake


KEY_SUFFIX = hashlib.sha256(b'observation_masking(window=10)').hexdigest()[:8]


def file_hashes(lake) -> dict[str, str]:
    return {str(p.relative_to(lake.derived_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(lake.derived_dir.rglob("*.parquet"))
            if p.parent.name in ("plans", "evictions")}


def test_every_real_session_is_planned_and_sub_agents_are_their_own_sessions(real_lake):
    summary = plan(real_lake, policy="none", config=Config())
    # SOURCES.md: 4 Claude Code files (one a sub-agent of claude_session), 1 Codex, 1 Gemini,
    # 2 SWE-agent and 2 mini-SWE-agent trajectories, one session each, plus the two inline
    # sidechain threads of the 1.0.108 file (sub-agent sessions of their own)
    assert (summary.sessions, summary.sessions_ignored, summary.plans) == (12, 0, 12)
    planned = {r[0] for r in rows(real_lake, "SELECT session_id FROM plans WHERE policy = 'none'")}
    assert "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9/agent-0c4c3cf8" in planned
    assert {"5c0375b4-57a5-4f26-b12d-d022ee4e51b7/sidechain-6340ddef",
            "5c0375b4-57a5-4f26-b12d-d022ee4e51b7/sidechain-83e2917c"} <= planned


def test_planning_twice_gives_byte_identical_files(real_lake):
    plan_many(real_lake, policies=ALL, config=Config())
    first = file_hashes(real_lake)
    # one file per policy, table and session bucket
    assert len(first) == 2 * len(ALL) * DERIVED_BUCKETS
    plan_many(real_lake, policies=ALL, config=Config(), workers=1)
    assert file_hashes(real_lake) == first
    table = pq.read_table(real_lake.derived_dir / "plans" / "none.b00.parquet")
    assert table.schema == PLANS_SCHEMA
    key = f"payload_prune_microcompact-{hashlib.sha256(b'payload_prune+microcompact').hexdigest()[:8]}"
    ev = pq.read_table(real_lake.derived_dir / "evictions" / f"{key}.b00.parquet")
    assert ev.schema == EVICTIONS_SCHEMA


def test_replanning_one_session_rewrites_only_its_bucket(real_lake):
    plan(real_lake, policy="observation_masking(window=10)", config=Config())
    before = {name: os.stat(real_lake.derived_dir / name).st_mtime_ns for name in file_hashes(real_lake)}
    plan(real_lake, policy="observation_masking(window=10)", config=Config(),
         session_id="pvlib__pvlib-python-1606@mini_swe_agent")
    after = {name: os.stat(real_lake.derived_dir / name).st_mtime_ns for name in file_hashes(real_lake)}
    bucket = f".b{session_bucket('pvlib__pvlib-python-1606@mini_swe_agent'):02d}.parquet"
    changed = sorted(name for name in after if after[name] != before.get(name))
    assert changed == [f"evictions/observation_masking_window_10-{KEY_SUFFIX}{bucket}",
                       f"plans/observation_masking_window_10-{KEY_SUFFIX}{bucket}"]


def test_replanning_one_session_keeps_the_other_sessions_rows(real_lake):
    plan(real_lake, policy="observation_masking(window=10)", config=Config())
    before = file_hashes(real_lake)
    summary = plan(real_lake, policy="observation_masking(window=10)", config=Config(),
                   session_id="pvlib__pvlib-python-1606@mini_swe_agent")
    assert summary.sessions == 1
    assert file_hashes(real_lake) == before
    with pytest.raises(UsageError, match="no session 'nope'"):
        plan(real_lake, policy="none", config=Config(), session_id="nope")


def test_observation_masking_on_the_mini_swe_agent_trajectory(real_lake):
    path = REAL / "mini_swe_agent" / "pvlib__pvlib-python-1606.traj.json"
    messages = json.loads(path.read_text())["messages"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    tool_ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    # one turn per assistant message (84); turn k keeps turns k-10..k-1: the results of turns
    # 0..(84-12) are masked, i.e. the first 84 - 11 = 73 tool messages
    expected = tool_ids[:len(assistant) - 11]
    assert len(expected) == 73
    plan(real_lake, policy="observation_masking(window=10)", config=Config())
    got = rows(real_lake, "SELECT call_id FROM evictions WHERE policy = ? AND session_id = ? "
                          "ORDER BY at_seq, seq",
               ["observation_masking(window=10)", "pvlib__pvlib-python-1606@mini_swe_agent"])
    assert [r[0] for r in got] == expected


def test_inline_sidechain_rows_are_never_planned(real_lake):
    path = REAL / "claude_code" / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
    results, last_assistant, memory_reads = {}, 0, set()
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        obj = json.loads(line)
        content = (obj.get("message") or {}).get("content")
        if obj.get("isSidechain") or not isinstance(content, list):
            continue
        if obj["type"] == "assistant":
            last_assistant = line_no
        for block in content:
            if block.get("type") == "tool_result":
                body = block.get("content")
                text = body if isinstance(body, str) else "\n".join(
                    b.get("text", "") for b in body or [])
                # results no bigger than the placeholder are left alone (nothing to free)
                if estimate_tokens(text) > estimate_tokens(CONTEXT_EDIT_TEXT):
                    results[line_no] = block["tool_use_id"]
            if block.get("type") == "tool_use" and block["name"] == "Read" and \
                    block["input"]["file_path"] == obj["cwd"] + "/CLAUDE.md":
                memory_reads.add(block["id"])
    # keep=0, trigger=0: every main-chain result before the last main-chain API call is
    # cleared, except reads of the project's CLAUDE.md (managed memory: line 48 reads
    # /path/to/Demo/CLAUDE.md with cwd /path/to/Demo)
    assert len(memory_reads) == 1
    expected = sorted(line for line, cid in results.items()
                      if line < last_assistant and cid not in memory_reads)
    plan(real_lake, policy="context_editing(trigger=0, keep=0)", config=Config())
    got = rows(real_lake, "SELECT line_no, call_id FROM evictions WHERE policy = ? AND "
                          "session_id = ? ORDER BY line_no",
               ["context_editing(trigger=0, keep=0)", "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"])
    assert [r[0] for r in got] == expected
    assert [r[1] for r in got] == [results[line] for line in expected]


def test_ignored_sessions_are_skipped_and_counted(real_lake, tmp_path):
    # the three files whose first prompt is "add myapp directory ..." (grep of the samples:
    # claude_session.jsonl, codex_session.jsonl, gemini_session.json); the sub-agent's
    # first prompt is "Warmup"
    config = config_from_dict({"ignore_patterns": ["^ADD MYAPP directory", "^warmup$"]})
    summary = plan(real_lake, policy="none", config=config)
    assert (summary.sessions, summary.sessions_ignored) == (8, 4)
    planned = {r[0] for r in rows(real_lake, "SELECT session_id FROM plans WHERE policy = 'none'")}
    assert not planned & {"019b04ae-b1c6-7c72-a134-a4c2de66058c",
                          "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9",
                          "f0a689a6-b0ac-407f-afcc-4fafa9e14e8a",
                          "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9/agent-0c4c3cf8"}
    assert len(list(iter_session_inputs(real_lake, config))) == 8
    assert len(list(iter_session_inputs(real_lake, config, include_ignored=True))) == 12
    plan(real_lake, policy="none", config=Config())     # restore for the other tests


def test_planning_one_session_per_loading_pass_gives_the_same_files_and_reads_first_prompts_once(
        real_lake, monkeypatch):
    from pipeline.stages import session_engine

    plan_many(real_lake, policies=ALL, config=Config(), workers=1)
    one_pass = file_hashes(real_lake)
    loads, verdicts = [], []
    real_load, real_verdicts = session_engine.load_sessions, session_engine.session_verdicts
    monkeypatch.setattr(session_engine, "load_sessions",
                        lambda lake, rows, *a, **k: loads.append(len(rows)) or real_load(lake, rows, *a, **k))
    monkeypatch.setattr(session_engine, "session_verdicts",
                        lambda *a, **k: verdicts.append(1) or real_verdicts(*a, **k))
    monkeypatch.setattr(session_engine, "LOAD_BYTES", 1)      # every session a pass of its own
    plan_many(real_lake, policies=ALL, config=Config(), workers=1)
    assert (loads, len(verdicts)) == ([1] * 12, 1)
    assert file_hashes(real_lake) == one_pass
    # the verdicts read before the passes still skip the ignored sessions
    config = config_from_dict({"ignore_patterns": ["^ADD MYAPP directory", "^warmup$"]})
    summary = plan(real_lake, policy="none", config=config)
    assert (summary.sessions, summary.sessions_ignored, len(verdicts)) == (8, 4, 2)
    plan(real_lake, policy="none", config=Config())     # restore for the other tests


def test_since_plans_only_sessions_started_that_day_or_later(real_lake):
    expected = {r[0] for r in rows(real_lake, "SELECT session_id FROM messages GROUP BY 1 "
                                              "HAVING min(timestamp) >= TIMESTAMPTZ '2025-12-01'")}
    summary = plan(real_lake, policy="microcompact(keep_recent=3)", config=Config(),
                   since="2025-12-01")
    assert summary.sessions == len(expected) == 5
    with pytest.raises(UsageError, match="cannot read the date"):
        plan(real_lake, policy="none", config=Config(), since="yesterday")


def test_one_session_can_be_loaded_for_replay(real_lake):
    session = load_session_input(real_lake, "019b04ae-b1c6-7c72-a134-a4c2de66058c", Config())
    view = session.view()
    assert view.info.format == "codex_cli"
    assert len(view.items) == 5 and view.turns


def claude_line(kind: str, n: int, minute: int, content, **extra) -> str:
    obj = {"type": kind, "sessionId": "sess-strategic", "uuid": f"u{n}", "parentUuid": None,
           "timestamp": f"2026-01-05T09:{minute:02d}:00.000Z", "cwd": "/work/p",
           "version": "2.0.28", "message": {"role": kind, "content": content}, **extra}
    if kind == "assistant":
        obj["requestId"] = f"req_{n}"
        obj["message"].update(id=f"msg_{n}", model="claude-sonnet-4-5")
    return json.dumps(obj)


def write_strategic_session(folder: Path) -> Path:
    lines = [claude_line("user", 0, 0, "implement the importer")]
    n = 1
    steps = [("Edit", {"file_path": f"src/m{i}.py", "old_string": "a", "new_string": "b"})
             for i in range(6)]
    steps.append(("TodoWrite", {"todos": [{"content": "importer", "status": "completed",
                                           "activeForm": "importing"}]}))
    for minute, (tool, tool_input) in enumerate(steps, start=1):
        lines.append(claude_line("assistant", n, minute, [
            {"type": "tool_use", "id": f"toolu_{n}", "name": tool, "input": tool_input}]))
        lines.append(claude_line("user", n + 1, minute, [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "ok"}]))
        n += 2
    lines.append(claude_line("assistant", n, 9, [{"type": "text", "text": "Importer done."}]))
    path = folder / "projects" / "-work-p" / "sess-strategic.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_plan_and_suggest_commands(tmp_path):
    write_strategic_session(tmp_path / "archive")
    lake, _ = ingest_paths(tmp_path, tmp_path / "archive")
    runner = CliRunner()
    out = runner.invoke(cli, ["--lake", str(lake.root), "plan", "--policy", "none",
                              "--policy", "strategic(threshold=5)", "--json"],
                        catch_exceptions=False)
    assert out.exit_code == 0, out.output
    summaries = json.loads(out.output)
    assert [(s["policy"], s["sessions"], s["suggestions"]) for s in summaries] == \
        [("none", 1, 0), ("strategic(threshold=5)", 1, 1)]
    out = runner.invoke(cli, ["--lake", str(lake.root), "suggest", "sess-strategic",
                              "--policy", "strategic(threshold=5)", "--minimal"],
                        catch_exceptions=False)
    assert out.output == "[Compact? 7/5 calls | Task done | Clean state] Y/n/defer\n"
    out = runner.invoke(cli, ["--lake", str(lake.root), "suggest", "sess-strategic",
                              "--policy", "strategic(threshold=5)"], catch_exceptions=False)
    assert " Context Compaction Suggested\n" in out.output
    assert "   Tool calls:     7 significant (threshold: 5)\n" in out.output
    assert "marked complete (1 todo items completed)\n" in out.output
    data = json.loads(runner.invoke(cli, ["--lake", str(lake.root), "suggest", "sess-strategic",
                                          "--json"], catch_exceptions=False).output)
    assert data["suggestions"] == [] and data["suppressed"] == []    # 7 < 50
    text = runner.invoke(cli, ["--lake", str(lake.root), "plan", "--policy", "microcompact"],
                         catch_exceptions=False).output
    assert "microcompact" in text and "tokens saved" in text
    bad = runner.invoke(cli, ["--lake", str(lake.root), "plan", "--policy", "microcompact(x=1)"])
    assert bad.exit_code != 0


def test_suggest_reports_the_session_even_when_ignored(tmp_path):
    write_strategic_session(tmp_path / "archive")
    lake, _ = ingest_paths(tmp_path, tmp_path / "archive")
    config = config_from_dict({"ignore_patterns": ["importer"]})
    result = suggest(lake, "sess-strategic", config=config, policy="strategic(threshold=5)")
    assert result.ignored_by == "importer" and len(result.points) == 1
    assert plan(lake, policy="none", config=config).sessions_ignored == 1
