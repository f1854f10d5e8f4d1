"""restore from the pruned file and the store alone; verify finds every kind of damage."""

from __future__ import annotations

import base64
import struct
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers.lake import REAL, copy_real, ingest_paths
from pipeline.stages.apply import apply_policy
from pipeline.cli import cli
from pipeline.core.errors import StoreError
from pipeline.core.lake import Lake
from pipeline.stages.restore import restore, verify
from test_apply import hand_evictions

CODEX = "codex/codex_session.jsonl"
GEMINI = "gemini/gemini_session.json"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def pruned_once(tmp_path_factory):
    base = tmp_path_factory.mktemp("restore")
    archive = copy_real(base, CODEX, GEMINI)
    lake, _ = ingest_paths(base, archive)
    summary = apply_policy(lake, policy="prune",
                           evictions=hand_evictions(lake, policy="prune", action="prune"))
    assert summary.problems == [] and summary.files_pruned == 2
    return lake, archive


@pytest.fixture
def pruned(pruned_once, tmp_path):
    """A private lake with the Codex and Gemini samples pruned (every result) under
    ``out/prune``: (lake, archive, outputs folder)."""
    lake, archive = pruned_once
    shutil.copytree(lake.root, tmp_path / "lake")
    copy = Lake(tmp_path / "lake")
    return copy, archive, copy.root / "out" / "prune"


def test_restore_needs_only_the_pruned_file_and_the_store(pruned, tmp_path):
    lake, archive, out = pruned
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copytree(lake.store_dir, elsewhere / "store")
    shutil.copy(out / GEMINI, elsewhere / "pruned.json")
    shutil.rmtree(lake.root)          # no lake, no archive index: just the two
    result = restore(elsewhere / "pruned.json", store=elsewhere / "store",
                     out=elsewhere / "original.json")
    original = (archive / GEMINI).read_bytes()
    assert (elsewhere / "original.json").read_bytes() == original
    assert result.original_sha256 == _sha(original) == \
        "bb89c81f01bdb1f4d831a9fe09e563217818f9b4893b9fe3b2db7886b67368f0"  # SOURCES.md


def test_restore_in_place_turns_the_pruned_file_back_into_the_original(pruned):
    lake, archive, out = pruned
    restore(out / CODEX, store=lake.store_dir, out=out / CODEX)
    assert _sha((out / CODEX).read_bytes()) == \
        "9aa7428277f05b51fc20862bf7c8bf926903b3380f24603ee6d9b425eb22b56b"  # SOURCES.md


def test_restoring_a_file_apply_did_not_write_says_so(pruned, tmp_path):
    lake, _, out = pruned
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes((out / CODEX).read_bytes() + b"\n")
    with pytest.raises(StoreError, match="no restore manifest") as caught:
        restore(edited, store=lake.store_dir)
    assert "changed after" in caught.value.hint


def test_verify_is_clean_after_apply(pruned):
    lake, _, _ = pruned
    report = verify(lake)
    assert report.ok and report.problems == []
    assert (report.outputs, report.outputs_restorable) == (2, 2)
    # one locator per replaced value, read with json from the samples: 5 Codex
    # *_call_output lines + 5 Gemini toolCalls results + their 3 non-empty resultDisplay copies
    assert report.locators == 13
    assert report.manifests == 2


def test_verify_reports_a_store_file_whose_bytes_were_changed(pruned):
    lake, _, out = pruned
    text = (out / CODEX).read_text()
    sha = text.split("compaction://")[1][:64]
    damaged = lake.store_dir / f"{sha}.payload"
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"!")
    report = verify(lake)
    kinds = {(p.kind, p.path) for p in report.problems}
    assert ("hash", str(damaged)) in kinds
    assert ("locator", str(out / CODEX)) in kinds
    assert ("restore", str(out / CODEX)) in kinds
    assert not report.ok
    with pytest.raises(StoreError, match="does not match its hash"):
        restore(out / CODEX, store=lake.store_dir)


def test_verify_reports_an_output_edited_after_apply_and_a_missing_payload(pruned):
    lake, _, out = pruned
    (out / GEMINI).write_bytes((out / GEMINI).read_bytes().replace(b"Command", b"Kommand", 1))
    sha = (out / CODEX).read_text().split("compaction://")[1][:64]
    (lake.store_dir / f"{sha}.payload").unlink()
    report = verify(lake)
    found = {(p.kind, p.path.rsplit("/", 1)[-1]) for p in report.problems}
    assert ("output", "gemini_session.json") in found
    assert ("locator", "codex_session.jsonl") in found
    assert ("restore", "codex_session.jsonl") in found
    assert any(p.kind == "manifest" and sha in p.detail for p in report.problems)


def test_the_verify_command_exits_1_and_lists_problems(pruned):
    lake, _, out = pruned
    sha = (out / CODEX).read_text().split("compaction://")[1][:64]
    (lake.store_dir / f"{sha}.payload").write_bytes(b"changed")
    runner = CliRunner()
    result = runner.invoke(cli, ["--lake", str(lake.root), "verify", "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["ok"] is False
    assert {"kind": "hash", "path": str(lake.store_dir / f"{sha}.payload"),
            "detail": "store file does not match its hash (changed after it was written)"} \
        in report["problems"]
    result = runner.invoke(cli, ["--lake", str(lake.root), "verify"], catch_exceptions=False)
    assert result.exit_code == 1 and "hash" in result.output


def _with_screenshot(source: Path, target: Path) -> tuple[list, bytes]:
    """The real Claude Code sample with its first tool result turned into a screenshot, as
    Claude Code records a Read of a PNG (an image block, and the base64 again in
    ``toolUseResult``), written compactly as Claude Code writes: (the new content, the file)."""
    pixels = bytes(range(256)) * 1200        # 300 kB of "PNG": a 1280x800 header, then the data
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sIIBBBBB", 13, b"IHDR", 1280, 800, 8, 6, 0, 0, 0)
    data = base64.b64encode(header + b"\0\0\0\0" + pixels).decode()
    lines = source.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        obj = json.loads(line)
        blocks = obj.get("message", {}).get("content")
        if obj.get("type") == "user" and isinstance(blocks, list) and "toolUseResult" in obj:
            content = [{"type": "text", "text": "the screenshot:"},
                       {"type": "image", "source": {"type": "base64", "data": data,
                                                    "media_type": "image/png"}}]
            blocks[0]["content"] = content
            obj["toolUseResult"] = {"type": "image", "file": {"base64": data, "type": "image/png"}}
            lines[i] = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
            break
    written = ("\n".join(lines) + "\n").encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(written)
    return content, written


def test_a_screenshot_result_is_pruned_by_its_json_and_restored_byte_for_byte(tmp_path):
    """An image result's text is ``[image]``; its 400 kB of base64 (twice on the line) are
    what payload_prune measures, stores and gives back."""
    archive = tmp_path / "archive"
    target = archive / "proj" / "claude_session.jsonl"
    content, original = _with_screenshot(REAL / "claude_code/claude_session.jsonl", target)
    lake_dir = tmp_path / "lake"
    runner = CliRunner()
    result = runner.invoke(cli, ["--lake", str(lake_dir), "-q", "run", str(archive), "--tz", "UTC"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lake = Lake(lake_dir)
    compact = json.dumps(content, separators=(",", ":")).encode()
    with lake.connect() as con:
        [(form, nbytes, sha, text)] = con.execute(
            "SELECT r.payload_form, r.payload_bytes, r.payload_sha256, m.text FROM tool_results r "
            "JOIN messages m USING (session_id, seq) WHERE r.payload_form = 'json'").fetchall()
    assert (form, nbytes, sha, text) == ("json", len(compact), _sha(compact),
                                         "the screenshot:\n[image]")
    with lake.connect() as con:
        # the image counts as Anthropic counts one: 1280 x 800 px / 750 = 1365 tokens
        assert con.execute(
            "SELECT r.est_tokens, m.est_tokens, m.media_tokens, est_tokens(m.text) FROM tool_results r "
            "JOIN messages m USING (session_id, seq) WHERE r.payload_form = 'json'").fetchall() \
            == [(1365 + 6, 1365 + 6, 1365, 6)]
        [(before, after)] = con.execute(
            "SELECT e.tokens_before, e.tokens_after FROM evictions e JOIN tool_results r "
            "ON r.session_id = e.session_id AND r.seq = e.seq WHERE r.payload_form = 'json'").fetchall()
    assert before == 1371 and after < before          # pruning the screenshot frees its tokens
    [pruned] = (lake_dir / "out").glob("*/proj/claude_session.jsonl")
    output = pruned.read_bytes()
    assert content[1]["source"]["data"][:64].encode() not in output   # neither copy is left
    assert f"full payload: {len(compact)} bytes of JSON (content blocks with media), " \
           f"sha256 {sha}".encode() in output
    assert (lake_dir / "store" / f"{sha}.payload").read_bytes() == compact
    assert len(original) - len(output) > 2 * len(content[1]["source"]["data"]) - 4096
    back = runner.invoke(cli, ["--lake", str(lake_dir), "restore", str(pruned), "--out",
                               str(tmp_path / "back.jsonl")], catch_exceptions=False)
    assert back.exit_code == 0, back.output
    assert (tmp_path / "back.jsonl").read_bytes() == original


@pytest.mark.parametrize("copy_first", [True, False], ids=["copy-first", "original-first"])
def test_a_pruned_output_put_back_into_the_archive_is_copied_without_a_problem_in_either_order(
        pruned, tmp_path, copy_first):
    # The copy leaves the same bytes as the original's pruned output: its manifest (no edits,
    # "I am my own original") and the original's (edits) share one name. The one that removes
    # something wins whichever came first, so the original still restores and nothing fails.
    _, archive, out = pruned
    pruned_codex = (out / CODEX).read_bytes()
    scratch = tmp_path / "scratch"
    original = scratch / "archive" / CODEX
    copy = scratch / "archive" / "backup" / "codex_session.pruned.jsonl"
    original.parent.mkdir(parents=True)
    copy.parent.mkdir(parents=True)
    lake = Lake(scratch / "lake")
    problems = []
    for step in ((copy, original) if copy_first else (original, copy)):
        if step is copy:
            copy.write_bytes(pruned_codex)
        else:
            shutil.copy2(archive / CODEX, original)
        ingest_paths(scratch, scratch / "archive")
        summary = apply_policy(lake, policy="prune", evictions=hand_evictions(
            lake, policy="prune", action="prune", where=f"s.path = '{original}'"))
        problems += summary.problems
    assert problems == []
    written = lake.root / "out" / "prune"
    assert (written / CODEX).read_bytes() == pruned_codex
    assert (written / "backup" / "codex_session.pruned.jsonl").read_bytes() == pruned_codex
    # both outputs restore, to the fuller original (the bytes cannot tell which file they came from)
    for name in (CODEX, "backup/codex_session.pruned.jsonl"):
        restore(written / name, store=lake.store_dir, out=tmp_path / "restored")
        assert (tmp_path / "restored").read_bytes() == (archive / CODEX).read_bytes()
    report = verify(lake)
    assert report.ok and report.problems == [] and report.manifests == 1


def test_two_manifests_that_both_remove_something_for_the_same_bytes_stay_a_conflict(tmp_path):
    from pipeline.core.store import PayloadStore

    manifest = dict(ctxlake_restore=1, original_sha256="a" * 64, original_size=10,
                    pruned_sha256="p" * 64, pruned_size=5, edits=[[0, 3, "c" * 64, "raw"]])
    with PayloadStore.for_lake(tmp_path) as store:
        assert store.put_manifest("p" * 64, json.dumps(manifest).encode())
        other = dict(manifest, original_sha256="b" * 64)
        with pytest.raises(StoreError, match="different bytes"):
            store.put_manifest("p" * 64, json.dumps(other).encode())
        # the identity manifest of a copy of these bytes is not written over the one with edits
        same = dict(manifest, original_sha256="p" * 64, original_size=5, edits=[])
        assert store.put_manifest("p" * 64, json.dumps(same).encode()) is False
    assert json.loads((tmp_path / "store" / "manifests" / f"{'p' * 64}.json").read_bytes()) == manifest
