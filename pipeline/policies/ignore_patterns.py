"""``ignore_patterns``: a session filter, not a planning policy.

Patterns are JavaScript regular expressions, as the specification writes them
(``new RegExp(p, "i")``), searched anywhere in a session's first real user message: the first
``is_prompt`` row outside sidechains (not meta, not a tool result, not a slash-command
wrapper). A matching session stays in the lake but is skipped by planning (and summaries);
the skip is counted.

JavaScript semantics on Python's ``re`` (:func:`translate`): named groups ``(?<name>...)`` and
``\\k<name>`` become ``(?P<name>...)``/``(?P=name)``; ``\\d``/``\\w``/``\\b`` are ASCII (JS
without the ``u`` flag), ``\\s`` is JavaScript's whitespace set; ``.`` excludes ``\\n``,
``\\r``, U+2028 and U+2029; ``$`` is the end of the text only (no ``m`` flag); ``[^]`` matches
any character and ``[]`` none; an identity escape such as ``\\A`` is the letter itself; a
``{`` that does not start a quantifier is a literal. Forms JavaScript rejects are invalid here
too (Python's ``(?P<n>...)``, inline flags ``(?i)``), as are the few JavaScript forms Python
cannot express (a variable-width lookbehind).

An invalid pattern is dropped with an :class:`~pipeline.core.errors.IgnorePatternWarning` that
names it (its position and text) and why; the other patterns still apply and the run goes on,
as the specification's ``try { new RegExp } catch { null }`` does.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Iterable

from pipeline.core.errors import IgnorePatternWarning
from pipeline.policies.base import ParamError

NAME = "ignore_patterns"

# JavaScript's \s: WhiteSpace and LineTerminator code points (ECMA-262)
JS_SPACE = ("\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f"
            "\\u3000\\ufeff")
_CLASS_ESCAPES = {"d": "0-9", "w": "A-Za-z0-9_", "s": JS_SPACE}
_SIMPLE_ESCAPES = {"n": "\\n", "r": "\\r", "t": "\\t", "v": "\\x0b", "f": "\\x0c"}
_QUANTIFIER = re.compile(r"\{\d+(?:,\d*)?\}")
_GROUP_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


class JsPatternError(ValueError):
    """A pattern JavaScript's ``RegExp`` rejects (or Python cannot express)."""


@dataclass(frozen=True)
class IgnorePattern:
    """One compiled pattern: ``pattern`` is the text as configured (JavaScript syntax)."""

    pattern: str
    regex: re.Pattern

    def search(self, text: str):
        return self.regex.search(text)


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    """Translate the escape starting at ``pattern[i] == '\\\\'``; returns (python, next index)."""
    if i + 1 >= len(pattern):
        raise JsPatternError("\\ at end of pattern")
    ch = pattern[i + 1]
    nxt = i + 2
    if ch in "dws":
        inner = _CLASS_ESCAPES[ch]
        return (inner if in_class else f"[{inner}]"), nxt
    if ch in "DWS":
        if in_class:   # a negated set inside a class: only Python's own escapes can say it
            return {"D": "\\D", "W": "\\W", "S": "\\S"}[ch], nxt
        return f"[^{_CLASS_ESCAPES[ch.lower()]}]", nxt
    if ch == "b":
        return ("\\x08" if in_class else r"(?:(?<=[A-Za-z0-9_])(?![A-Za-z0-9_])|"
                r"(?<![A-Za-z0-9_])(?=[A-Za-z0-9_]))"), nxt
    if ch == "B":
        if in_class:
            return "B", nxt
        return r"(?:(?<=[A-Za-z0-9_])(?=[A-Za-z0-9_])|(?<![A-Za-z0-9_])(?![A-Za-z0-9_]))", nxt
    if ch in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[ch], nxt
    if ch == "0" and not (nxt < len(pattern) and pattern[nxt].isdigit()):
        return "\\x00", nxt
    if ch == "c" and nxt < len(pattern) and pattern[nxt].isalpha():
        return f"\\x{ord(pattern[nxt]) % 32:02x}", nxt + 1
    if ch == "x" and re.fullmatch(r"[0-9A-Fa-f]{2}", pattern[nxt:nxt + 2]):
        return "\\x" + pattern[nxt:nxt + 2], nxt + 2
    if ch == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", pattern[nxt:nxt + 4]):
        return "\\u" + pattern[nxt:nxt + 4], nxt + 4
    if ch == "k" and not in_class and pattern.startswith("<", nxt):
        end = pattern.find(">", nxt)
        name = pattern[nxt + 1:end] if end > 0 else ""
        if not _GROUP_NAME.fullmatch(name):
            raise JsPatternError("invalid named reference")
        return f"(?P={name.replace('$', '_S_')})", end + 1
    if ch.isdigit() and not in_class:
        j = nxt
        while j < len(pattern) and pattern[j].isdigit():
            j += 1
        return f"(?:\\{pattern[i + 1:j]})", j          # a backreference
    # identity escape: the character itself (JS without the u flag: \A is "A", \/ is "/")
    return re.escape(ch), nxt


def translate(pattern: str) -> str:
    """The Python ``re`` spelling of a JavaScript regex (see the module docstring).

    Raises :class:`JsPatternError` for a pattern JavaScript rejects."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            text, i = _escape(pattern, i, in_class=False)
            out.append(text)
            continue
        if ch == "[":
            text, i = _char_class(pattern, i)
            out.append(text)
            continue
        if ch == "(":
            if pattern.startswith("(?", i):
                rest = pattern[i + 2:]
                if rest.startswith(("<=", "<!", ":", "=", "!")):
                    length = 4 if rest.startswith(("<=", "<!")) else 3
                    out.append(pattern[i:i + length])
                    i += length
                    continue
                if rest.startswith("<"):
                    end = rest.find(">")
                    name = rest[1:end] if end > 0 else ""
                    if not _GROUP_NAME.fullmatch(name):
                        raise JsPatternError("invalid capture group name")
                    out.append(f"(?P<{name.replace('$', '_S_')}>")
                    i += 2 + end + 1
                    continue
                raise JsPatternError(f"invalid group '(?{rest[:1]}'")
            out.append("(")
            i += 1
            continue
        if ch == "{":
            match = _QUANTIFIER.match(pattern, i)
            if match:
                out.append(match.group(0))
                i = match.end()
            else:
                out.append("\\{")
                i += 1
            continue
        if ch == "}":
            out.append("\\}")
            i += 1
            continue
        if ch == ".":
            out.append("[^\\n\\r\\u2028\\u2029]")
            i += 1
            continue
        if ch == "$":
            out.append("\\Z")
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _char_class(pattern: str, i: int) -> tuple[str, int]:
    """Translate ``[...]`` starting at ``pattern[i] == '['``."""
    j = i + 1
    negated = pattern.startswith("^", j)
    if negated:
        j += 1
    if pattern.startswith("]", j):          # JS: [] matches nothing, [^] anything
        return ("[\\s\\S]" if negated else "(?!)"), j + 1
    parts: list[str] = []
    n = len(pattern)
    while j < n and pattern[j] != "]":
        ch = pattern[j]
        if ch == "\\":
            text, j = _escape(pattern, j, in_class=True)
            parts.append(text)
            continue
        # literal in JS; Python would read them as set operations or a nested set
        parts.append("\\" + ch if ch in "[&~|" else ch)
        j += 1
    if j >= n:
        raise JsPatternError("unterminated character class")
    return "[" + ("^" if negated else "") + "".join(parts) + "]", j + 1


def compile_one(pattern: str) -> IgnorePattern:
    """One JavaScript pattern, case-insensitive; :class:`JsPatternError` when invalid."""
    python = translate(pattern)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            regex = re.compile(python, re.IGNORECASE)
    except (re.error, FutureWarning, DeprecationWarning) as error:
        raise JsPatternError(str(error)) from None
    return IgnorePattern(pattern, regex)


def compile_patterns(patterns: Iterable[str], *, key: str = "ignore_patterns"
                     ) -> list[IgnorePattern]:
    """The valid patterns, compiled. A non-string entry is a :class:`ParamError` (a config
    mistake); an invalid regex is dropped with an :class:`IgnorePatternWarning` naming it."""
    compiled = []
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str):
            raise ParamError(f"{key}[{index}]", f"must be a string, got {type(pattern).__name__}")
        try:
            compiled.append(compile_one(pattern))
        except JsPatternError as error:
            warnings.warn(IgnorePatternWarning(
                f"{key}[{index}]: invalid regex {pattern!r} ({error}): dropped, the other "
                "patterns still apply"), stacklevel=1)
    return compiled


def matching_pattern(first_user_text: str | None, compiled: list[IgnorePattern]) -> str | None:
    """The first pattern (as configured) that matches the session's first real user
    message, else None."""
    if not first_user_text or not compiled:
        return None
    for pattern in compiled:
        if pattern.search(first_user_text):
            return pattern.pattern
    return None
