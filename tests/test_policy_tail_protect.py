"""tail_protect (docs/policies.md): the last tail_pairs meaningful exchanges are never cleared;
trivial exchanges (user < 10 chars AND assistant < 20 chars) are skipped; the recent-exchange
block with each message truncated to 150 estimated tokens."""

from __future__ import annotations

import json

from pipeline.core.config import Config
from pipeline.stages.plan import plan_session_input
from tests.helpers.sessions import SessionBuilder


def exchange(b: SessionBuilder, user: str, assistant: str, at: float, reads: int = 2) -> list[str]:
    b.prompt(user, at=at)
    ids = []
    for i in range(reads):
        ids.append(b.call("Read", {"file_path": f"f{at}_{i}.py"}, at=at + 0.1, new_turn=i == 0))
        b.result(ids[-1], f"contents {at} {i} " * 30)
    b.assistant(assistant, at=at + 0.5)
    return ids


def five_exchanges():
    b = SessionBuilder()
    e0 = exchange(b, "set up the project please", "The project is set up now.", 0)
    e1 = exchange(b, "add the parser module", "I added the parser module.", 1)
    e2 = exchange(b, "write tests for it", "Tests are written and pass.", 2)
    e3 = exchange(b, "ok", "Done.", 3)                          # 2 and 5 chars: trivial
    e4 = exchange(b, "now document the parser", "Documentation added to README.", 4)
    b.prompt("what is next on the list?", at=100)              # idle: 95.5 min
    b.assistant("Nothing else.", at=101)
    return b, [e0, e1, e2, e3, e4]


def test_the_last_meaningful_exchanges_are_protected_and_trivial_ones_skipped():
    b, (e0, e1, e2, e3, e4) = five_exchanges()
    result = plan_session_input(b.build(), Config().resolve(
        "tail_protect+microcompact(keep_recent=1)"))
    mc = [p for p in result.plans if p["step"] == "microcompact"]
    assert len(mc) == 1
    meta = json.loads(mc[0]["metadata_json"])
    # walking back from the idle prompt: e4, (e3 skipped), e2, e1 -> protected
    assert meta["tailProtectedToolIds"] == e1 + e2 + e4
    # candidates e0 + e3: keep_recent=1 keeps e3's last read
    assert meta["compactedToolIds"] == e0 + e3[:1]
    assert meta["toolsTailProtected"] == 6 and meta["toolsKept"] == 1
    assert meta["recentExchange"] == "\n".join([
        "=== RECENT EXCHANGE (protected) ===",
        "User: add the parser module", "Assistant: I added the parser module.", "---",
        "User: write tests for it", "Assistant: Tests are written and pass.", "---",
        "User: now document the parser", "Assistant: Documentation added to README.", "---",
        "=== END RECENT EXCHANGE ===",
    ])
    without = plan_session_input(b.build(), Config().resolve("microcompact(keep_recent=1)"))
    assert len(without.evictions) == 9


def protected(user: str, assistant: str) -> bool:
    """Is the second of two exchanges (user, assistant texts) tail-protected?"""
    b = SessionBuilder()
    exchange(b, "first exchange here", "The first exchange is done.", 0)
    ids = exchange(b, user, assistant, 1)
    b.prompt("and after the break?", at=100)
    result = plan_session_input(b.build(), Config().resolve(
        "tail_protect(tail_pairs=1)+microcompact(keep_recent=1)"))
    meta = json.loads([p for p in result.plans if p["step"] == "microcompact"][0]
                      ["metadata_json"])
    return meta["tailProtectedToolIds"] == ids


def test_the_meaningful_thresholds_are_10_user_and_20_assistant_characters():
    assert protected("x" * 10, "short")                 # user text of 10 chars counts
    assert protected("x" * 9, "y" * 20)                 # assistant text of 20 chars counts
    assert not protected("x" * 9, "y" * 19)             # both short: skipped


def test_the_block_truncates_each_message_to_150_estimated_tokens():
    b = SessionBuilder()
    long_user = "u" * 1000                              # 250 tokens -> 600 chars + "..."
    long_answer = "答" * 200                             # 300 tokens -> 100 CJK chars + "..."
    exchange(b, long_user, long_answer, 0)
    result = plan_session_input(b.build(), Config().resolve("tail_protect(tail_pairs=1)"))
    [plan] = result.plans
    meta = json.loads(plan["metadata_json"])
    assert meta["recentExchange"] == "\n".join([
        "=== RECENT EXCHANGE (protected) ===", "User: " + "u" * 600 + "...",
        "Assistant: " + "答" * 100 + "...", "---", "=== END RECENT EXCHANGE ===",
    ])
    assert plan["trigger"] == "tail" and plan["evicted"] == 0


def test_tail_protection_applies_to_context_editing_and_observation_masking():
    b, (e0, e1, e2, e3, e4) = five_exchanges()
    session = b.build()
    ce = plan_session_input(session, Config().resolve(
        "tail_protect+context_editing(trigger=0, keep=0)"))
    cleared = {e["call_id"]: e["at_seq"] for e in ce.evictions}
    assert not set(cleared) & set(e2 + e4)
    # e1 leaves the tail only when a sixth exchange starts (the tail moves with time)
    last_prompt = [r["seq"] for r in b.messages if r["text"] == "what is next on the list?"][0]
    assert all(cleared[i] > last_prompt for i in e1)
    assert all(cleared[i] < last_prompt for i in e0)
    om = plan_session_input(session, Config().resolve(
        "tail_protect(tail_pairs=1)+observation_masking(window=1)"))
    masked = {e["call_id"]: e["at_seq"] for e in om.evictions}
    # e4's first read falls out of the 1-turn window inside e4 (at its answer's turn) but
    # stays while e4 is the tail, i.e. until the next exchange's turn
    plain = plan_session_input(session, Config().resolve("observation_masking(window=1)"))
    plain_at = {e["call_id"]: e["at_seq"] for e in plain.evictions}
    assert plain_at[e4[0]] < last_prompt < masked[e4[0]]


def test_texts_are_trimmed_before_the_10_and_20_character_tests():
    assert not protected("        hi        ", "   ok   " + " " * 20)   # padded: 2 and 2 chars
    assert protected("  " + "x" * 10 + "  ", "ok")


def test_the_block_holds_the_trimmed_texts():
    b = SessionBuilder()
    exchange(b, "   add the parser module\n\n", "\n  I added the parser module.  ", 0)
    [plan] = plan_session_input(b.build(), Config().resolve("tail_protect")).plans
    assert json.loads(plan["metadata_json"])["recentExchange"] == "\n".join([
        "=== RECENT EXCHANGE (protected) ===", "User: add the parser module",
        "Assistant: I added the parser module.", "---", "=== END RECENT EXCHANGE ===",
    ])


def test_no_recent_exchange_block_is_written_when_there_is_nothing_to_protect():
    b = SessionBuilder()
    exchange(b, "  hi  ", "  ok  ", 0)
    exchange(b, "ok", "Done.", 1)
    b.prompt("thanks", at=100)
    [tail] = plan_session_input(b.build(), Config().resolve("tail_protect")).plans
    meta = json.loads(tail["metadata_json"])
    assert "recentExchange" not in meta and meta["protectedToolIds"] == []
    result = plan_session_input(b.build(), Config().resolve(
        "tail_protect+microcompact(keep_recent=1)"))
    [mc] = [p for p in result.plans if p["step"] == "microcompact"]
    assert "recentExchange" not in json.loads(mc["metadata_json"])
