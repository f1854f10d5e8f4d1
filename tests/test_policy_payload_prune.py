"""payload_prune (docs/policies.md): strictly over 16384 UTF-8 bytes, 2048 + 512 char preview,
marker, compaction://<sha256> locator, shapes, idempotency, memory reads kept."""

from __future__ import annotations

import hashlib
import json

import pytest

from pipeline.core.config import Config
from pipeline.stages.plan import plan_session_input
from tests.helpers.sessions import SessionBuilder
from pipeline.policies.payload_prune import replacement_text
from pipeline.text.tokens import estimate_tokens


def one_result_session(payload: str, *, shape: str = "string", tool: str = "Bash",
                       input_obj: dict | None = None):
    b = SessionBuilder(project="/work/p")
    b.prompt("run it", at=0)
    cid = b.call(tool, input_obj or {"command": "generate"}, at=1)
    seq = b.result(cid, payload, shape=shape)
    b.assistant("done", at=2)
    return b.build(), cid, seq


def prune(session, spec: str = "payload_prune"):
    return plan_session_input(session, Config().resolve(spec))


@pytest.mark.parametrize("char, size", [("é", 2), ("€", 3), ("😀", 4)])
def test_exactly_16384_bytes_is_kept_and_16385_is_pruned(char, size):
    at_limit = char * (16384 // size) + "a" * (16384 % size)
    assert len(at_limit.encode("utf-8")) == 16384
    session, _, _ = one_result_session(at_limit)
    assert prune(session).evictions == []
    over = at_limit + "a"
    assert len(over.encode("utf-8")) == 16385
    session, cid, seq = one_result_session(over)
    result = prune(session)
    assert [e["call_id"] for e in result.evictions] == [cid]
    assert result.evictions[0]["bytes_before"] == 16385


def test_the_replacement_is_head_elision_tail_marker_and_locator():
    payload = "".join(f"line {i:05d} ✓\n" for i in range(3000))   # 14 chars, 16 bytes a line
    data = payload.encode("utf-8")
    sha = hashlib.sha256(data).hexdigest()
    session, cid, seq = one_result_session(payload)
    [ev] = prune(session).evictions
    head, tail = payload[:2048], payload[-512:]
    expected = (f"{head}\n[... {len(payload) - 2048 - 512} characters elided ...]\n{tail}\n"
                f"[ctxlake compaction] full payload: {len(data)} bytes, sha256 {sha}; "
                f"retrieve it from the payload store: compaction://{sha}")
    assert ev["replacement"] == expected
    assert replacement_text(payload, sha) == expected
    assert (ev["action"], ev["locator"], ev["payload_sha256"]) == \
        ("prune", f"compaction://{sha}", sha)
    assert (ev["seq"], ev["at_seq"]) == (seq, seq)       # pruned as it arrives
    assert ev["tokens_before"] == estimate_tokens(payload)
    assert ev["tokens_after"] == estimate_tokens(expected)
    assert (ev["bytes_before"], ev["bytes_after"]) == (len(data), len(expected.encode("utf-8")))
    assert ev["paths"] == [] and ev["tool_name"] == "Bash" and ev["call_id"] == cid


def test_preview_lengths_count_characters_not_bytes():
    payload = "😀" * 9000        # 36000 bytes, 9000 characters
    session, _, _ = one_result_session(payload)
    [ev] = prune(session).evictions
    assert ev["replacement"].startswith("😀" * 2048 + "\n[... 6440 characters elided ...]\n"
                                        + "😀" * 512 + "\n[ctxlake compaction]")


@pytest.mark.parametrize("shape, pruned", [("string", True), ("text_object", True),
                                           ("blocks", True), ("json", False)])
def test_string_text_object_and_block_list_payloads_are_pruned(shape, pruned):
    session, cid, _ = one_result_session("x" * 20000, shape=shape)
    result = prune(session)
    assert [e["call_id"] for e in result.evictions] == ([cid] if pruned else [])
    if not pruned:
        assert result.plans == []


def test_plan_metadata_counts_pruned_and_skipped_payloads():
    b = SessionBuilder(project="/work/p")
    b.prompt("run all", at=0)
    big1 = b.call("Bash", {"command": "a"}, at=1)
    b.result(big1, "a" * 20000)
    small = b.call("Bash", {"command": "b"})
    b.result(small, "b" * 100)
    again = b.call("Bash", {"command": "c"})
    b.result(again, "c" * 3000 + "\n[ctxlake compaction] full payload: ..." + "c" * 20000)
    odd = b.call("Bash", {"command": "d"})
    b.result(odd, "d" * 20000, shape="json")
    big2 = b.call("Bash", {"command": "e"})
    b.result(big2, "e" * 30000)
    b.assistant("done", at=2)
    result = prune(b.build())
    [plan] = result.plans
    meta = json.loads(plan["metadata_json"])
    shas = [hashlib.sha256((ch * n).encode()).hexdigest() for ch, n in (("a", 20000), ("e", 30000))]
    assert meta["prunedCount"] == 2
    assert meta["skippedCount"] == 2          # already pruned (marker) + unsupported shape
    assert meta["locators"] == [f"compaction://{h}" for h in shas]
    assert meta["bytesSaved"] == sum(e["bytes_before"] - e["bytes_after"] for e in result.evictions)
    assert [e["call_id"] for e in result.evictions] == [big1, big2]
    assert plan["trigger"] == "oversized" and plan["at_seq"] == result.evictions[-1]["seq"]
    assert plan["tokens_saved"] == sum(e["tokens_before"] - e["tokens_after"]
                                       for e in result.evictions)


def test_an_oversized_read_of_a_memory_file_is_not_pruned(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "CLAUDE.md").write_text("memory\n")
    b = SessionBuilder(project=str(project))
    b.prompt("read the memory file", at=0)
    cid = b.call("Read", {"file_path": "CLAUDE.md"}, at=1)
    b.result(cid, "m" * 20000)
    b.assistant("ok", at=2)
    result = prune(b.build())
    assert result.evictions == [] and result.preserved == 1


def test_max_bytes_and_preview_sizes_are_parameters():
    session, cid, _ = one_result_session("p" * 1000)
    [ev] = prune(session, "payload_prune(max_bytes=500, head_chars=10, tail_chars=5)").evictions
    assert ev["replacement"].startswith("p" * 10 + "\n[... 985 characters elided ...]\n" + "p" * 5 + "\n")
    # a replacement that would not be smaller is skipped
    session, _, _ = one_result_session("q" * 300)
    assert prune(session, "payload_prune(max_bytes=100)").evictions == []
