"""The reference token estimate of docs/policies.md, and token-aware truncation.

``estimate_tokens(text) = ceil(cjk * 1.5) + ceil(non_cjk_len / 4)`` where ``cjk`` counts the
characters in the CJK classes below and ``non_cjk_len`` is the length of the rest in UTF-16
code units: the reference is a JavaScript function (``text.length``, a regex without the ``u``
flag), so an astral character such as an emoji counts 2. Every CJK range is in the BMP, so a
CJK character is one code unit in both languages. The same estimate runs in SQL
(``sql/create_macro_est_tokens.sql``) and fills the ``est_tokens`` columns of the lake; the
golden fixture ``tests/fixtures/estimate_tokens_golden.json`` was produced by the JavaScript
function with node.

This is the *heuristic*: a calibrated estimate, fitted per model against recorded usage,
lives in :mod:`pipeline.stages.calibrate` under a name that says so (``est_tokens_calibrated``).
"""

from __future__ import annotations

import re

import numpy as np

# The CJK classes of docs/policies.md: Unified Ideographs, Extension A, Compatibility Ideographs,
# CJK Symbols and Punctuation, Halfwidth and Fullwidth Forms. All in the BMP.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0xF900, 0xFAFF),
    (0x3000, 0x303F),
    (0xFF00, 0xFFEF),
)
CJK_CLASS = "[" + "".join(f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in CJK_RANGES) + "]"
_CJK = re.compile(CJK_CLASS)

ELLIPSIS = "..."


def cjk_count(text: str | None) -> int:
    """Characters of ``text`` in the CJK classes (0 for ``None``/empty/ASCII)."""
    if not text or text.isascii():
        return 0
    return len(_CJK.findall(text))


def utf16_length(text: str | None) -> int:
    """Length of ``text`` in UTF-16 code units, JavaScript's ``.length``.

    Astral characters count 2. A lone surrogate (only possible in a Python string decoded
    with ``surrogatepass``/``surrogateescape``) counts 1, as in JavaScript.
    """
    if not text:
        return 0
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


# code unit -> 1 when it is in a CJK class (surrogates never are): one gather counts a string
_CJK_UNITS = np.zeros(0x10000, dtype=np.uint8)
for _lo, _hi in CJK_RANGES:
    _CJK_UNITS[_lo:_hi + 1] = 1


def text_counts(text: str | None) -> tuple[int, int]:
    """``(cjk_count, utf16_length)`` of ``text``, the inputs of the estimate, fast on long
    non-ASCII text (ingest measures every message with it; a regex pass was its hot spot)."""
    if not text:
        return 0, 0
    if text.isascii():
        return 0, len(text)
    data = text.encode("utf-16-le", "surrogatepass")
    units = np.frombuffer(data, dtype=np.uint16)
    if len(units) < 256:
        return len(_CJK.findall(text)), len(units)
    if int(units.max()) < 0x3000:
        return 0, len(units)
    return int(np.count_nonzero(_CJK_UNITS[units])), len(units)


def estimate_from_counts(cjk: int, utf16_len: int) -> int:
    """``ceil(cjk * 1.5) + ceil((utf16_len - cjk) / 4)`` in exact integer arithmetic."""
    return -(-cjk * 3 // 2) + -(-(utf16_len - cjk) // 4)


def estimate_tokens(text: str | None) -> int:
    """The docs/policies.md token estimate of one string; 0 for ``None`` or empty.

    Agrees with the JavaScript reference on every string (tests: golden fixture from node,
    and 10,000+ random strings against the SQL macro).
    """
    if not text:
        return 0
    if text.isascii():
        return -(-len(text) // 4)
    return estimate_from_counts(cjk_count(text), utf16_length(text))


def truncate_to_tokens(text: str | None, max_tokens: int) -> str:
    """The longest prefix of ``text`` whose estimate is ``<= max_tokens``, then ``"..."``.

    - Unchanged (no ``"..."``) when the whole text is already within budget; ``None`` -> ``""``.
    - The ``"..."`` is NOT counted towards the budget, as in the reference (docs/policies.md:
      "the longest prefix whose estimate is <= max_tokens, then ..."): the prefix alone is
      within budget, the result may exceed it by the marker's share (at most 1 token).
    - The prefix is found by binary search over code points (the estimate is monotone in the
      prefix length), so it never splits an astral character (a grapheme cluster, e.g. an
      emoji with a skin-tone modifier, may lose its modifier: the cut is per code point). A Python string that carries a
      surrogate pair as two code points (decoded with ``surrogatepass``) is not split
      between them either: the cut moves one code point back.
    - ``max_tokens <= 0`` keeps no prefix (the result is ``"..."`` for a non-empty text).
    """
    if not text:
        return ""
    if estimate_tokens(text) <= max_tokens:
        return text
    if text.isascii():  # estimate = ceil(n / 4): no search needed
        return text[:max(0, max_tokens) * 4] + ELLIPSIS
    lo, hi = 0, len(text)  # estimate(text[:lo]) <= max_tokens < estimate(text[:hi])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if estimate_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid
    if lo > 0 and "\ud800" <= text[lo - 1] <= "\udbff" and "\udc00" <= text[lo] <= "\udfff":
        lo -= 1
    return text[:lo] + ELLIPSIS
