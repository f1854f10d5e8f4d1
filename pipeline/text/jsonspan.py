"""Exact byte spans of JSON values inside a JSON text, for byte-exact rewriting.

``apply`` replaces a tool payload by splicing new bytes over the exact span of its JSON value,
so every other byte of the line/document (key order, spacing, escapes, number spelling, line
endings) is kept. :func:`find_spans` locates the values at several paths in ONE pass over the
text: it descends only into the members on those paths and skips every other value with a
regular-expression scanner (strings are matched whole, nested containers by counting brackets
between string literals), so the Python loop runs per structural token, never per character.

A path is a sequence of object keys (``str``) and array indices (``int``). The scan stops as
soon as every wanted path is found, so the FIRST member of a duplicated key is the one found
(parsers keep the last): callers that rewrite must re-parse the result and check the value
landed where the parser sees it (``apply`` does, and refuses the file otherwise). The text must
be valid JSON (callers parse it with orjson first); :class:`SpanError` is raised for a path
that does not exist or a malformed text.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import orjson

__all__ = ["SpanError", "find_spans", "find_span", "leading_members", "parse_pointer"]

Path = tuple  # tuple[str | int, ...]

_WS = re.compile(rb"[ \t\n\r]*")
_STRUCT = re.compile(rb'["\[\]{}]')
_SCALAR = re.compile(rb"-?[0-9][0-9.eE+\-]*|true|false|null")


class SpanError(ValueError):
    """A path does not exist in the text, or the text is not the JSON it should be."""


def parse_pointer(pointer: str | None) -> Path:
    """A JSON pointer (``/messages/3/content``) as a path; digits become array indices.

    ``None`` and ``""`` are the whole value. ``~1`` and ``~0`` are unescaped per RFC 6901.
    Whether a digit segment indexes an array or names an object key is settled against the
    parsed value by :func:`resolve`, which accepts both.
    """
    if not pointer:
        return ()
    if not pointer.startswith("/"):
        raise SpanError(f"not a JSON pointer: {pointer!r}")
    parts: list[str | int] = []
    for raw in pointer[1:].split("/"):
        seg = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(seg) if seg.isdigit() else seg)
    return tuple(parts)


def resolve(value, path: Sequence) -> tuple[object, Path]:
    """The value at ``path`` inside a parsed value, and the path with each step typed for it
    (an int step on an object becomes its string key). Raises :class:`SpanError`."""
    typed: list[str | int] = []
    node = value
    for step in path:
        if isinstance(node, dict):
            key = str(step)
            if key not in node:
                raise SpanError(f"no key {key!r} at /{'/'.join(map(str, typed))}")
            node = node[key]
            typed.append(key)
        elif isinstance(node, list):
            if not isinstance(step, int) or not 0 <= step < len(node):
                raise SpanError(f"no index {step!r} at /{'/'.join(map(str, typed))}")
            node = node[step]
            typed.append(step)
        else:
            raise SpanError(f"cannot step into a {type(node).__name__} at "
                            f"/{'/'.join(map(str, typed))}")
    return node, tuple(typed)


def _skip_ws(data: bytes, pos: int) -> int:
    return _WS.match(data, pos).end()


def _skip_string(data: bytes, pos: int) -> int:
    """End of the string literal starting at ``pos``: the next quote not escaped by an odd
    run of backslashes (``bytes.find`` jumps over long payloads at memchr speed)."""
    cursor = pos + 1
    while True:
        quote = data.find(b'"', cursor)
        if quote < 0:
            raise SpanError(f"unterminated string at byte {pos}")
        back = quote - 1
        while data[back] == 0x5C:  # backslash
            back -= 1
        if (quote - 1 - back) % 2 == 0:
            return quote + 1
        cursor = quote + 1


def _skip_value(data: bytes, pos: int) -> int:
    """End offset of the JSON value starting at ``pos`` (no leading whitespace)."""
    if pos >= len(data):
        raise SpanError("unexpected end of JSON text")
    first = data[pos]
    if first == 0x22:  # "
        return _skip_string(data, pos)
    if first in (0x7B, 0x5B):  # { [
        depth = 0
        cursor = pos
        while True:
            match = _STRUCT.search(data, cursor)
            if match is None:
                raise SpanError(f"unterminated container at byte {pos}")
            at = match.start()
            char = data[at]
            if char == 0x22:
                cursor = _skip_string(data, at)
                continue
            if char in (0x7B, 0x5B):
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    return at + 1
            cursor = at + 1
    match = _SCALAR.match(data, pos)
    if match is None:
        raise SpanError(f"unexpected byte {data[pos:pos + 1]!r} at {pos}")
    return match.end()


def _decode_key(raw: bytes) -> str:
    if b"\\" not in raw:
        return raw[1:-1].decode("utf-8")
    return orjson.loads(raw)


_UNKNOWN = object()
_SHORTCUT_MIN_CHARS = 48


class _Walk:
    """State of one :func:`find_spans` pass."""

    def __init__(self, data: bytes, left: int):
        self.data = data
        self.left = left
        self.found: dict[Path, tuple[int, int]] = {}
        self.compact = True      # containers still worth the encode-and-compare shortcut

    def skip(self, pos: int, node) -> int:
        """End of the value at ``pos``; when its parsed value is known, first try the bytes
        orjson would write for it (one memcmp instead of a scan; identical bytes are the same
        JSON token, so the end is exact), then scan."""
        if node is not _UNKNOWN:
            is_str = isinstance(node, str)
            if (is_str and len(node) >= _SHORTCUT_MIN_CHARS) or \
                    (self.compact and isinstance(node, (dict, list)) and node):
                try:
                    encoded = orjson.dumps(node)
                except TypeError:
                    encoded = b""
                if encoded and self.data.startswith(encoded, pos):
                    return pos + len(encoded)
                if not is_str:
                    self.compact = False
        return _skip_value(self.data, pos)

    def member(self, pos: int, trie: dict | None, prefix: Path, step, node) -> int | None:
        """Past the value of an object member / array item at ``pos`` (``step``: its key or
        index) and the whitespace after it: walked along ``trie`` when a wanted path goes
        through it, else skipped. None once every wanted path is found."""
        if trie is None:
            return _skip_ws(self.data, self.skip(pos, node))
        end = self.walk(pos, trie, prefix + (step,), node)
        if end is None or self.left <= 0:
            return None
        return _skip_ws(self.data, end)

    def walk(self, pos: int, trie: dict, prefix: Path, node) -> int | None:
        """Walk the value at ``pos`` along ``trie``, recording spans of terminal paths.

        Returns the end offset of the value, or None once every wanted path is found (the rest
        of the text is not scanned).
        """
        data = self.data
        pos = _skip_ws(data, pos)
        children = trie.get("children")
        if not children:
            end = self.skip(pos, node)
            self.found[prefix] = (pos, end)
            self.left -= 1
            return end
        if trie.get("terminal"):
            # a path and one of its descendants are both wanted: record the outer span too
            end = self.skip(pos, node)
            self.found[prefix] = (pos, end)
            self.left -= 1
            self.walk(pos, dict(trie, terminal=False), prefix, node)
            return None if self.left <= 0 else end
        first = data[pos] if pos < len(data) else None
        if first == 0x7B:  # object
            cursor = _skip_ws(data, pos + 1)
            if data[cursor] == 0x7D:
                return cursor + 1
            while True:
                key_end = _skip_string(data, cursor)
                key = _decode_key(data[cursor:key_end])
                cursor = _skip_ws(data, key_end)
                if data[cursor] != 0x3A:
                    raise SpanError(f"expected ':' at byte {cursor}")
                cursor = _skip_ws(data, cursor + 1)
                child = node.get(key, _UNKNOWN) if isinstance(node, dict) else _UNKNOWN
                cursor = self.member(cursor, children.get(key), prefix, key, child)
                if cursor is None:
                    return None
                char = data[cursor]
                if char == 0x2C:
                    cursor = _skip_ws(data, cursor + 1)
                    continue
                if char == 0x7D:
                    return cursor + 1
                raise SpanError(f"expected ',' or '}}' at byte {cursor}")
        if first == 0x5B:  # array
            cursor = _skip_ws(data, pos + 1)
            if data[cursor] == 0x5D:
                return cursor + 1
            index = 0
            while True:
                child = node[index] if isinstance(node, list) and index < len(node) else _UNKNOWN
                cursor = self.member(cursor, children.get(index), prefix, index, child)
                if cursor is None:
                    return None
                char = data[cursor]
                if char == 0x2C:
                    cursor = _skip_ws(data, cursor + 1)
                    index += 1
                    continue
                if char == 0x5D:
                    return cursor + 1
                raise SpanError(f"expected ',' or ']' at byte {cursor}")
        return self.skip(pos, node)


def find_spans(data: bytes, paths: Iterable[Sequence], *,
               value=_UNKNOWN) -> dict[Path, tuple[int, int]]:
    """``{path: (start, end)}``: byte offsets of the value at each path in the JSON ``data``.

    One pass over ``data``, stopping once every path is found; raises :class:`SpanError` when
    a path is missing (an int step must meet an array, a str step an object). ``value``, the
    parsed ``data`` when the caller has it, lets long strings and compact containers be
    skipped by comparing their encoding instead of scanning them.
    """
    wanted = [tuple(p) for p in paths]
    trie: dict = {}
    for path in wanted:
        node = trie
        for step in path:
            node = node.setdefault("children", {}).setdefault(step, {})
        node["terminal"] = True
    walk = _Walk(data, len(set(wanted)))
    if wanted:
        walk.walk(0, trie, (), value)
    missing = [p for p in wanted if p not in walk.found]
    if missing:
        raise SpanError("no value at /" + "/".join(map(str, missing[0])))
    return {p: walk.found[p] for p in wanted}


def find_span(data: bytes, path: Sequence) -> tuple[int, int]:
    """Byte offsets ``(start, end)`` of the value at ``path`` in ``data``."""
    return find_spans(data, [path])[tuple(path)]


def leading_members(data: bytes) -> dict:
    """The members of the JSON object that ``data`` starts with, parsed, up to the first one
    whose value does not end within ``data`` (a line cut short by a sniffed head: a transcript
    line whose payload runs past it still shows the small members written before it).

    Empty when ``data`` does not start with an object; a member whose value is not valid JSON
    ends the walk as a cut does."""
    members: dict = {}
    pos = _skip_ws(data, 0)
    if data[pos:pos + 1] != b"{":
        return members
    pos += 1
    try:
        while True:
            pos = _skip_ws(data, pos)
            if data[pos:pos + 1] != b'"':
                return members
            end = _skip_string(data, pos)
            key = _decode_key(data[pos:end])
            pos = _skip_ws(data, end)
            if data[pos:pos + 1] != b":":
                return members
            start = _skip_ws(data, pos + 1)
            pos = _skip_value(data, start)
            members[key] = orjson.loads(data[start:pos])
            pos = _skip_ws(data, pos)
            if data[pos:pos + 1] != b",":
                return members
            pos += 1
    except (SpanError, IndexError, ValueError):
        return members
