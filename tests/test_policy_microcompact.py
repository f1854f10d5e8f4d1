"""microcompact (docs/policies.md): idle / size / force triggers, keep_recent, errors, protection."""

from __future__ import annotations

import json
import math

import pytest

from pipeline.core.config import Config, config_from_dict
from pipeline.core.errors import ConfigError
from pipeline.stages.plan import plan_session_input
from pipeline.policies.base import CLEARED_TEXT, ParamError
from tests.helpers.sessions import SessionBuilder
from pipeline.policies.microcompact import MicrocompactParams

CLEARED_TOKENS = math.ceil(len(CLEARED_TEXT) / 4)   # 33 chars -> 9


def run(session, spec: str, config: Config | None = None):
    return plan_session_input(session, (config or Config()).resolve(spec))


def meta(plan_row: dict) -> dict:
    return json.loads(plan_row["metadata_json"])


def reads_then_idle(n: int, *, gap: float, size: int = 1000) -> tuple[SessionBuilder, list[str]]:
    """A prompt, n Read results of ``size + 1`` chars, an answer at minute 10, a prompt after
    ``gap`` minutes."""
    b = SessionBuilder()
    b.prompt("please read the files and fix the parser", at=0)
    ids = []
    for i in range(n):
        b.assistant(f"reading file {i}", at=1 + i * 0.1)
        ids.append(b.call("Read", {"file_path": f"src/f{i}.py"}))
        b.result(ids[-1], "x" * size + str(i))
    b.assistant("all files are read; the parser is fixed", at=10)
    b.prompt("now write the changelog entry", at=10 + gap)
    b.assistant("ok", at=10 + gap + 1)
    return b, ids


def test_idle_trigger_clears_all_but_the_five_most_recent_results():
    b, ids = reads_then_idle(8, gap=61)
    session = b.build()
    prompt_seq = [r["seq"] for r in b.messages if r["text"] == "now write the changelog entry"][0]
    result = run(session, "microcompact")
    assert len(result.plans) == 1
    plan = result.plans[0]
    assert (plan["trigger"], plan["at_seq"], plan["evicted"], plan["kept"]) == \
        ("idle", prompt_seq, 3, 5)
    m = meta(plan)
    assert m["compactedToolIds"] == ids[:3]
    assert m["gapMinutes"] == 61.0 and m["thresholdMinutes"] == 60.0
    assert (m["toolsCleared"], m["toolsKept"], m["toolsPreserved"], m["keepRecent"]) == (3, 5, 0, 5)
    # 8 results of 1001 chars; 3 of them become the 33-char placeholder
    assert m["toolResultCharsBefore"] == 8 * 1001
    assert m["toolResultCharsAfter"] == 5 * 1001 + 3 * 33
    assert m["tokensSaved"] == math.ceil(3 * (1001 - 33) / 4)
    assert [e["call_id"] for e in result.evictions] == ids[:3]
    for e in result.evictions:
        assert e["replacement"] == CLEARED_TEXT and e["action"] == "clear"
        assert (e["tokens_before"], e["tokens_after"]) == (math.ceil(1001 / 4), CLEARED_TOKENS)
        assert (e["bytes_before"], e["bytes_after"]) == (1001, 33)
        assert e["at_seq"] == prompt_seq and e["seq"] < prompt_seq
    assert plan["tokens_saved"] == 3 * (251 - 9)
    assert plan["tokens_after"] == plan["tokens_before"] - plan["tokens_saved"]
    # the context before the prompt: every message's estimate (independent sum)
    assert plan["tokens_before"] == sum(r["est_tokens"] for r in b.messages if r["seq"] < prompt_seq)


def test_a_gap_of_exactly_idle_minutes_does_not_trigger():
    b, _ = reads_then_idle(8, gap=60)
    assert run(b.build(), "microcompact").plans == []
    b, _ = reads_then_idle(8, gap=60.5)
    assert len(run(b.build(), "microcompact").plans) == 1


def test_idle_is_evaluated_only_at_user_turns_not_inside_a_tool_loop():
    b = SessionBuilder()
    b.prompt("run the long migration", at=0)
    ids = []
    for i in range(8):
        b.assistant(f"step {i}", at=i)
        ids.append(b.call("Bash", {"command": f"step{i}.sh"}))
        b.result(ids[-1], "done " * 100, at=i + 200)   # 200 minutes inside the tool loop
    b.assistant("migration finished", at=500)
    assert run(b.build(), "microcompact").plans == []


def test_size_trigger_clears_oldest_first_down_to_the_low_water_mark():
    b = SessionBuilder()
    b.prompt("read everything", at=0)
    ids, turn_starts = [], []
    for i in range(8):
        ids.append(b.call("Read", {"file_path": f"f{i}.py"}, at=i))
        turn_starts.append(b.messages[-1]["seq"])
        b.result(ids[-1], "y" * 1000 + str(i))
    b.assistant("done", at=9)
    result = run(b.build(), "microcompact(size_chars=5000, low_water_chars=2000, keep_recent=1,"
                            " idle_minutes=-1)")
    # 5 results (5005 chars) are first over 5000 at the 6th turn; clearing 1001-char results
    # one by one: 4037, 3069, 2101, 1133 <= 2000
    assert len(result.plans) == 1
    plan = result.plans[0]
    assert (plan["trigger"], plan["at_seq"]) == ("size", turn_starts[5])
    m = meta(plan)
    assert m["compactedToolIds"] == ids[:4]
    assert (m["toolResultCharsBefore"], m["toolResultCharsAfter"]) == (5005, 1133)
    assert m["toolsKept"] == 1
    # afterwards the total never exceeds 5000 again (1001 * 4 = 4004 at the end)
    assert [e["at_seq"] for e in result.evictions] == [turn_starts[5]] * 4


def test_force_trigger_clears_at_the_requested_turn():
    b, ids = reads_then_idle(8, gap=1)
    session = b.build()
    # turns: 8 "reading" turns (text + call), the answer (9th), the "ok" (10th)
    result = run(session, "microcompact(force_at_turn=[10], idle_minutes=-1, keep_recent=2)")
    assert [p["trigger"] for p in result.plans] == ["force"]
    assert meta(result.plans[0])["compactedToolIds"] == ids[:6]
    by_seq = run(session, f"microcompact(force_at_seq=[{result.plans[0]['at_seq']}], "
                          "idle_minutes=-1, keep_recent=2)")
    assert [e["call_id"] for e in by_seq.evictions] == ids[:6]


def test_minus_one_disables_the_idle_and_the_size_trigger():
    # 8 results of 100001 chars: 5 in context (500005 > 500000) -> r0..r2 cleared (200101 <=
    # 250000); at the answer turn r3..r7 are 500005 again -> r3..r5; the idle prompt then
    # clears r6 (keep_recent=1 keeps r7)
    b, _ = reads_then_idle(8, gap=300, size=100_000)
    session = b.build()
    spec = "microcompact(keep_recent=1"
    both = run(session, spec + ")").plans
    assert [p["trigger"] for p in both] == ["size", "size", "idle"]
    assert [p["trigger"] for p in run(session, spec + ", idle_minutes=-1)").plans] == \
        ["size", "size"]
    assert [p["trigger"] for p in run(session, spec + ", size_chars=-1)").plans] == ["idle"]
    assert run(session, spec + ", idle_minutes=-1, size_chars=-1)").plans == []


def test_error_results_are_never_cleared_nor_counted():
    b = SessionBuilder()
    b.prompt("fix the build", at=0)
    ok, err = [], []
    for i in range(4):
        b.assistant(f"try {i}", at=i)
        ok.append(b.call("Bash", {"command": f"make {i}"}))
        b.result(ok[-1], "fine " * 50)
        err.append(b.call("Bash", {"command": f"make bad{i}"}))
        b.result(err[-1], "error: boom", error=True)
    b.assistant("it builds now", at=5)
    b.prompt("thanks, now the docs", at=100)
    result = run(b.build(), "microcompact(keep_recent=1)")
    m = meta(result.plans[0])
    assert m["compactedToolIds"] == ok[:3]
    assert m["toolsKept"] == 1
    assert not set(err) & {e["call_id"] for e in result.evictions}


def test_keep_recent_must_be_at_least_one():
    with pytest.raises(ParamError) as caught:
        MicrocompactParams(keep_recent=0)
    assert caught.value.key == "keep_recent"
    with pytest.raises(ConfigError, match=r"policies\.microcompact\.keep_recent: must be at least 1"):
        config_from_dict({"policies": {"microcompact": {"keep_recent": 0}}})
    b, ids = reads_then_idle(8, gap=61)
    result = run(b.build(), "microcompact(keep_recent=1)")
    assert meta(result.plans[0])["compactedToolIds"] == ids[:7]


def test_only_compactable_tools_are_cleared():
    b = SessionBuilder()
    b.prompt("plan the work", at=0)
    todo = b.call("TodoWrite", {"todos": [{"content": "a", "status": "pending"}]}, at=1)
    b.result(todo, "Todos have been modified successfully " * 20)
    task = b.call("Task", {"description": "explore", "prompt": "look around"})
    b.result(task, "the sub-agent found many things " * 30)
    read = b.call("Grep", {"pattern": "x"})
    b.result(read, "a.py:1:x " * 30)
    keep = b.call("Glob", {"pattern": "*.py"})
    b.result(keep, "a.py")
    b.assistant("planned", at=2)
    b.prompt("go on", at=70)
    result = run(b.build(), "microcompact(keep_recent=1)")
    assert [e["call_id"] for e in result.evictions] == [read]


def test_protected_items_are_removed_before_keep_recent_counts():
    b = SessionBuilder(project="/work/p")
    b.prompt("read the project files", at=0)
    r1 = b.call("Read", {"file_path": "src/a.py"}, at=1)
    b.result(r1, "a" * 800)
    r2 = b.call("Read", {"file_path": "src/b.py"})
    b.result(r2, "b" * 800)
    m1 = b.call("Read", {"file_path": "/work/p/CLAUDE.md"})
    b.result(m1, "# project memory\n" * 40)
    r3 = b.call("Read", {"file_path": "src/c.py"})
    b.result(r3, "c" * 800)
    m2 = b.call("Read", {"file_path": ".claude/CLAUDE.md"})
    b.result(m2, "# more memory\n" * 40)
    b.assistant("read them all", at=2)
    b.prompt("now refactor", at=90)
    result = run(b.build(), "microcompact(keep_recent=2)")
    plan = result.plans[0]
    m = meta(plan)
    # candidates r1, r2, r3 (memory reads set apart first): keep r2, r3; clear r1 only
    assert m["compactedToolIds"] == [r1]
    assert m["preservedToolIds"] == [m1, m2]
    assert (m["toolsCleared"], m["toolsKept"], m["toolsPreserved"]) == (1, 2, 2)
    assert m["toolResultCharsBefore"] == 3 * 800
    assert m["tokensSaved"] == math.ceil((800 - 33) / 4)
    assert plan["tokens_saved"] == 200 - CLEARED_TOKENS
    assert (plan["preserved"], plan["kept"], plan["evicted"]) == (2, 2, 1)
    assert result.preserved == 2


def test_already_cleared_results_are_not_counted_or_cleared_again():
    b = SessionBuilder()
    b.prompt("continue the task", at=0)
    old = b.call("Read", {"file_path": "a.py"}, at=1)
    b.result(old, CLEARED_TEXT)
    pruned = b.call("Read", {"file_path": "big.py"})
    b.result(pruned, "head\n[... 10 characters elided ...]\ntail\n[ctxlake compaction] full payload")
    ids = []
    for name in ("b.py", "c.py", "d.py"):
        ids.append(b.call("Read", {"file_path": name}))
        b.result(ids[-1], "z" * 500)
    b.assistant("done", at=2)
    b.prompt("next", at=80)
    m = meta(run(b.build(), "microcompact(keep_recent=2)").plans[0])
    assert m["compactedToolIds"] == ids[:1]
    assert m["toolsKept"] == 2 and m["toolResultCharsBefore"] == 1500


def test_results_listed_by_a_recorded_microcompact_boundary_count_as_cleared():
    b = SessionBuilder()
    b.prompt("start", at=0)
    ids = []
    for i in range(4):
        ids.append(b.call("Read", {"file_path": f"{i}.py"}, at=1))
        b.result(ids[-1], "q" * 400)
    b.boundary("microcompact_boundary", metadata={"trigger": "auto",
                                                  "compactedToolIds": ids[:2]}, at=2)
    b.assistant("continuing", at=3)
    b.prompt("more", at=100)
    m = meta(run(b.build(), "microcompact(keep_recent=1)").plans[0])
    assert m["compactedToolIds"] == [ids[2]]


def test_results_before_a_compact_boundary_are_out_of_the_context():
    b = SessionBuilder()
    b.prompt("start", at=0)
    before = [b.call("Read", {"file_path": f"old{i}.py"}, at=1) for i in range(0)]
    for i in range(3):
        before.append(b.call("Read", {"file_path": f"old{i}.py"}, at=1))
        b.result(before[-1], "o" * 400)
    b.boundary("compact_boundary", metadata={"trigger": "manual", "preTokens": 1000}, at=2)
    after = []
    for i in range(3):
        after.append(b.call("Read", {"file_path": f"new{i}.py"}, at=3))
        b.result(after[-1], "n" * 400)
    b.assistant("continuing", at=4)
    b.prompt("more", at=100)
    result = run(b.build(), "microcompact(keep_recent=1)")
    assert meta(result.plans[0])["compactedToolIds"] == after[:2]


def test_cleared_reads_report_their_paths_and_reads_without_a_path():
    b = SessionBuilder(project="/work/p")
    b.prompt("look", at=0)
    a = b.call("Read", {"file_path": "src/a.py"}, at=1)
    b.result(a, "a" * 300)
    nopath = b.call("Read", {"offset": 3})
    b.result(nopath, "b" * 300)
    bash = b.call("Bash", {"command": "cat src/c.py"})
    b.result(bash, "c" * 300)
    last = b.call("Read", {"file_path": "src/d.py"})
    b.result(last, "d" * 300)
    b.assistant("ok", at=2)
    b.prompt("next step please", at=100)
    result = run(b.build(), "microcompact(keep_recent=1)")
    m = meta(result.plans[0])
    assert m["evictedReadPaths"] == ["/work/p/src/a.py"]
    assert m["unresolvedEvictedReads"] == 1
    by_id = {e["call_id"]: e for e in result.evictions}
    assert by_id[bash]["paths"] == ["/work/p/src/c.py"]
    assert by_id[nopath]["paths"] == []


def test_a_result_no_bigger_than_the_placeholder_is_not_cleared():
    b = SessionBuilder()
    b.prompt("look around", at=0)
    tiny = b.call("Glob", {"pattern": "*.md"}, at=1)
    b.result(tiny, "README.md")                 # 3 tokens < 9 for the placeholder
    big = b.call("Read", {"file_path": "a.py"})
    b.result(big, "a" * 400)
    last = b.call("Read", {"file_path": "b.py"})
    b.result(last, "b" * 400)
    b.assistant("ok", at=2)
    b.prompt("continue please", at=100)
    result = run(b.build(), "microcompact(keep_recent=1)")
    m = meta(result.plans[0])
    assert m["compactedToolIds"] == [big]
    assert (m["toolsTooSmall"], m["toolsKept"]) == (1, 2)
    assert result.plans[0]["tokens_saved"] == 100 - CLEARED_TOKENS
