"""apply: pruned transcripts in the source format, byte-exact restore, per-format placement.

Evictions are built here by hand from the lake's ``tool_results``/``tool_calls`` rows (every
result cleared, or pruned, or every call's input cleared), so every payload of every real
sample goes through apply and restore. Expected values come from the files themselves
(sha256 of the original bytes, fields read with ``json``), never from apply's output.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.helpers.lake import REAL, ingest_paths, rows
from pipeline.stages.apply import apply_policy, encode_json_string
from pipeline.cli import cli
from pipeline.core.errors import UsageError
from pipeline.text.jsonspan import find_spans, leading_members
from pipeline.core.lake import Lake
from pipeline.stages.restore import restore, verify
from pipeline.core.schema import EVICTIONS
from pipeline.formats import READERS

CLEARED = "[Old tool result content cleared]"
SAMPLES = sorted(str(p.relative_to(REAL)) for p in REAL.rglob("*")
                 if p.is_file() and p.name != "SOURCES.md")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def prune_text(payload: str, sha: str) -> str:
    """A payload_prune-style replacement: preview, marker, locator."""
    return (f"{payload[:40]}\n[... elided ...]\n{payload[-10:]}\n[ctxlake compaction] full "
            f"payload: sha256 {sha}; retrieve it from the payload store: compaction://{sha}")


def hand_evictions(lake: Lake, *, policy: str, action: str, where: str = "TRUE",
                   every_input: bool = False) -> pa.Table:
    """Evictions of EVERY tool result (clear/prune) or every tool call input (clear_input;
    only the inputs the format keeps in a field of their own unless ``every_input``)."""
    if action == "clear_input":
        found = [row[:-1] for row in rows(lake, f"""
            SELECT c.session_id, c.call_id, c.tool_name, c.source_id, c.line_no, c.json_path,
                   c.seq, c.block_no, NULL AS sha, '', s.format
            FROM tool_calls c JOIN sources s USING (source_id) WHERE {where} ORDER BY c.seq""")
                 if every_input or READERS[row[-1]].input_clearable(row[1], row[2])]
    else:
        found = rows(lake, f"""
            SELECT r.session_id, r.call_id, r.tool_name, r.source_id, r.line_no, r.json_path,
                   r.seq, r.block_no, r.payload_sha256, m.text
            FROM tool_results r JOIN sources s USING (source_id)
            JOIN messages m ON m.source_id = r.source_id AND m.seq = r.seq
            WHERE {where} ORDER BY r.seq""")
    out = []
    for session, call, tool, source, line, path, seq, block, sha, text in found:
        if action == "prune":
            replacement, locator = prune_text(text, sha), f"compaction://{sha}"
        elif action == "clear":
            replacement, locator = CLEARED, None
        else:
            replacement, locator = "{}", None
        out.append(dict(plan_id="hand", policy=policy, session_id=session, call_id=call,
                        tool_name=tool, action=action, reason="test", paths=[],
                        tokens_before=0, tokens_after=0, bytes_before=0, bytes_after=0,
                        locator=locator, payload_sha256=sha, replacement=replacement,
                        source_id=source, line_no=line, json_path=path, seq=seq,
                        block_no=block, at_seq=seq))
    return pa.Table.from_pylist(out, schema=EVICTIONS)


@pytest.fixture(scope="module")
def real_lake(tmp_path_factory):
    base = tmp_path_factory.mktemp("real")
    archive = base / "archive"
    shutil.copytree(REAL, archive, ignore=shutil.ignore_patterns("SOURCES.md"))
    lake, summary = ingest_paths(base, archive)
    assert summary.files == len(SAMPLES) and summary.quarantined == 0
    return lake, archive


def _fresh_copy(real_lake, tmp_path) -> tuple[Lake, Path]:
    """A private copy of the ingested lake (apply writes its store)."""
    lake, archive = real_lake
    shutil.copytree(lake.root, tmp_path / "lake")
    return Lake(tmp_path / "lake"), archive


@pytest.mark.parametrize("action", ["clear", "prune", "clear_input"])
def test_every_real_sample_restores_to_its_sha256_after_apply(real_lake, tmp_path, action):
    lake, archive = _fresh_copy(real_lake, tmp_path)
    table = hand_evictions(lake, policy=action, action=action)
    assert table.num_rows > 100
    summary = apply_policy(lake, policy=action, out=tmp_path / "out", evictions=table)
    assert summary.problems == []
    assert summary.files == len(SAMPLES)
    changed = set()
    for rel in SAMPLES:
        original = (archive / rel).read_bytes()
        output = tmp_path / "out" / action / rel
        pruned = output.read_bytes()
        if pruned != original:
            changed.add(rel)
        result = restore(output, store=lake.store_dir)
        assert _sha(result.data) == _sha(original), rel
    # claude_agent.jsonl holds no tool call at all (grep -c tool_ claude_agent.jsonl == 0);
    # the mini-SWE-agent v1 sample's commands are inside its replies' text: no input to clear
    unchanged = {"claude_code/claude_agent.jsonl"} | (
        {"mini_swe_agent/django__django-14155.traj.json"} if action == "clear_input" else set())
    assert changed == set(SAMPLES) - unchanged
    assert verify(lake, out=tmp_path / "out").problems == []


def test_untouched_lines_are_byte_copies_and_a_changed_line_keeps_every_other_field(
        real_lake, tmp_path):
    lake, archive = _fresh_copy(real_lake, tmp_path)
    rel = "claude_code/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
    apply_policy(lake, policy="clear", out=tmp_path / "out",
                 evictions=hand_evictions(lake, policy="clear", action="clear"))
    before = (archive / rel).read_bytes().split(b"\n")
    after = (tmp_path / "out" / "clear" / rel).read_bytes().split(b"\n")
    assert len(before) == len(after)
    with_results = 0
    for old, new in zip(before, after):
        if not old:
            assert new == old
            continue
        old_obj, new_obj = json.loads(old), json.loads(new)
        blocks = old_obj.get("message", {}).get("content")
        results = [i for i, b in enumerate(blocks) if isinstance(b, dict)
                   and b.get("type") == "tool_result"] if isinstance(blocks, list) else []
        if not results:
            assert new == old          # byte for byte
            continue
        with_results += 1
        for i in results:
            assert new_obj["message"]["content"][i]["content"] == CLEARED
            old_obj["message"]["content"][i]["content"] = CLEARED
        if "toolUseResult" in old_obj and len(results) == 1:
            assert new_obj["toolUseResult"] == CLEARED
            old_obj["toolUseResult"] = CLEARED
        assert new_obj == old_obj      # every other field (ids, roles, uuids) kept
        assert list(new_obj) == list(json.loads(old))  # key order kept
    assert with_results == 21          # grep -c tool_result on the file


def _clear_all(real_lake, tmp_path) -> tuple[Path, Path]:
    lake, archive = _fresh_copy(real_lake, tmp_path)
    summary = apply_policy(lake, policy="clear", out=tmp_path / "out",
                           evictions=hand_evictions(lake, policy="clear", action="clear"))
    assert summary.problems == []
    return archive, tmp_path / "out" / "clear"


def test_codex_gemini_and_swe_payloads_and_their_duplicates_are_cleared(real_lake, tmp_path):
    archive, out = _clear_all(real_lake, tmp_path)
    # Codex: every function_call_output / custom_tool_call_output
    outputs = [json.loads(line)["payload"] for line in (out / "codex/codex_session.jsonl")
               .read_text().splitlines() if '_call_output"' in line]
    originals = [line for line in (archive / "codex/codex_session.jsonl").read_text().splitlines()
                 if '_call_output"' in line]
    assert len(outputs) == len(originals) > 0
    assert all(o["output"] == CLEARED for o in outputs)
    # Gemini: every functionResponse output, and the non-empty resultDisplay copies
    doc = json.loads((out / "gemini/gemini_session.json").read_text())
    original = json.loads((archive / "gemini/gemini_session.json").read_text())
    calls = [c for m in doc["messages"] for c in m.get("toolCalls", [])]
    old_calls = [c for m in original["messages"] for c in m.get("toolCalls", [])]
    assert all(c["result"][0]["functionResponse"]["response"]["output"] == CLEARED for c in calls)
    for new, old in zip(calls, old_calls):
        expected = CLEARED if old.get("resultDisplay") not in (None, "") else old.get("resultDisplay")
        assert new.get("resultDisplay") == expected
    # SWE-agent 1.x: tool messages and the trajectory observations they repeat
    traj = json.loads((out / "swe_agent/6e44b9__sweagenttestrepo-1c2844.traj").read_text())
    assert [h["content"] == CLEARED for h in traj["history"]] == \
        [h["role"] == "tool" for h in traj["history"]]
    # 5 steps: 4 tool calls answered in history, the final submit only in trajectory
    assert [t["observation"] == CLEARED for t in traj["trajectory"]] == [True] * 4 + [False]
    # mini-SWE-agent v2: tool messages and their extra.raw_output copy
    mini = json.loads((out / "mini_swe_agent/pvlib__pvlib-python-1606.traj.json").read_text())
    tools = [m for m in mini["messages"] if m["role"] == "tool"]
    assert len(tools) == 83 and all(m["content"] == CLEARED for m in tools)
    assert all(m["extra"]["raw_output"] == CLEARED for m in tools if m["extra"].get("raw_output"))
    # mini v1 (text mode): <returncode> observations cleared, format-error messages kept
    v1 = json.loads((out / "mini_swe_agent/django__django-14155.traj.json").read_text())
    v1_old = json.loads((archive / "mini_swe_agent/django__django-14155.traj.json").read_text())
    for new, old in zip(v1["messages"], v1_old["messages"]):
        if old["role"] == "user" and old["content"].startswith("<returncode>"):
            assert new["content"] == CLEARED
        if old["content"].startswith("Please always provide EXACTLY ONE action"):
            assert new == old


def test_clear_input_empties_object_inputs_and_string_arguments(real_lake, tmp_path):
    lake, archive = _fresh_copy(real_lake, tmp_path)
    summary = apply_policy(lake, policy="inputs", out=tmp_path / "out",
                           evictions=hand_evictions(lake, policy="inputs", action="clear_input"))
    assert summary.problems == []
    out = tmp_path / "out" / "inputs"
    session = [json.loads(line) for line in
               (out / "claude_code/claude_session.jsonl").read_text().splitlines()]
    uses = [b for o in session if isinstance(o.get("message", {}).get("content"), list)
            for b in o["message"]["content"] if b.get("type") == "tool_use"]
    assert uses and all(b["input"] == {} for b in uses)
    codex = [json.loads(line)["payload"] for line in
             (out / "codex/codex_session.jsonl").read_text().splitlines()]
    assert all(p["arguments"] == "{}" for p in codex if p.get("type") == "function_call")
    assert all(p["input"] == "{}" for p in codex if p.get("type") == "custom_tool_call")


def test_clearing_the_input_of_a_command_written_inside_a_reply_is_refused_not_the_reply_wiped(
        real_lake, tmp_path):
    lake, archive = _fresh_copy(real_lake, tmp_path)
    where = "s.rel_path = 'mini_swe_agent/django__django-14155.traj.json'"
    table = hand_evictions(lake, policy="inputs", action="clear_input", where=where,
                           every_input=True)
    replies = json.loads((archive / "mini_swe_agent/django__django-14155.traj.json").read_text())
    one_command = [m for m in replies["messages"] if m["role"] == "assistant"
                   and len(re.findall(r"```bash\s*\n(.*?)\n```", m["content"], re.DOTALL)) == 1]
    assert table.num_rows == len(one_command) == 17
    summary = apply_policy(lake, policy="inputs", out=tmp_path / "out", evictions=table)
    refused = {f"no input for call {call!r} here (output left unpruned)"
               for call in table.column("call_id").to_pylist()}
    assert [p.kind for p in summary.problems] == ["plan"]
    assert summary.problems[0].error in refused
    assert not (tmp_path / "out" / "inputs" / "mini_swe_agent").exists() \
        or (tmp_path / "out" / "inputs" / "mini_swe_agent/django__django-14155.traj.json"
            ).read_bytes() == (archive / "mini_swe_agent/django__django-14155.traj.json").read_bytes()
    assert hand_evictions(lake, policy="inputs", action="clear_input", where=where).num_rows == 0


def test_reapplying_the_same_plan_is_a_no_op(real_lake, tmp_path):
    lake, _ = _fresh_copy(real_lake, tmp_path)
    table = hand_evictions(lake, policy="prune", action="prune")
    first = apply_policy(lake, policy="prune", out=tmp_path / "out", evictions=table)
    snapshot = {p: (p.stat().st_mtime_ns, p.stat().st_ino)
                for p in list((tmp_path / "out").rglob("*")) + list(lake.store_dir.rglob("*"))}
    again = apply_policy(lake, policy="prune", out=tmp_path / "out", evictions=table)
    assert (first.files_written, again.files_written) == (len(SAMPLES), 0)
    assert again.files_up_to_date == len(SAMPLES)
    assert again.payloads_stored == 0 and again.problems == []
    assert {p: (p.stat().st_mtime_ns, p.stat().st_ino)
            for p in list((tmp_path / "out").rglob("*")) + list(lake.store_dir.rglob("*"))} \
        == snapshot


def test_pruned_outputs_ingest_as_cleared_and_pruned_with_reduced_est_tokens(real_lake, tmp_path):
    lake, _ = _fresh_copy(real_lake, tmp_path)
    where = "s.rel_path = 'claude_code/claude_session.jsonl'"
    cleared = hand_evictions(lake, policy="mixed", action="clear", where=where).to_pylist()
    pruned = hand_evictions(lake, policy="mixed", action="prune", where=where).to_pylist()
    # first two results cleared, the others pruned
    mixed = cleared[:2] + pruned[2:]
    apply_policy(lake, policy="mixed", out=tmp_path / "out",
                 evictions=pa.Table.from_pylist(mixed, schema=EVICTIONS))
    again, _ = ingest_paths(tmp_path / "again", tmp_path / "out" / "mixed" / "claude_code")
    got = rows(again, """
        SELECT r.call_id, r.compaction_state, r.est_tokens, m.compaction_state, m.text
        FROM tool_results r JOIN messages m ON m.source_id = r.source_id AND m.seq = r.seq
        JOIN sources s ON s.source_id = r.source_id
        WHERE s.rel_path = 'claude_session.jsonl' ORDER BY r.seq""")
    assert len(got) == len(mixed) == 4   # grep -c tool_result claude_session.jsonl
    for (call, state, est, message_state, text), ev in zip(got, mixed):
        assert call == ev["call_id"]
        assert text == ev["replacement"]
        expected_state = "cleared" if ev["action"] == "clear" else "pruned"
        assert (state, message_state) == (expected_state, expected_state)
        # ASCII replacements: ceil(len / 4) (docs/policies.md token estimate)
        assert est == math.ceil(len(ev["replacement"]) / 4)
    assert got[0][2] == 9                # "[Old tool result content cleared]" is 33 chars


def _claude_line(uuid: str, content, *, tool_use_result=None) -> dict:
    line = {"parentUuid": None, "isSidechain": False, "type": "user", "sessionId": "s-1",
            "uuid": uuid, "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/p",
            "message": {"role": "user", "content": content}}
    if tool_use_result is not None:
        line["toolUseResult"] = tool_use_result
    return line


def _claude_call(uuid: str, call_id: str) -> dict:
    return {"parentUuid": None, "isSidechain": False, "type": "assistant", "sessionId": "s-1",
            "uuid": uuid, "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/p",
            "message": {"role": "assistant", "content": [
                {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": "ls"}}]}}


def _session_lines() -> list[dict]:
    """Three results of the three payload shapes: string, {text} object, list of blocks."""
    return [
        _claude_call("a1", "t1"),
        _claude_line("u1", [{"type": "tool_result", "tool_use_id": "t1",
                             "content": "plain string output é"}],
                     tool_use_result={"stdout": "plain string output é", "stderr": ""}),
        _claude_call("a2", "t2"),
        _claude_line("u2", [{"type": "tool_result", "tool_use_id": "t2",
                             "content": {"type": "text", "text": "text object output"}}]),
        _claude_call("a3", "t3"),
        _claude_line("u3", [{"type": "tool_result", "tool_use_id": "t3", "content": [
            {"type": "text", "text": "block one"}, {"type": "text", "text": "block two"}]}]),
    ]


def _write_session(folder: Path, lines: list[dict], *, newline: bytes = b"\n",
                   final_newline: bool = True, ascii_only: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "s-1.jsonl"
    encoded = [json.dumps(obj, ensure_ascii=ascii_only, separators=(",", ":")).encode()
               for obj in lines]
    data = newline.join(encoded) + (newline if final_newline else b"")
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("action", ["clear", "prune"])
def test_string_text_object_and_block_list_payloads_round_trip(tmp_path, action):
    source = _write_session(tmp_path / "archive" / "proj", _session_lines())
    lake, _ = ingest_paths(tmp_path, tmp_path / "archive")
    assert rows(lake, "SELECT payload_shape FROM tool_results ORDER BY seq") == \
        [("string",), ("text_object",), ("blocks",)]
    table = hand_evictions(lake, policy="p", action=action)
    summary = apply_policy(lake, policy="p", evictions=table)
    assert summary.problems == [] and summary.files_pruned == 1
    output = lake.root / "out" / "p" / "proj" / "s-1.jsonl"
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    expected = [ev["replacement"] for ev in table.to_pylist()]
    assert [lines[i]["message"]["content"][0]["content"] for i in (1, 3, 5)] == expected
    assert lines[1]["toolUseResult"] == expected[0]
    if action == "prune":   # the locator names the text (blocks joined by a newline)
        joined = b"block one\nblock two"
        assert (lake.store_dir / f"{_sha(joined)}.payload").read_bytes() == joined
    assert restore(output, store=lake.store_dir).data == source.read_bytes()


def test_crlf_and_a_missing_final_newline_are_kept(tmp_path):
    source = _write_session(tmp_path / "archive" / "proj", _session_lines(), newline=b"\r\n",
                            final_newline=False)
    lake, summary = ingest_paths(tmp_path, tmp_path / "archive")
    # the last line has no newline: a file still being written, held back by ingest
    assert summary.held_back == 1
    table = hand_evictions(lake, policy="p", action="clear")
    assert table.num_rows == 2
    apply_policy(lake, policy="p", evictions=table)
    output = (lake.root / "out" / "p" / "proj" / "s-1.jsonl").read_bytes()
    original = source.read_bytes()
    assert output.count(b"\r\n") == original.count(b"\r\n") == 5
    assert output.count(b"\n") == 5 and not output.endswith(b"\n")
    assert output.split(b"\r\n")[-1] == original.split(b"\r\n")[-1]   # held-back line copied
    assert output.split(b"\r\n")[1].count(CLEARED.encode()) == 2      # content + toolUseResult
    assert restore(lake.root / "out" / "p" / "proj" / "s-1.jsonl",
                   store=lake.store_dir).data == original


def test_a_pure_ascii_source_gets_an_escaped_replacement(tmp_path):
    source = _write_session(tmp_path / "archive" / "proj", _session_lines(), ascii_only=True)
    assert source.read_bytes().isascii()
    lake, _ = ingest_paths(tmp_path, tmp_path / "archive")
    table = hand_evictions(lake, policy="p", action="clear").to_pylist()
    for ev in table:
        ev["replacement"] = "[cleared — voir le magasin]"
    apply_policy(lake, policy="p", evictions=pa.Table.from_pylist(table, schema=EVICTIONS))
    output = lake.root / "out" / "p" / "proj" / "s-1.jsonl"
    assert output.read_bytes().isascii()
    assert b"\\u2014" in output.read_bytes()
    assert json.loads(output.read_text().splitlines()[1])["message"]["content"][0]["content"] \
        == "[cleared — voir le magasin]"
    assert restore(output, store=lake.store_dir).data == source.read_bytes()


def two_session_lake(tmp_path) -> tuple[Lake, Path, pa.Table]:
    """A lake of two files (a/s-1.jsonl, b/s-1.jsonl), the second one's path, and evictions
    clearing every result of both."""
    archive = tmp_path / "archive"
    _write_session(archive / "a", _session_lines())
    other = _write_session(archive / "b", _session_lines())
    lake, _ = ingest_paths(tmp_path, archive)
    return lake, other, hand_evictions(lake, policy="p", action="clear")


def test_a_source_changed_since_ingest_is_left_unpruned_and_named(tmp_path):
    lake, other, table = two_session_lake(tmp_path)
    changed = other.read_bytes().replace(b"block one", b"block 111")
    other.write_bytes(changed)
    summary = apply_policy(lake, policy="p", evictions=table)
    assert [(p.path, p.kind, p.sessions) for p in summary.problems] == \
        [(str(other), "stale", ["s-1"])]
    assert "changed since it was ingested" in summary.problems[0].error
    # the JSON keeps the problem's keys (apply --json, run --json)
    [problem] = summary.to_dict()["problems"]
    output = str(lake.root / "out" / "p" / "b" / "s-1.jsonl")
    assert problem == {"path": str(other), "output": output, "sessions": ["s-1"], "kind": "stale",
                       "error": summary.problems[0].error}
    assert (lake.root / "out" / "p" / "b" / "s-1.jsonl").read_bytes() == changed
    assert CLEARED.encode() in (lake.root / "out" / "p" / "a" / "s-1.jsonl").read_bytes()
    assert (summary.files_pruned, summary.files_failed) == (1, 1)


def test_a_plan_whose_payload_hash_does_not_match_is_refused(tmp_path):
    _write_session(tmp_path / "archive" / "proj", _session_lines())
    lake, _ = ingest_paths(tmp_path, tmp_path / "archive")
    table = hand_evictions(lake, policy="p", action="clear").to_pylist()
    table[1]["payload_sha256"] = "0" * 64
    summary = apply_policy(lake, policy="p", evictions=pa.Table.from_pylist(table, schema=EVICTIONS))
    assert [p.kind for p in summary.problems] == ["plan"]
    assert "no longer matches the plan" in summary.problems[0].error
    output = lake.root / "out" / "p" / "proj" / "s-1.jsonl"
    assert output.read_bytes() == (tmp_path / "archive" / "proj" / "s-1.jsonl").read_bytes()


def test_the_session_option_writes_only_that_sessions_files(real_lake, tmp_path):
    lake, _ = _fresh_copy(real_lake, tmp_path)
    table = hand_evictions(lake, policy="clear", action="clear")
    session = "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9"   # sessionId in claude_session.jsonl
    summary = apply_policy(lake, policy="clear", out=tmp_path / "out", session_id=session,
                           evictions=table)
    written = sorted(str(p.relative_to(tmp_path / "out" / "clear"))
                     for p in (tmp_path / "out").rglob("*") if p.is_file())
    # the sub-agent file (claude_agent.jsonl) is its own session <id>/agent-<agentId>; the
    # marker keeps ingest from reading the output folder back
    assert written == [".ctxlake-output", "claude_code/claude_session.jsonl"]
    assert summary.files_pruned == 1 and summary.problems == []


def test_a_policy_without_a_plan_is_a_usage_error_and_odd_names_stay_inside_out(
        real_lake, tmp_path):
    lake, _ = _fresh_copy(real_lake, tmp_path)
    with pytest.raises(UsageError, match="no plan for policy 'microcompact'"):
        apply_policy(lake, policy="microcompact", out=tmp_path / "out")
    where = "s.rel_path = 'codex/codex_session.jsonl'"
    table = hand_evictions(lake, policy="../escape", action="clear", where=where)
    summary = apply_policy(lake, policy="../escape", out=tmp_path / "out", evictions=table)
    folder = Path(summary.out)
    assert folder.parent == tmp_path / "out" and folder.name.startswith("escape-")
    assert (folder / "codex" / "codex_session.jsonl").exists()


def test_the_cli_applies_a_stored_plan_then_restores_and_verifies(real_lake, tmp_path):
    lake, archive = _fresh_copy(real_lake, tmp_path)
    lake.write_derived("evictions", "prune", hand_evictions(lake, policy="prune", action="prune"))
    runner = CliRunner()
    result = runner.invoke(cli, ["--lake", str(lake.root), "apply", "--policy", "prune", "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["files"] == len(SAMPLES) and summary["problems"] == []
    pruned = lake.root / "out" / "prune" / "codex" / "codex_session.jsonl"
    result = runner.invoke(cli, ["--lake", str(lake.root), "restore", str(pruned), "--out",
                                 str(tmp_path / "restored.jsonl")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "restored.jsonl").read_bytes() == \
        (archive / "codex" / "codex_session.jsonl").read_bytes()
    result = runner.invoke(cli, ["--lake", str(lake.root), "restore", str(pruned)],
                           catch_exceptions=False)
    assert result.stdout_bytes == (archive / "codex" / "codex_session.jsonl").read_bytes()
    result = runner.invoke(cli, ["--lake", str(lake.root), "verify", "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0 and json.loads(result.output)["ok"] is True


def test_the_json_string_encoding_matches_javascript_json_stringify():
    # JSON.stringify("a\"b\\c\n\t\u0001é😀\u2028") in node:
    assert encode_json_string('a"b\\c\n\t\x01é😀\u2028', ascii_only=False) == \
        '"a\\"b\\\\c\\n\\t\\u0001é😀\u2028"'.encode()
    assert encode_json_string("é😀", ascii_only=True) == b'"\\u00e9\\ud83d\\ude00"'


def test_the_leading_members_of_a_cut_object_are_those_that_end_before_the_cut():
    line = json.dumps({"sessionId": "s\\1", "n": -2.5e3, "ok": True, "none": None,
                       "a\"b": [1, {"x": "}"}], "message": {"content": "x" * 50}}).encode()
    whole = leading_members(line)
    assert list(whole) == ["sessionId", "n", "ok", "none", 'a"b', "message"]
    assert leading_members(line[:line.index(b'"message"') + 30]) == \
        {"sessionId": "s\\1", "n": -2500.0, "ok": True, "none": None, 'a"b': [1, {"x": "}"}]}
    assert leading_members(line[:line.index(b'"ok"') + 6]) == {"sessionId": "s\\1", "n": -2500.0}
    for not_an_object in (b"", b"[1, 2]", b'"text"', b"{", b'{"k" 1}', b"{'k': 1}"):
        assert leading_members(not_an_object) == {}
    assert leading_members(b' { "k" : 1 , "bad": tru') == {"k": 1}


def test_json_spans_agree_with_a_parser_on_random_documents():
    import random

    rng = random.Random(7)

    def value(depth=0):
        roll = rng.random()
        if depth > 3 or roll < 0.35:
            return rng.choice(['x"y\\z\n', "é 中 😀", 12, -3.5e-2, True, None, "", "}{]["])
        if roll < 0.7:
            return {rng.choice(["k", "a\"", "é", "0"]) + str(i): value(depth + 1)
                    for i in range(rng.randint(0, 3))}
        return [value(depth + 1) for _ in range(rng.randint(0, 3))]

    def paths(node, here=()):
        yield here
        items = node.items() if isinstance(node, dict) else \
            enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            yield from paths(child, here + (key,))

    checked = 0
    for _ in range(300):
        doc = value()
        for text in (json.dumps(doc).encode(), json.dumps(doc, indent=2, ensure_ascii=False).encode()):
            wanted = list(paths(doc))
            for path, (start, end) in find_spans(text, wanted).items():
                node = doc
                for step in path:
                    node = node[step]
                assert json.loads(text[start:end]) == node
                checked += 1
    assert checked > 2000


# Every policy as the real planner plans it, plus variants with forced parameters so that each
# kind of eviction (prune, clear, clear_input, mask) really happens on these small samples.
PLANNED = ["none", "microcompact", "payload_prune", "tail_protect", "context_editing",
           "observation_masking", "strategic", "payload_prune+microcompact",
           "payload_prune(max_bytes=2000)", "microcompact(idle_minutes=0, keep_recent=1)",
           "context_editing(trigger=1000, keep=1, clear_tool_inputs=true)",
           "observation_masking(window=1)",
           "payload_prune(max_bytes=2000)+microcompact(idle_minutes=0, keep_recent=1)"]
FORCED = PLANNED[8:]


def _plan_apply_restore(lake: Lake, archive: Path, out: Path, rels: list[str]) -> dict[str, int]:
    from pipeline.stages.plan import plan_many

    planned = {s.policy: s.evictions for s in plan_many(lake, policies=PLANNED, workers=1)}
    for spec in PLANNED:
        summary = apply_policy(lake, policy=spec, out=out)
        assert summary.problems == [], spec
        assert summary.evictions == planned[spec]
        folder = Path(summary.out)
        for rel in rels:
            original = (archive / rel).read_bytes()
            assert _sha(restore(folder / rel, store=lake.store_dir).data) == _sha(original), \
                (spec, rel)
    assert verify(lake, out=out).problems == []
    return planned


def test_every_policy_from_the_real_planner_restores_every_real_sample(real_lake, tmp_path):
    lake, archive = _fresh_copy(real_lake, tmp_path)
    planned = _plan_apply_restore(lake, archive, tmp_path / "out", SAMPLES)
    assert all(planned[spec] > 0 for spec in FORCED), planned


def test_every_policy_from_the_real_planner_restores_the_demo_archive(tmp_path):
    from pipeline.demo.archive import write_demo_archive

    archive = tmp_path / "archive"
    write_demo_archive(archive, size_bytes=1_500_000, seed=7)
    lake, summary = ingest_paths(tmp_path, archive)
    rels = sorted(str(p.relative_to(archive)) for p in archive.rglob("*")
                  if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
    assert summary.files == len(rels)
    planned = _plan_apply_restore(lake, archive, tmp_path / "out", rels)
    assert planned["payload_prune"] > 0 and planned["observation_masking"] > 0


def test_an_output_path_too_long_for_the_filesystem_costs_that_file_and_the_byte_figures_cover_the_rest(tmp_path):
    """A source deep enough that its mirror under <lake>/out/<policy>/ passes PATH_MAX: that
    file is a problem, the other is written, and bytes before/after are of the written one."""
    from pipeline.stages.nightly import run_nightly

    archive = tmp_path / "a"
    folder = archive
    while len(str(folder)) < 3800:
        folder = folder / ("x" * 200)
    folder.mkdir(parents=True)
    deep = folder / ("y" * (4080 - len(str(folder)) - 8) + ".jsonl")
    shutil.copy(REAL / "claude_code" / "claude_session.jsonl", deep)
    shutil.copy(REAL / "codex" / "codex_session.jsonl", archive)
    night = run_nightly([archive], lake=Lake(tmp_path / "lake"), workers=1, tz="UTC")
    applied, = night.applied.values()
    assert [(p.path, p.kind) for p in applied.problems] == [(str(deep), "write")]
    assert "cannot write the output" in applied.problems[0].error
    size = (REAL / "codex" / "codex_session.jsonl").stat().st_size
    assert (applied.files_copied, applied.bytes_before, applied.bytes_after) == (1, size, size)
    assert night.exit_code == 1


def test_sources_are_resolved_folder_by_folder_as_realpath_resolves_them(tmp_path):
    from pipeline.stages.apply import _real_paths

    (tmp_path / "real").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "real" / "a.jsonl").write_text("{}\n")
    (tmp_path / "other" / "target.jsonl").write_text("{}\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "to_other.jsonl").symlink_to(tmp_path / "other" / "target.jsonl")
    paths = [str(tmp_path / "link" / name) for name in ("a.jsonl", "to_other.jsonl", "missing.jsonl")]
    paths += [str(tmp_path / "link" / ".." / "other" / "target.jsonl"), str(tmp_path / "real" / "a.jsonl")]
    base = Path(os.path.realpath(tmp_path))
    assert _real_paths(paths) == {os.path.realpath(p) for p in paths} == {
        str(base / "real" / "a.jsonl"), str(base / "other" / "target.jsonl"),
        str(base / "real" / "missing.jsonl")}


def test_a_large_apply_on_a_forked_pool_writes_the_same_outputs_store_and_counts(tmp_path, monkeypatch):
    from pipeline.demo.archive import write_demo_archive
    from pipeline.stages import apply, engine as engines
    from tests.helpers.lake import file_hashes

    write_demo_archive(tmp_path / "demo", size_bytes=2_000_000, seed=5)
    monkeypatch.setattr(apply, "ENGINE_TASK_BYTES", 128 * 1024)     # several jobs a worker
    pools = []
    real_pool = engines.ForkedPool

    def counted_pool(workers):
        pools.append(workers)
        return real_pool(workers)

    monkeypatch.setattr(engines, "ForkedPool", counted_pool)
    summaries = {}
    for name, threshold in (("serial", 10**12), ("forked", 0)):
        monkeypatch.setattr(apply, "PARALLEL_MIN_BYTES", threshold)
        lake, _ = ingest_paths(tmp_path / name, tmp_path / "demo")
        CliRunner().invoke(cli, ["--lake", str(lake.root), "plan", "--policy", "payload_prune"],
                           catch_exceptions=False)
        summary = apply_policy(lake, policy="payload_prune").to_dict()
        summaries[name] = {k: v for k, v in summary.items() if k not in ("out", "seconds")}
    assert pools == [2] if (os.cpu_count() or 1) > 1 else pools == []
    assert summaries["forked"] == summaries["serial"]
    assert summaries["serial"]["payloads_stored"] > 0 and summaries["serial"]["files_pruned"] > 0
    hashes = {name: {k: v for k, v in file_hashes(tmp_path / name / "lake").items()
                     if k.startswith(("out/", "store/"))} for name in summaries}
    assert hashes["forked"] == hashes["serial"] and any(k.startswith("store/") for k in hashes["serial"])
