"""context_editing (Anthropic clear_tool_uses_20250919): trigger, keep, clear_at_least,
exclude_tools, clear_tool_inputs, applied_edits."""

from __future__ import annotations

import json

from pipeline.core.config import Config
from pipeline.stages.plan import plan_session_input
from pipeline.policies.base import CONTEXT_EDIT_TEXT
from tests.helpers.sessions import SessionBuilder
from pipeline.text.tokens import estimate_tokens

PLACEHOLDER_TOKENS = estimate_tokens(CONTEXT_EDIT_TEXT)


def loop(tools: list[str], size: int = 400):
    """A prompt, one tool call + result per turn, then a final answer turn."""
    b = SessionBuilder()
    b.prompt("do the work", at=0)
    ids, starts = [], []
    for i, tool in enumerate(tools):
        ids.append(b.call(tool, {"file_path": f"f{i}.py", "pattern": "x"}, at=i))
        starts.append(b.messages[-1]["seq"])
        b.result(ids[-1], chr(ord("a") + i) * size)
    b.assistant("finished", at=len(tools))
    starts.append(b.messages[-1]["seq"])
    return b, ids, starts


def run(session, spec: str):
    return plan_session_input(session, Config().resolve(spec))


def test_tool_use_trigger_clears_all_but_the_most_recent_tool_uses():
    b, ids, starts = loop(["Read"] * 5)
    result = run(b.build(), 'context_editing(trigger_type="tool_uses", trigger=3, keep=2)')
    # turn 5 (index 4) is the first whose context holds 4 > 3 tool uses: clear 2, keep 2;
    # the last turn holds 3 uncleared uses: not over the trigger
    [plan] = result.plans
    assert plan["at_seq"] == starts[4]
    assert [e["call_id"] for e in result.evictions] == ids[:2]
    meta = json.loads(plan["metadata_json"])
    freed = 2 * (estimate_tokens("a" * 400) - PLACEHOLDER_TOKENS)
    assert meta["applied_edits"] == [{"type": "clear_tool_uses_20250919",
                                      "cleared_tool_uses": 2, "cleared_input_tokens": freed}]
    assert plan["tokens_saved"] == freed
    for e in result.evictions:
        assert e["replacement"] == CONTEXT_EDIT_TEXT and e["action"] == "clear"


def test_input_token_trigger_is_strictly_greater_than():
    b, ids, starts = loop(["Read"] * 4)
    context = sum(r["est_tokens"] for r in b.messages if r["seq"] < starts[4])  # last turn
    at_limit = run(b.build(), f"context_editing(trigger={context}, keep=1)")
    assert all(p["at_seq"] < starts[4] for p in at_limit.plans) and at_limit.evictions == []
    over = run(b.build(), f"context_editing(trigger={context - 1}, keep=1)")
    assert [p["at_seq"] for p in over.plans] == [starts[4]]
    assert [e["call_id"] for e in over.evictions] == ids[:3]


def test_nothing_is_cleared_when_clear_at_least_is_not_met():
    # 4 uses: only the last turn holds 4 > 3, and clearing 1 (keep 3) frees one result
    b, ids, starts = loop(["Read"] * 4)
    one = estimate_tokens("a" * 400) - PLACEHOLDER_TOKENS             # 91 tokens per result
    spec = 'context_editing(trigger_type="tool_uses", trigger=3, keep=3, clear_at_least={})'
    blocked = run(b.build(), spec.format(one + 1))
    assert blocked.evictions == []
    [plan] = blocked.plans
    meta = json.loads(plan["metadata_json"])
    assert (plan["evicted"], plan["tokens_saved"]) == (0, 0)
    assert (meta["skippedReason"], meta["wouldClear"]) == ("clear_at_least", one)
    allowed = run(b.build(), spec.format(one))
    assert [e["call_id"] for e in allowed.evictions] == ids[:1]


def test_excluded_tools_are_never_cleared_and_do_not_count_for_keep():
    b, ids, starts = loop(["Read", "Grep", "Read", "Read", "Read"])
    result = run(b.build(), 'context_editing(trigger_type="tool_uses", trigger=3, keep=2, '
                            'exclude_tools=["Grep"])')
    # turn 5: 4 uses in context (the Grep counts for the trigger); candidates Read0, Read2,
    # Read3 -> keep 2 -> clear Read0. Last turn: Grep, Read2, Read3, Read4 -> clear Read2
    assert [e["call_id"] for e in result.evictions] == [ids[0], ids[2]]
    assert [p["at_seq"] for p in result.plans] == [starts[4], starts[5]]
    for plan in result.plans:
        meta = json.loads(plan["metadata_json"])
        assert meta["excludedToolIds"] == [ids[1]]
        assert plan["kept"] == 2
    everything = run(b.build(), 'context_editing(trigger_type="tool_uses", trigger=0, keep=0)')
    assert ids[1] in {e["call_id"] for e in everything.evictions}


def test_clear_tool_inputs_also_clears_the_calls_input():
    b, ids, starts = loop(["Read"] * 5)
    result = run(b.build(), 'context_editing(trigger_type="tool_uses", trigger=3, keep=2, '
                            'clear_tool_inputs=true)')
    inputs = [e for e in result.evictions if e["action"] == "clear_input"]
    assert [e["call_id"] for e in inputs] == ids[:2]
    call_rows = {r["call_id"]: r for r in b.messages if r["kind"] == "tool_use"}
    for e in inputs:
        row = call_rows[e["call_id"]]
        assert (e["seq"], e["line_no"], e["replacement"]) == (row["seq"], row["line_no"], "{}")
        assert e["tokens_before"] == estimate_tokens(row["text"]) and e["tokens_after"] == 1
    meta = json.loads(result.plans[0]["metadata_json"])
    freed = sum(e["tokens_before"] - e["tokens_after"] for e in result.evictions)
    assert meta["applied_edits"][0]["cleared_input_tokens"] == freed
    assert meta["applied_edits"][0]["cleared_tool_uses"] == 2


def test_memory_reads_are_preserved_by_context_editing(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "CLAUDE.md").write_text("m\n")
    b = SessionBuilder(project=str(project))
    b.prompt("start", at=0)
    memory = b.call("Read", {"file_path": "CLAUDE.md"}, at=0)
    b.result(memory, "memory " * 100)
    others = []
    for i in range(3):
        others.append(b.call("Read", {"file_path": f"{i}.py"}, at=1))
        b.result(others[-1], "code " * 100)
    b.assistant("done", at=2)
    result = run(b.build(), 'context_editing(trigger_type="tool_uses", trigger=0, keep=1)')
    assert memory not in {e["call_id"] for e in result.evictions}
    assert result.preserved == 1
