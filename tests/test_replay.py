"""Replay: context per turn, prompt-cache arithmetic, cost, at-risk and protected checks.

Sessions are built in the test (tests.helpers.sessions) and every expected figure is worked
out by hand in the comments; the real SWE-agent / mini-SWE-agent samples are checked against
figures computed from the JSON files and from plain SQL over the lake's rows.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline.stages.calibrate import TokenCalibration
from pipeline.cli import cli
from pipeline.core.config import Config
from pipeline.core.errors import UsageError
from tests.helpers.sessions import SessionBuilder
from pipeline.stages.replay import (
    CALIBRATED, HEURISTIC, PriceBook, TokenPrices, evaluate_evictions, replay, replay_session,
)
from tests.helpers.lake import REAL, copy_real, ingest_paths, rows

# Claude Sonnet-like prices, per token: input 3, cache write 3.75, cache read 0.30, output 15
# dollars per million tokens.
PRICES = TokenPrices(request=0.0, input=3e-6, cache_write=3.75e-6, cache_read=0.30e-6,
                     output=15e-6)


def flat_prices(model, total_input, ts):
    return PRICES if model != "unknown-model" else None


def six_turns(*, minutes=(0, 1, 2, 3, 4, 5), model: str | None = None):
    """A 40-char prompt (10 tokens), then 6 turns: a Bash call whose input
    ``{"command":"stepK"}`` is 19 chars (5 tokens) and a one-line result of 400 chars
    (100 tokens). Turn k starts at its call; its context is 10 + 105 * k tokens:
    10, 115, 220, 325, 430, 535 (sum 1635)."""
    b = SessionBuilder("six")
    b.prompt("u" * 40, at=0)
    results = []
    for k in range(6):
        cid = b.call("Bash", {"command": f"step{k}"}, at=minutes[k])
        results.append(b.result(cid, "x" * 400))
    session = b.build()
    if model is not None:
        messages = session.messages
        session = type(session)(session.session_id,
                                messages.append_column("model", pa.array([model] * messages.num_rows)),
                                session.tool_calls, session.tool_results, session.call_paths,
                                session.info)
    starts = [r["seq"] for r in b.messages if r["kind"] == "tool_use"]
    return session, starts, results


def test_the_six_turn_session_has_the_contexts_worked_out_by_hand():
    session, starts, _ = six_turns()
    out = replay_session(session, [Config().resolve("none")], prices=flat_prices)
    turns = out.turns_for("none")
    assert [t["seq"] for t in turns] == starts
    assert [t["context_tokens"] for t in turns] == [10, 115, 220, 325, 430, 535]
    row = out.eval_for("none")
    assert (row["turns"], row["total_input_tokens"], row["peak_context_tokens"]) == (6, 1635, 535)
    # the same figure the policies' own index gives at each turn start
    view = session.view()
    assert [view.context_tokens(s) for s in starts] == [10, 115, 220, 325, 430, 535]


def test_masking_on_a_six_turn_session_saves_the_tokens_worked_out_by_hand():
    session, starts, results = six_turns()
    out = replay_session(session, [Config().resolve("none"),
                                   Config().resolve("observation_masking(window=2)")],
                         prices=flat_prices)
    # window=2: at turn k (0-based) the results of turns k-2 and k-1 stay; turn k-3's result
    # is masked from turn 3 on: result 0 at turn 3, result 1 at turn 4, result 2 at turn 5.
    # "Old environment output: (1 lines omitted)" is 41 chars = 11 tokens: 89 saved each.
    masked = out.turns_for("observation_masking(window=2)")
    assert [t["context_tokens"] for t in masked] == [10, 115, 220, 325 - 89, 430 - 178, 535 - 267]
    assert [t["evictions"] for t in masked] == [0, 0, 0, 1, 1, 1]
    row = out.eval_for("observation_masking(window=2)")
    # 1635 - (89 + 178 + 267) = 1635 - 534 = 1101; 534 / 1635 = 32.66 %
    assert row["total_input_tokens"] == 1101
    assert row["tokens_saved"] == 534
    assert row["tokens_saved_pct"] == pytest.approx(100 * 534 / 1635, abs=1e-4)
    assert row["peak_context_tokens"] == 268
    assert (row["evictions"], row["evicted_tokens"], row["plans"]) == (3, 3 * 89, 3)
    assert row["protected_violations"] == 0 and row["violations_json"] is None


def test_masking_one_old_result_per_turn_breaks_the_cache_every_turn():
    session, _, _ = six_turns()
    out = replay_session(session, [Config().resolve("none"),
                                   Config().resolve("observation_masking(window=2)")],
                         prices=flat_prices)
    none = out.turns_for("none")
    # none: each turn reads the previous context and writes the 105 new tokens
    assert [t["cache_read_tokens"] for t in none] == [0, 10, 115, 220, 325, 430]
    assert [t["cache_write_tokens"] for t in none] == [10, 105, 105, 105, 105, 105]
    masked = out.turns_for("observation_masking(window=2)")
    # turn 3 masks result 0 (after prompt 10 + call 5): the cache is read up to 15 tokens;
    # turn 4 masks result 1: read 10 + 5 + 11 + 5 = 31; turn 5 masks result 2: 31 + 11 + 5 = 47
    assert [t["cache_read_tokens"] for t in masked] == [0, 10, 115, 15, 31, 47]
    # writes = context - read: 236 - 15, 252 - 31, 268 - 47 = 221 each
    assert [t["cache_write_tokens"] for t in masked] == [10, 105, 105, 221, 221, 221]
    # cost: none = 1100 reads * 0.30 + 535 writes * 3.75 + 30 output * 15 = 2786.25 micro-$
    # masking = 218 * 0.30 + 883 * 3.75 + 30 * 15 = 3826.65 micro-$: fewer tokens, more money
    base = out.eval_for("none")
    row = out.eval_for("observation_masking(window=2)")
    assert base["cost_usd"] == pytest.approx(2786.25e-6)
    assert row["cost_usd"] == pytest.approx(3826.65e-6)
    assert row["cost_saved_pct"] == pytest.approx(100 * (2786.25 - 3826.65) / 2786.25, abs=1e-3)
    # without a cache: 1635 (none) vs 1101 input tokens at 3 $/M, + the same output
    assert base["cost_uncached_usd"] == pytest.approx((1635 * 3 + 30 * 15) * 1e-6)
    assert row["cost_uncached_usd"] == pytest.approx((1101 * 3 + 30 * 15) * 1e-6)
    assert (row["cache_read_tokens"], row["cache_write_tokens"]) == (218, 883)


def test_a_clearing_breaks_the_cache_at_the_cleared_items_position():
    session, starts, results = six_turns()
    # a hand-made plan: result 1 (100 tokens) replaced by 8 tokens when turn 4 starts
    evictions = [{"at_seq": starts[4], "seq": results[1], "tokens_before": 100,
                  "tokens_after": 8, "action": "clear", "call_id": "toolu_0002",
                  "paths": [], "tool_name": "Bash"}]
    out = evaluate_evictions(session, evictions, policy="hand", prices=flat_prices)
    turns = out.turns_for("hand")
    assert [t["context_tokens"] for t in turns] == [10, 115, 220, 325, 430 - 92, 535 - 92]
    # turn 4: only the prefix before result 1 is unchanged: prompt 10 + call 5 + result 0 100
    # + call 5 = 120 read, 338 - 120 = 218 written; turn 5 reads all of turn 4's 338 again
    assert [t["cache_read_tokens"] for t in turns] == [0, 10, 115, 220, 120, 338]
    assert [t["cache_write_tokens"] for t in turns] == [10, 105, 105, 105, 218, 105]
    row = out.eval_for("hand")
    assert row["total_input_tokens"] == 1635 - 2 * 92
    # 803 reads * 0.30 + 648 writes * 3.75 + 30 * 15 = 3120.9 micro-$ vs 2786.25 for none
    assert row["cost_usd"] == pytest.approx(3120.9e-6)
    assert row["baseline_cost_usd"] == pytest.approx(2786.25e-6)
    assert row["cost_saved_usd"] == pytest.approx((2786.25 - 3120.9) * 1e-6)


def test_a_clearing_of_an_item_after_the_previous_prompt_does_not_break_the_cached_prefix():
    session, starts, results = six_turns()
    # result 3 arrives after turn 3 started; cleared when turn 4 starts: the cache of turn 3's
    # prompt (325 tokens) is intact, only the new part differs
    evictions = [{"at_seq": starts[4], "seq": results[3], "tokens_before": 100,
                  "tokens_after": 8, "action": "clear"}]
    turns = evaluate_evictions(session, evictions, policy="hand", prices=flat_prices) \
        .turns_for("hand")
    assert turns[4]["cache_read_tokens"] == 325
    assert turns[4]["cache_write_tokens"] == 430 - 92 - 325


def test_a_gap_longer_than_the_cache_ttl_reads_nothing_from_the_cache():
    session, _, _ = six_turns(minutes=(0, 1, 2, 20, 21, 22))
    out = replay_session(session, [Config().resolve("none")], prices=flat_prices,
                         cache_ttl_minutes=5)
    turns = out.turns_for("none")
    # 18 minutes between turn 2 and turn 3: everything written again
    assert [t["cache_read_tokens"] for t in turns] == [0, 10, 115, 0, 325, 430]
    out = replay_session(session, [Config().resolve("none")], prices=flat_prices,
                         cache_ttl_minutes=None)
    assert [t["cache_read_tokens"] for t in out.turns_for("none")] == [0, 10, 115, 220, 325, 430]


def test_a_recorded_compaction_boundary_restarts_the_context_and_the_cache():
    b = SessionBuilder("bnd")
    b.prompt("u" * 40, at=0)                       # 10 tokens
    c1 = b.call("Bash", {"command": "step0"}, at=1)  # 5
    b.result(c1, "x" * 400)                        # 100
    boundary = b.boundary(at=2)                    # empty text: 0 tokens
    b.prompt("v" * 80, at=2)                       # 20 tokens
    c2 = b.call("Bash", {"command": "step1"}, at=3)
    b.result(c2, "y" * 400)
    b.call("Bash", {"command": "step2"}, at=4)
    out = replay_session(b.build(), [Config().resolve("none")], prices=flat_prices)
    turns = out.turns_for("none")
    # turn 0: 10; turn 1 (after the boundary): boundary 0 + prompt 20 = 20, cache restarted;
    # turn 2: 20 + 5 + 100 = 125, reads turn 1's 20
    assert boundary < turns[1]["seq"]
    assert [t["context_tokens"] for t in turns] == [10, 20, 125]
    assert [t["cache_read_tokens"] for t in turns] == [0, 0, 20]


def memory_session():
    """A prompt, a read of the project memory file, three other reads (turns 0..3), an
    answer (turn 4) and a last read (turn 5)."""
    b = SessionBuilder("mem", project="/work/p")
    b.prompt("read the project files and fix the parser", at=0)
    memory = b.call("Read", {"file_path": "/work/p/CLAUDE.md"}, at=1)
    memory_seq = b.result(memory, "# project memory\n" * 40)
    seqs = {}
    for name in ("a", "b", "c"):
        cid = b.call("Read", {"file_path": f"/work/p/src/{name}.py"}, at=2)
        seqs[name] = b.result(cid, f"{name} = 1\n" * 100)
    answer = b.assistant("The parser reads the files in order; fixing a.py now.", at=3)
    cid = b.call("Read", {"file_path": "/work/p/src/a.py"}, at=4, new_turn=True)
    b.result(cid, "a = 1\n" * 100)
    return b, memory_seq, seqs, answer


def test_a_deliberately_bad_plan_is_caught_by_the_protected_check():
    b, memory_seq, seqs, answer = memory_session()
    session = b.build()
    prompt_seq = b.messages[0]["seq"]
    call_seq = [r["seq"] for r in b.messages if r["kind"] == "tool_use"][1]
    end = b.messages[-1]["seq"]
    bad = [
        {"at_seq": end, "seq": prompt_seq, "tokens_before": 10, "tokens_after": 1,
         "action": "clear"},                                   # user text
        {"at_seq": end, "seq": answer, "tokens_before": 13, "tokens_after": 1,
         "action": "clear"},                                   # assistant text
        {"at_seq": end, "seq": memory_seq, "tokens_before": 170, "tokens_after": 9,
         "action": "clear"},                                   # managed-memory read
        {"at_seq": end, "seq": seqs["b"], "tokens_before": 150, "tokens_after": 9,
         "action": "clear_input"},                             # clear_input on a result
        {"at_seq": end, "seq": call_seq, "tokens_before": 10, "tokens_after": 1,
         "action": "clear_input"},                             # allowed: a call's input
        {"at_seq": end, "seq": seqs["c"], "tokens_before": 150, "tokens_after": 9,
         "action": "clear"},                                   # allowed: an ordinary result
    ]
    row = evaluate_evictions(session, bad, policy="bad").eval_for("bad")
    assert row["protected_violations"] == 4
    assert json.loads(row["violations_json"]) == {"memory_read": 1, "not_tool_output": 3}
    good = evaluate_evictions(session, bad[-2:], policy="good").eval_for("good")
    assert good["protected_violations"] == 0 and good["violations_json"] is None


def test_real_policies_leave_memory_reads_and_tail_exchanges_alone():
    b, memory_seq, _, _ = memory_session()
    session = b.build()
    config = Config()
    policies = [config.resolve(p) for p in (
        "none", "observation_masking(window=1)", 'context_editing(trigger_type="tool_uses", '
        'trigger=0, keep=1)', "tail_protect+observation_masking(window=1)")]
    out = replay_session(session, policies)
    for row in out.evals:
        assert row["protected_violations"] == 0, row["policy"]
    masked = out.eval_for("observation_masking(window=1)")
    assert masked["evictions"] == 3            # a, b, c; the memory read is preserved
    # the same chain with a hand-made eviction inside the protected tail is caught
    chain = config.resolve("tail_protect+observation_masking(window=1)")
    end = b.messages[-1]["seq"]
    last_result = b.messages[-1]["seq"]
    tail_bad = [{"at_seq": end + 1, "seq": last_result, "tokens_before": 150,
                 "tokens_after": 9, "action": "clear", "step": "observation_masking"}]
    row = evaluate_evictions(session, tail_bad, policy="tail", policy_spec=chain).eval_for("tail")
    assert json.loads(row["violations_json"]) == {"tail_protected": 1}


def test_an_evicted_result_whose_path_is_read_again_is_at_risk():
    b, _, seqs, _ = memory_session()
    session = b.build()
    starts = [t.start for t in session.view().turns]
    # a.py is read again at turn 5; b.py and c.py never again
    evictions = [{"at_seq": starts[4], "seq": seqs[name], "tokens_before": 150,
                  "tokens_after": 9, "action": "clear"} for name in ("a", "b", "c")]
    row = evaluate_evictions(session, evictions, policy="hand").eval_for("hand")
    assert row["at_risk_evictions"] == 1
    # cleared only after the second read: no longer at risk (the agent did not come back)
    late = [{"at_seq": b.messages[-1]["seq"] + 1, "seq": seqs["a"], "tokens_before": 150,
             "tokens_after": 9, "action": "clear"}]
    assert evaluate_evictions(session, late, policy="late").eval_for("late")["at_risk_evictions"] == 0


def test_a_repeated_identical_call_makes_its_evicted_result_at_risk():
    b = SessionBuilder("rep")
    b.prompt("run the tests until they pass", at=0)
    first = b.result(b.call("Bash", {"command": "pytest -q"}, at=1), "F" * 400)
    b.result(b.call("Bash", {"command": "git diff"}, at=2), "d" * 400)
    b.result(b.call("Bash", {"command": "pytest -q"}, at=3), "." * 400)
    session = b.build()
    starts = [t.start for t in session.view().turns]
    evictions = [{"at_seq": starts[2], "seq": first, "tokens_before": 100, "tokens_after": 9,
                  "action": "clear"}]
    assert evaluate_evictions(session, evictions, policy="p").eval_for("p")["at_risk_evictions"] == 1


def test_the_estimate_error_against_recorded_usage_names_its_estimator():
    session, starts, _ = six_turns(model="m")
    # recorded usage on each turn's row: the context + a 1000-token system prompt
    recorded = {s: 10 + 105 * k + 1000 for k, s in enumerate(starts)}
    messages = session.messages
    inputs = pa.array([recorded.get(s) for s in messages.column("seq").to_pylist()], pa.int64())
    scopes = pa.array(["call" if s in recorded else None
                       for s in messages.column("seq").to_pylist()], pa.string())
    messages = messages.append_column("input_tokens", inputs).append_column("usage_scope", scopes)
    session = type(session)(session.session_id, messages, session.tool_calls,
                            session.tool_results, session.call_paths, session.info)
    row = replay_session(session, [Config().resolve("none")]).eval_for("none")
    # recorded 1635 + 6 * 1000 = 7635; the transcript-only estimate is 1635
    assert (row["usage_scope"], row["usage_turns"], row["recorded_input_tokens"]) == \
        ("call", 6, 7635)
    assert row["heuristic_error_pct"] == pytest.approx(100 * (1635 - 7635) / 7635, abs=1e-4)
    assert row["estimator"] == HEURISTIC and row["estimate_error_pct"] == row["heuristic_error_pct"]
    # a calibration with factors 1.0 and a 1000-token intercept for model "m" explains it all
    calibration = TokenCalibration({("m", "prompt"): (1.0, 1.0, 1.0)}, {("m", "prompt"): 1000.0})
    row = replay_session(session, [Config().resolve("none")],
                         calibration=calibration).eval_for("none")
    assert row["estimator"] == CALIBRATED
    assert (row["estimated_input_tokens"], row["estimate_error_pct"]) == (7635, 0.0)
    assert row["heuristic_error_pct"] == pytest.approx(-78.5855, abs=1e-4)


def test_a_session_priced_with_an_unknown_model_has_no_cost_rather_than_zero():
    session, _, _ = six_turns(model="unknown-model")
    row = replay_session(session, [Config().resolve("none")], prices=flat_prices).eval_for("none")
    assert row["cost_usd"] is None and row["unpriced_turns"] == 6
    book = PriceBook()
    assert book("acme-internal-coder-v3", 1000, None) is None
    assert book(None, 1000, None) is None


def test_the_price_book_reads_genai_prices_per_tier():
    book = PriceBook()
    low = book("claude-sonnet-4-5-20250929", 1000, None)
    high = book("claude-sonnet-4-5-20250929", 300_000, None)
    # Claude Sonnet 4.5 list prices: $3 / $3.75 / $0.30 / $15 per million, doubled input above 200k
    assert (round(low.input * 1e6, 6), round(low.cache_write * 1e6, 6),
            round(low.cache_read * 1e6, 6), round(low.output * 1e6, 6)) == (3, 3.75, 0.3, 15)
    assert round(high.input * 1e6, 6) == 6
    assert PriceBook("gpt-4o")("anything", 10, None) == book("gpt-4o", 10, None)
    with pytest.raises(UsageError):
        PriceBook("no-such-model-anywhere")


# ---------------------------------------------------------------------------------------
# The stage on the real SWE-agent and mini-SWE-agent trajectories
# ---------------------------------------------------------------------------------------
SWE_FILES = ("swe_agent/6e44b9__sweagenttestrepo-1c2844.traj", "swe_agent/pydicom__pydicom-1458.traj",
             "mini_swe_agent/django__django-14155.traj.json",
             "mini_swe_agent/pvlib__pvlib-python-1606.traj.json")
SIX = ["microcompact", "payload_prune", "context_editing", "observation_masking(window=10)",
       "strategic"]


def expected_turns() -> dict[str, int]:
    """API calls per trajectory, read from the JSON files: SWE-agent ``model_stats.api_calls``
    (the final submit step is in ``trajectory`` only), mini-SWE-agent assistant messages."""
    out = {}
    for rel in SWE_FILES:
        data = json.loads((REAL / rel).read_text())
        if rel.startswith("swe_agent"):
            out[rel.split("/")[1][:-len(".traj")] + "@swe_agent"] = data["info"]["model_stats"]["api_calls"]
        else:
            out[data["instance_id"] + "@mini_swe_agent"] = sum(1 for m in data["messages"] if m["role"] == "assistant")
    return out


@pytest.fixture(scope="module")
def swe_lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("swe")
    archive = copy_real(tmp, *SWE_FILES)
    lake, _ = ingest_paths(tmp, archive)
    result = replay(lake, policies=SIX, config=Config(), workers=1)
    return lake, result


def test_real_trajectories_replay_one_turn_per_api_call(swe_lake):
    _, result = swe_lake
    none = {r["session_id"]: r for r in result.evals.to_pylist() if r["policy"] == "none"}
    assert {sid: r["turns"] for sid, r in none.items()} == expected_turns() == {
        "6e44b9__sweagenttestrepo-1c2844@swe_agent": 5, "pydicom__pydicom-1458@swe_agent": 12,
        "django__django-14155@mini_swe_agent": 22, "pvlib__pvlib-python-1606@mini_swe_agent": 84}


def test_real_trajectories_baseline_context_equals_a_plain_sql_sum(swe_lake):
    lake, result = swe_lake
    # every turn row of these sessions has an api_call_id: a turn starts at its first row and
    # sends every message before it
    expected = dict(rows(lake, """
        WITH starts AS (
            SELECT session_id, api_call_id, min(seq) AS start
            FROM messages
            WHERE role = 'assistant' AND kind IN ('text', 'thinking', 'tool_use')
            GROUP BY ALL)
        SELECT s.session_id, sum(m.est_tokens)
        FROM starts s JOIN messages m ON m.session_id = s.session_id AND m.seq < s.start
        GROUP BY ALL"""))
    none = {r["session_id"]: r["total_input_tokens"] for r in result.evals.to_pylist()
            if r["policy"] == "none"}
    assert none == {sid: int(v) for sid, v in expected.items()}


def test_real_trajectories_mask_exactly_the_results_older_than_ten_turns(swe_lake):
    lake, result = swe_lake
    # a result belongs to the turn of its call; at the last turn n-1 the results of turns
    # 0 .. n-12 are masked (turns n-11 .. n-2 are the ten kept)
    expected = dict(rows(lake, """
        WITH starts AS (
            SELECT session_id, api_call_id, min(seq) AS start
            FROM messages
            WHERE role = 'assistant' AND kind IN ('text', 'thinking', 'tool_use')
            GROUP BY ALL),
        numbered AS (
            SELECT *, row_number() OVER (PARTITION BY session_id ORDER BY start) - 1 AS turn,
                   count(*) OVER (PARTITION BY session_id) AS n
            FROM starts),
        owned AS (
            SELECT r.session_id, nb.turn, nb.n
            FROM messages r
            JOIN messages c ON c.session_id = r.session_id AND c.call_id = r.call_id
                           AND c.kind = 'tool_use'
            JOIN numbered nb ON nb.session_id = c.session_id AND nb.api_call_id = c.api_call_id
            WHERE r.kind = 'tool_result')
        SELECT s.session_id, count(o.turn) FILTER (WHERE o.turn <= o.n - 12)
        FROM (SELECT DISTINCT session_id FROM messages) s LEFT JOIN owned o USING (session_id)
        GROUP BY ALL"""))
    masked = {r["session_id"]: r["evictions"] for r in result.evals.to_pylist()
              if r["policy"] == "observation_masking(window=10)"}
    assert masked == expected
    assert masked["pvlib__pvlib-python-1606@mini_swe_agent"] == 73     # 84 turns, one call each: turns 0..72


def test_real_trajectories_never_touch_protected_items_and_only_masking_saves(swe_lake):
    _, result = swe_lake
    by = {(r["policy"], r["session_id"]): r for r in result.evals.to_pylist()}
    assert len(by) == 6 * 4
    assert all(r["protected_violations"] == 0 for r in by.values())
    summary = {r["policy"]: r for r in result.summary}
    assert list(summary) == ["none"] + SIX
    assert summary["none"]["tokens_saved_pct"] == 0
    assert summary["observation_masking(window=10)"]["tokens_saved_pct"] > 20
    # these short sessions never reach the other policies' triggers (100k tokens, 500k chars,
    # payloads over 16 KiB, idle hours, task boundaries)
    for policy in ("microcompact", "payload_prune", "context_editing", "strategic"):
        assert summary[policy]["evictions"] == 0, policy


def test_replay_writes_policy_eval_and_replay_turns_views(swe_lake):
    lake, result = swe_lake
    assert rows(lake, "SELECT policy, count(*) FROM policy_eval GROUP BY ALL ORDER BY 1") == \
        sorted((p, 4) for p in ["none"] + SIX)
    turns = sum(expected_turns().values())
    assert rows(lake, "SELECT count(*) FROM replay_turns WHERE policy = 'none'") == [(turns,)]
    # the run's table and the lake's view give the same comparison
    from pipeline.stages.replay import summary_rows
    con = lake.connect()
    try:
        assert summary_rows(None, result.policies, con=con) == result.summary
    finally:
        con.close()


def test_replaying_again_writes_byte_identical_files(tmp_path):
    archive = copy_real(tmp_path, SWE_FILES[0], SWE_FILES[2])
    lake, _ = ingest_paths(tmp_path, archive)
    replay(lake, policies=["observation_masking(window=3)"], config=Config(), workers=1)
    files = sorted((lake.derived_dir).glob("*/*.parquet"))
    first = {p: p.read_bytes() for p in files if p.parent.name in ("policy_eval", "replay_turns")}
    replay(lake, policies=["observation_masking(window=3)"], config=Config(), workers=1)
    assert {p: p.read_bytes() for p in first} == first and len(first) == 4


def test_replaying_one_session_keeps_the_other_sessions_rows(tmp_path):
    archive = copy_real(tmp_path, SWE_FILES[0], SWE_FILES[2])
    lake, _ = ingest_paths(tmp_path, archive)
    replay(lake, policies=["observation_masking(window=3)"], config=Config(), workers=1)
    result = replay(lake, policies=["observation_masking(window=3)"], config=Config(),
                    session_id="django__django-14155@mini_swe_agent", workers=1)
    assert result.sessions == 1
    table = pq.read_table(lake.derived_dir / "policy_eval" / "none.parquet")
    assert table.column("session_id").to_pylist() == ["6e44b9__sweagenttestrepo-1c2844@swe_agent",
                                                      "django__django-14155@mini_swe_agent"]
    with pytest.raises(UsageError):
        replay(lake, policies=["none"], config=Config(), session_id="nope")


def test_the_cli_prints_the_table_and_json_and_sweeps_come_from_the_config(tmp_path):
    archive = copy_real(tmp_path, SWE_FILES[2])
    lake, _ = ingest_paths(tmp_path, archive)
    config = tmp_path / "ctxlake.toml"
    config.write_text('[sweeps]\nmasking = ["observation_masking(window=5)", '
                      '"observation_masking(window=10)"]\n')
    runner = CliRunner()
    result = runner.invoke(cli, ["--lake", str(lake.root), "replay", "--config", str(config),
                                 "--sweep", "masking", "--policy", "none", "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["policy"] for r in data["summary"]] == [
        "none", "observation_masking(window=5)", "observation_masking(window=10)"]
    # a smaller window masks more: 22 turns, window 5 vs 10
    saved = {r["policy"]: r["tokens_saved_pct"] for r in data["summary"]}
    assert saved["observation_masking(window=5)"] > saved["observation_masking(window=10)"] > 0
    result = runner.invoke(cli, ["--lake", str(lake.root), "replay", "--policy",
                                 "observation_masking(window=5)"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "observation_masking(window=5)" in result.output and "at-risk" in result.output
    result = runner.invoke(cli, ["--lake", str(lake.root), "replay", "--sweep", "nope",
                                 "--config", str(config)])
    # library errors reach the user through pipeline.cli.main.CtxlakeGroup (exit code 2 for usage errors)
    assert result.exit_code == 2
    assert "no sweep 'nope'" in result.output
    result = runner.invoke(cli, ["--lake", str(lake.root), "replay"])
    assert result.exit_code == 2 and "at least one --policy" in result.output
    result = runner.invoke(cli, ["--lake", str(lake.root), "replay", "--policy", "none",
                                 "--cache-ttl", "soon"])
    assert result.exit_code == 2 and "--cache-ttl" in result.output


def test_the_first_replay_of_a_lake_leaves_its_persisted_views_current(tmp_path):
    lake, _ = ingest_paths(tmp_path, REAL)
    assert lake.duckdb_file_current()
    result = CliRunner().invoke(cli, ["--lake", str(lake.root), "replay", "--policy",
                                      "microcompact", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["warnings"] == []
    # policy_eval and replay_turns are new tables: ctxlake.duckdb was written again with
    # their views, so the next command attaches it instead of binding every view
    assert {"policy_eval", "replay_turns"} <= set(lake._derived_names())
    assert lake.duckdb_file_current()
