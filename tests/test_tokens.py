"""The token estimate: Python vs the JavaScript reference (golden fixture from node), Python vs
the SQL macros (10,000+ random strings in one DuckDB query), the lake's stored est_tokens, and
token-aware truncation."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

from tests.helpers.lake import REAL, ingest_paths, rows
from pipeline.core import sqlfiles
from pipeline.core.lake import new_connection
from pipeline.text.tokens import (
    CJK_RANGES, cjk_count, estimate_from_counts, estimate_tokens, truncate_to_tokens,
    utf16_length,
)

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = json.loads((FIXTURES / "estimate_tokens_golden.json").read_text(encoding="utf-8"))["cases"]


def _has_lone_surrogate(text: str | None) -> bool:
    return text is not None and any("\ud800" <= c <= "\udfff" for c in text)


def _sql_estimates(texts: list[str | None]) -> list[tuple[int, int, int]]:
    """(est_tokens, cjk_count, utf16_length) of every text through the SQL macros, one query."""
    con = new_connection()
    try:
        con.register("strings", pa.table({"i": pa.array(range(len(texts)), pa.int64()),
                                          "t": pa.array(texts, pa.string())}))
        got = con.execute("SELECT est_tokens(t), cjk_count(t), utf16_length(t) FROM strings "
                          "ORDER BY i").fetchall()
    finally:
        con.close()
    return got


# -- golden fixture -------------------------------------------------------------------
def test_the_golden_fixture_covers_every_cjk_range_edge():
    names = {case["name"] for case in GOLDEN}
    for lo, hi in CJK_RANGES:
        for cp in (lo, hi, lo - 1, hi + 1):
            assert any(f"U+{cp:04X}" in name for name in names), f"U+{cp:04X} missing"
    assert len(GOLDEN) >= 100


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_python_agrees_with_the_javascript_reference(case):
    text = case["text"]
    assert utf16_length(text) == case["utf16_length"]
    assert cjk_count(text) == case["cjk"]
    assert estimate_tokens(text) == case["tokens"]


def test_sql_agrees_with_the_javascript_reference_on_every_representable_golden_string():
    # Lone surrogates cannot be stored in UTF-8 (DuckDB VARCHAR, Arrow, Parquet), so they are
    # checked in Python only (above).
    cases = [c for c in GOLDEN if not _has_lone_surrogate(c["text"])]
    assert len(cases) == len(GOLDEN) - 3
    got = _sql_estimates([c["text"] for c in cases])
    expected = [(c["tokens"], c["cjk"], c["utf16_length"]) for c in cases]
    assert got == expected


def test_some_hand_worked_values():
    assert estimate_tokens(None) == 0
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcde") == 2            # ceil(5/4)
    assert estimate_tokens("中文") == 3              # ceil(2*1.5)
    assert estimate_tokens("😀") == 1                # 2 UTF-16 units -> ceil(2/4)
    assert estimate_tokens("😀😀😀") == 2            # 6 units
    assert estimate_tokens("ＡＢＣ") == 5            # full-width forms are CJK: ceil(4.5)
    assert estimate_tokens("中a") == 3               # ceil(1.5) + ceil(1/4)
    assert estimate_from_counts(3, 3) == 5
    assert estimate_from_counts(0, 8) == 2


# -- random parity Python vs SQL --------------------------------------------------------
def _random_strings(count: int, seed: int) -> list[str | None]:
    rng = random.Random(seed)
    edges = [cp for lo, hi in CJK_RANGES for cp in (lo, hi, lo - 1, hi + 1)]
    pools = [
        lambda: chr(rng.randint(0x20, 0x7E)),
        lambda: rng.choice("\n\t\r "),
        lambda: chr(rng.choice(edges)),
        lambda: chr(rng.randint(*rng.choice(CJK_RANGES))),
        lambda: chr(rng.randint(0xFF00, 0xFFFD)),                    # full-width/half-width + specials
        lambda: chr(rng.randint(0x1F300, 0x1FAFF)),                  # emoji
        lambda: chr(rng.randint(0x1F44B, 0x1F44F)) + chr(rng.randint(0x1F3FB, 0x1F3FF)),  # skin tones
        lambda: "\U0001F468\u200d\U0001F469\u200d\U0001F467",        # ZWJ sequence
        lambda: chr(0x1F1E6 + rng.randint(0, 25)) + chr(0x1F1E6 + rng.randint(0, 25)),  # flags
        lambda: "\u2764\ufe0f",                                      # variation selector
        lambda: chr(rng.randint(0x0300, 0x036F)),                    # combining marks
        lambda: chr(rng.randint(0x00A0, 0x04FF)),                    # Latin-1 .. Cyrillic
        lambda: chr(rng.randint(0x3040, 0x30FF)),                    # kana (outside the class)
        lambda: chr(rng.randint(0xAC00, 0xD7A3)),                    # hangul (outside)
        lambda: chr(rng.randint(0x20000, 0x2A6DF)),                  # CJK ext B (astral, outside)
    ]
    out: list[str | None] = [None, ""]
    while len(out) < count:
        length = rng.choice([rng.randint(0, 12), rng.randint(0, 80), rng.randint(0, 800)])
        weights = [rng.random() for _ in pools]
        if rng.random() < 0.5:                # mostly-ASCII text, as in most transcripts
            weights[0] *= 50
        picks = rng.choices(pools, weights=weights, k=length)
        out.append("".join(pick() for pick in picks))
    return out


def test_python_and_sql_agree_on_12000_random_strings():
    texts = _random_strings(12_000, seed=20261103)
    got = _sql_estimates(texts)
    expected = [(estimate_tokens(t), cjk_count(t), utf16_length(t)) for t in texts]
    mismatches = [(t, g, e) for t, g, e in zip(texts, got, expected) if g != e]
    assert mismatches == []
    assert sum(1 for t in texts if t and cjk_count(t)) > 5_000   # the mix really has CJK
    assert sum(1 for t in texts if t and utf16_length(t) > len(t)) > 5_000   # and astral chars
    # every branch of the SQL macros (by UTF-8 bytes per character) is exercised
    per_char = [len(t.encode("utf-8")) / len(t) for t in texts if t]
    assert sum(1 for r in per_char if r == 1) > 500                 # ASCII: no regex
    assert sum(1 for r in per_char if 1 < r <= 2) > 500             # delete CJK / astral chars
    assert sum(1 for r in per_char if 2 < r <= 3) > 500             # CJK-dense: delete non-CJK runs
    assert sum(1 for r in per_char if r > 3) > 500                  # astral-dense: delete BMP runs


def test_python_counts_lone_surrogates_as_one_code_unit_like_javascript():
    text = b"a\xed\xa0\x80b".decode("utf-8", "surrogatepass")   # a, U+D800, b
    assert utf16_length(text) == 3
    assert estimate_tokens(text) == 1


# -- the lake's stored est_tokens ---------------------------------------------------------
def _claude_line(**fields) -> str:
    base = {"sessionId": "s-1", "cwd": "/w", "timestamp": "2026-11-01T10:00:00Z",
            "version": "2.0.28"}
    return json.dumps({**base, **fields}, ensure_ascii=False)


EDGE_TEXTS = ["", "中文テキスト、ＦＵＬＬ。", "👍🏽 ok 🇯🇵 👨‍👩‍👧", "e\u0301 \u3000\uffef\ufff0",
              "plain ascii text", "𠀀𝄞 astral"]


def test_stored_est_tokens_agree_with_python_on_every_row(tmp_path):
    lines = []
    for n, text in enumerate(EDGE_TEXTS):
        lines.append(_claude_line(type="user", uuid=f"u{n}", message={"role": "user", "content": text}))
    lines.append(_claude_line(
        type="assistant", uuid="a1", requestId="r1",
        message={"id": "m1", "role": "assistant", "model": "claude-x", "content": [
            {"type": "tool_use", "id": "t1", "name": "Read",
             "input": {"file_path": "/w/中文.md", "note": "😀"}}]}))
    lines.append(_claude_line(
        type="user", uuid="u9",
        message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "結果 👍🏽 done"}]}))
    archive = tmp_path / "archive" / ".claude" / "projects" / "p"
    archive.mkdir(parents=True)
    (archive / "s-1.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    lake, _summary = ingest_paths(tmp_path, tmp_path / "archive")

    messages = rows(lake, "SELECT text, est_tokens, cjk_count FROM messages ORDER BY seq")
    assert [m[0] for m in messages[: len(EDGE_TEXTS)]] == EDGE_TEXTS
    assert [(m[1], m[2]) for m in messages] == [(estimate_tokens(m[0]), cjk_count(m[0])) for m in messages]
    calls = rows(lake, "SELECT input_json, est_tokens FROM tool_calls")
    assert len(calls) == 1 and calls[0][1] == estimate_tokens(calls[0][0])
    results = rows(lake, "SELECT est_tokens FROM tool_results")
    assert results == [(estimate_tokens("結果 👍🏽 done"),)]
    assert rows(lake, sqlfiles.load("checks/select_est_tokens_mismatches")) == []


@pytest.fixture(scope="module")
def real_lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real")
    lake, _summary = ingest_paths(tmp, REAL)
    return lake


def test_stored_est_tokens_agree_with_python_on_the_real_samples(real_lake):
    messages = rows(real_lake, "SELECT text, est_tokens FROM messages")
    calls = rows(real_lake, "SELECT input_json, est_tokens FROM tool_calls")
    assert len(messages) > 100 and len(calls) > 10
    assert [e for t, e in messages if estimate_tokens(t) != e] == []
    assert [e for t, e in calls if estimate_tokens(t) != e] == []
    results = rows(real_lake, """
        SELECT m.text, r.est_tokens FROM tool_results r
        JOIN messages m USING (source_id, generation, session_id, seq, block_no)""")
    assert len(results) > 10
    assert [e for t, e in results if estimate_tokens(t) != e] == []


def test_the_est_tokens_check_is_clean_on_the_real_samples(real_lake):
    assert rows(real_lake, sqlfiles.load("checks/select_est_tokens_mismatches")) == []


def test_the_est_tokens_check_reports_a_row_whose_value_was_altered(real_lake):
    check = sqlfiles.load("checks/select_est_tokens_mismatches")
    con = real_lake.connect()
    try:
        n_messages = con.execute("SELECT count(*) FROM messages").fetchone()[0]
        # a temp view of this cursor over the lake's (whose database may be the attached,
        # read-only ctxlake.duckdb): the other connections keep the lake's messages
        stored, = con.execute("SELECT database_name FROM duckdb_views() "
                              "WHERE view_name = 'messages' AND NOT temporary").fetchone()
        con.execute(f"CREATE TEMP VIEW messages AS SELECT * REPLACE ("
                    f"CASE WHEN seq = (SELECT min(seq) FROM {stored}.main.messages) "
                    f"THEN est_tokens + 1 ELSE est_tokens END AS est_tokens) "
                    f"FROM {stored}.main.messages")
        bad = con.execute(check).fetchall()
    finally:
        con.close()
    assert n_messages > 0
    assert [row[0] for row in bad] == ["messages"] * len(bad) and len(bad) >= 1


# -- truncation ---------------------------------------------------------------------------
def test_truncation_keeps_text_within_budget_unchanged():
    assert truncate_to_tokens(None, 5) == ""
    assert truncate_to_tokens("", 0) == ""
    assert truncate_to_tokens("abcdefgh", 2) == "abcdefgh"          # exactly 2 tokens
    assert truncate_to_tokens("中文", 3) == "中文"


def test_truncation_cuts_to_the_longest_prefix_then_adds_dots():
    assert truncate_to_tokens("abcdefghi", 2) == "abcdefgh..."
    assert truncate_to_tokens("中" * 10, 4) == "中中..."             # 2 -> 3 tokens, 3 -> 5
    assert truncate_to_tokens("中" * 10, 3) == "中中..."
    assert truncate_to_tokens("ab中cd", 2) == "ab..."                # "ab中" = ceil(1.5)+ceil(2/4) = 3
    assert truncate_to_tokens("abcdefghi", 0) == "..."


def test_truncation_never_splits_an_astral_character():
    assert truncate_to_tokens("😀" * 5, 1) == "😀😀..."              # 4 units = 1 token, 6 = 2
    # "a👍" is 3 units (1 token), "a👍🏽" 5 (2 tokens): the cut falls between code points, so a
    # modifier may be dropped (grapheme clusters are not kept whole), never half a pair
    assert truncate_to_tokens("a👍🏽b" * 4, 1) == "a👍..."
    # a surrogate pair carried as two code points (as surrogatepass decodes) is not split
    split_pair = "a" + "\ud83d\ude00" * 2
    assert len(split_pair) == 5
    assert truncate_to_tokens(split_pair, 1) == "a\ud83d\ude00..."


def test_truncation_finds_the_longest_prefix_on_random_strings():
    rng = random.Random(7)
    for text in _random_strings(400, seed=11)[2:]:
        budget = rng.randint(0, max(1, estimate_tokens(text)))
        out = truncate_to_tokens(text, budget)
        if estimate_tokens(text) <= budget:
            assert out == text
            continue
        assert out.endswith("...")
        prefix = out[:-3]
        assert text.startswith(prefix)
        assert estimate_tokens(prefix) <= budget
        assert estimate_tokens(text[: len(prefix) + 1]) > budget


def test_text_counts_used_by_ingest_agree_with_the_reference_counts_on_long_and_short_text():
    import random

    from pipeline.text.tokens import cjk_count, text_counts, utf16_length

    rng = random.Random(20261130)
    alphabet = ("abc →é\n" + "中文漢字" + "\u3000\u303f\u4e00\u9fff\u3400\u4dbf\uf900\ufaff\uff00\uffef"
                + "\u2fff\u3040\u4dc0\ufb00\uffee\ufff0" + "😀👍🏽🇯🇵" + "\ud7ff\ue000")
    samples = ["", "ascii only", "→" * 300, "中" * 1000, "😀" * 500]
    for _ in range(400):
        length = rng.choice([3, 50, 255, 256, 257, 1000, 5000])
        samples.append("".join(rng.choice(alphabet) for _ in range(length)))
    for text in samples:
        assert text_counts(text) == (cjk_count(text), utf16_length(text)), text[:40]
    assert text_counts(None) == (0, 0)
