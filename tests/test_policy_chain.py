"""Chains, the baseline, and idempotency: re-planning a compacted transcript changes nothing;
only tool output is ever touched; a cleared item keeps its ids."""

from __future__ import annotations

import json

import pytest

from pipeline.core.config import Config
from pipeline.stages.plan import plan_session_input, session_plan_tables
from pipeline.stages.plan import EVICTIONS_SCHEMA, PLANS_SCHEMA
from pipeline.policies.base import CLEARED_TEXT, PRUNE_MARKER
from tests.helpers.sessions import SessionBuilder, apply_evictions


def busy_session():
    """Prompts, big and small results of several tools, idle gaps, a todo list finished."""
    b = SessionBuilder()
    b.prompt("build the importer and its tests", at=0)
    for i in range(12):
        b.assistant(f"working on step {i}", at=i)
        cid = b.call("Bash" if i % 3 else "Read",
                     {"command": f"run {i}"} if i % 3 else {"file_path": f"src/m{i}.py"})
        b.result(cid, ("payload %d " % i) * (2500 if i % 4 == 0 else 60), error=(i == 7))
    fix = b.call("Edit", {"file_path": "src/m7.py", "old_string": "a", "new_string": "b"})
    b.result(fix, "edited")                 # the error at step 7 is fixed ...
    b.result(b.call("Bash", {"command": "run 7"}), "ok")    # ... and the run passes
    todo = b.call("TodoWrite", {"todos": [{"content": "x", "status": "completed"}]})
    b.result(todo, "Todos have been modified successfully")
    b.assistant("The importer and its tests are done.", at=13)
    b.prompt("now add a progress bar to the importer", at=120)
    for i in range(4):
        cid = b.call("Edit", {"file_path": f"src/p{i}.py", "old_string": "a", "new_string": "b"},
                     at=121 + i, new_turn=True)
        b.result(cid, "edited " * 30)
    b.assistant("Progress bar added.", at=130)
    return b


POLICIES = ["microcompact(keep_recent=2)", "payload_prune", "payload_prune+microcompact(keep_recent=2)",
            'context_editing(trigger=1500, keep=2, clear_tool_inputs=true)',
            "observation_masking(window=3)", "strategic(threshold=3, keep_recent=1)",
            "tail_protect(tail_pairs=1)+context_editing(trigger=1500, keep=1)"]


@pytest.mark.parametrize("spec", POLICIES)
def test_replanning_an_already_compacted_transcript_changes_nothing(spec):
    session = busy_session().build()
    first = plan_session_input(session, Config().resolve(spec))
    assert first.evictions, "the policy must do something on this session for the test to mean it"
    compacted = apply_evictions(session, first.evictions)
    again = plan_session_input(compacted, Config().resolve(spec))
    assert again.evictions == []


@pytest.mark.parametrize("spec", POLICIES)
def test_only_tool_output_is_touched_and_ids_are_kept(spec):
    b = busy_session()
    result = plan_session_input(b.build(), Config().resolve(spec))
    rows = {r["seq"]: r for r in b.messages}
    for e in result.evictions:
        row = rows[e["seq"]]
        expected_kind = "tool_use" if e["action"] == "clear_input" else "tool_result"
        assert row["kind"] == expected_kind
        assert e["call_id"] == row["call_id"] and e["call_id"] is not None
        assert e["tool_name"] is not None
        assert e["at_seq"] >= e["seq"]
    assert len({(e["seq"], e["action"]) for e in result.evictions}) == len(result.evictions)


def test_in_a_chain_a_pruned_payload_is_not_cleared_or_counted_again():
    b = busy_session()
    session = b.build()
    chain = plan_session_input(session, Config().resolve("payload_prune+microcompact(keep_recent=2)"))
    pruned = {e["seq"] for e in chain.evictions if e["action"] == "prune"}
    cleared = {e["seq"] for e in chain.evictions if e["action"] == "clear"}
    assert pruned and cleared and not pruned & cleared
    # microcompact alone on the transcript the prune step produced decides the same clears
    after_prune = apply_evictions(session, [e for e in chain.evictions if e["action"] == "prune"])
    alone = plan_session_input(after_prune, Config().resolve("microcompact(keep_recent=2)"))
    assert {e["seq"] for e in alone.evictions} == cleared
    assert [p["step"] for p in chain.plans] == ["payload_prune"] + ["microcompact"] * (
        len(chain.plans) - 1)
    mc_meta = [json.loads(p["metadata_json"]) for p in chain.plans if p["step"] == "microcompact"]
    # the prune step's savings are already in the microcompact step's context size
    assert all(m["preTokens"] > 0 for m in mc_meta)


def test_the_baseline_plans_nothing_and_records_the_whole_context():
    b = busy_session()
    result = plan_session_input(b.build(), Config().resolve("none"))
    [plan] = result.plans
    assert result.evictions == []
    total = sum(r["est_tokens"] for r in b.messages)
    assert (plan["trigger"], plan["tokens_before"], plan["tokens_after"], plan["tokens_saved"]) == \
        ("none", total, total, 0)
    assert plan["at_seq"] == b.messages[-1]["seq"]


def test_plan_ids_are_deterministic_and_tables_have_the_contract_schemas():
    session = busy_session().build()
    plans1, ev1 = session_plan_tables(session, "payload_prune+microcompact(keep_recent=2)")
    plans2, ev2 = session_plan_tables(busy_session().build(),
                                      "payload_prune+microcompact(keep_recent=2)")
    assert plans1.schema == PLANS_SCHEMA and ev1.schema == EVICTIONS_SCHEMA
    assert plans1.equals(plans2) and ev1.equals(ev2)
    assert len(set(plans1.column("plan_id").to_pylist())) == plans1.num_rows
    assert set(ev1.column("plan_id").to_pylist()) <= set(plans1.column("plan_id").to_pylist())
    # the contract columns come first, in the schema.py order; `step` is added at the end
    assert PLANS_SCHEMA.names[-1] == "step" and EVICTIONS_SCHEMA.names[-1] == "step"


def test_replacements_are_recognised_as_compacted_state():
    b = busy_session()
    session = b.build()
    result = plan_session_input(session, Config().resolve("microcompact(keep_recent=2)"))
    compacted = apply_evictions(session, result.evictions)
    states = dict(zip(compacted.tool_results.column("seq").to_pylist(),
                      compacted.tool_results.column("compaction_state").to_pylist()))
    assert {states[e["seq"]] for e in result.evictions} == {"cleared"}
    texts = dict(zip(compacted.messages.column("seq").to_pylist(),
                     compacted.messages.column("text").to_pylist()))
    assert {texts[e["seq"]] for e in result.evictions} == {CLEARED_TEXT}
    pruned = plan_session_input(session, Config().resolve("payload_prune"))
    assert all(PRUNE_MARKER in e["replacement"] for e in pruned.evictions)


@pytest.mark.parametrize("spec", POLICIES + ["none"])
def test_every_plan_carries_the_microcompact_and_applied_edits_keys(spec):
    result = plan_session_input(busy_session().build(), Config().resolve(spec))
    assert result.plans
    for plan in result.plans:
        meta = json.loads(plan["metadata_json"])
        assert {"trigger", "preTokens", "tokensSaved", "compactedToolIds",
                "applied_edits"} <= set(meta)
        mine = [e for e in result.evictions if e["plan_id"] == plan["plan_id"]
                and e["action"] != "clear_input"]
        assert meta["compactedToolIds"] == [e["call_id"] for e in mine]
        if mine:
            assert meta["applied_edits"][0]["cleared_tool_uses"] == len(mine)


def test_polars_tables_give_the_same_plan_as_arrow_tables():
    polars = pytest.importorskip("polars")
    session = busy_session().build()
    as_polars = type(session)(session.session_id, polars.from_arrow(session.messages),
                              polars.from_arrow(session.tool_calls),
                              polars.from_arrow(session.tool_results),
                              polars.from_arrow(session.call_paths), session.info)
    spec = Config().resolve("payload_prune+microcompact(keep_recent=2)")
    assert plan_session_input(as_polars, spec).evictions == \
        plan_session_input(session, spec).evictions
