"""observation_masking: keep the results of the last `window` turns, mask older ones."""

from __future__ import annotations

import json

import pytest

from pipeline.core.config import Config
from pipeline.core.errors import ConfigError
from pipeline.stages.plan import plan_session_input
from tests.helpers.sessions import SessionBuilder
from pipeline.text.tokens import estimate_tokens


def turns(n: int):
    """n turns, each a bash call answered by a 3-line observation, then a final answer."""
    b = SessionBuilder(format="swe_agent")
    b.prompt("solve the issue", at=0)
    ids, starts = [], []
    for i in range(n):
        ids.append(b.call("bash", {"command": f"step {i}"}, at=i))
        starts.append(b.messages[-1]["seq"])
        b.result(ids[-1], f"output line {i} a of the command\noutput line {i} b\nresult {i} c")
    b.assistant("submitted", at=n)
    starts.append(b.messages[-1]["seq"])
    return b, ids, starts


def test_results_older_than_the_window_are_masked_at_the_turn_they_leave_it():
    b, ids, starts = turns(5)          # turns 0..4 with results, turn 5 the answer
    result = plan_session_input(b.build(), Config().resolve("observation_masking(window=2)"))
    # at turn k the results of turns k-2, k-1 stay: turn 3 masks turn 0's, 4 masks 1's, ...
    assert [(e["call_id"], e["at_seq"]) for e in result.evictions] == \
        [(ids[0], starts[3]), (ids[1], starts[4]), (ids[2], starts[5])]
    for e in result.evictions:
        assert e["replacement"] == "Old environment output: (3 lines omitted)"
        assert e["tokens_after"] == estimate_tokens(e["replacement"])
    assert [p["trigger"] for p in result.plans] == ["window"] * 3
    meta = json.loads(result.plans[0]["metadata_json"])
    assert (meta["turn"], meta["maskedTurn"], meta["window"]) == (4, 1, 2)
    saved = sum(e["tokens_before"] - e["tokens_after"] for e in result.evictions)
    assert sum(p["tokens_saved"] for p in result.plans) == saved


def test_a_window_as_long_as_the_session_masks_nothing():
    b, _, _ = turns(5)
    assert plan_session_input(b.build(), Config().resolve("observation_masking")).evictions == []
    assert plan_session_input(b.build(), Config().resolve(
        "observation_masking(window=5)")).evictions == []


def test_the_window_must_be_at_least_one_turn():
    with pytest.raises(ConfigError, match=r"observation_masking\(window=0\)\.window"):
        Config().resolve("observation_masking(window=0)")


def test_masking_never_touches_user_or_assistant_text():
    b, ids, _ = turns(6)
    result = plan_session_input(b.build(), Config().resolve("observation_masking(window=1)"))
    result_seqs = {r["seq"] for r in b.messages if r["kind"] == "tool_result"}
    assert result.evictions and {e["seq"] for e in result.evictions} <= result_seqs


def test_an_observation_smaller_than_its_placeholder_stays():
    b = SessionBuilder(format="swe_agent")
    b.prompt("solve the issue", at=0)
    small = b.call("bash", {"command": "true"}, at=1)
    b.result(small, "ok")                       # 1 token < "Old environment output: ..."
    big = b.call("bash", {"command": "cat big"}, at=2)
    b.result(big, "x" * 400)
    for i in range(3):
        b.assistant(f"thinking {i}", at=3 + i)
    result = plan_session_input(b.build(), Config().resolve("observation_masking(window=1)"))
    assert [e["call_id"] for e in result.evictions] == [big]
