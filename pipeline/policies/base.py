"""Shared types of the compaction policies: one session's tables in, plan rows out.

A policy is a pure function ``plan_session(session: SessionInput, params) -> PolicyOutput``:
no I/O, no globals, no clock. Everything it may know is in :class:`SessionInput`:

- ``messages``: rows of the ``messages`` view for ONE session, inline sidechain rows removed
  (see :mod:`pipeline.stages.plan`), any order (sorted by ``seq`` here).
- ``tool_calls`` / ``tool_results``: that session's rows of those views (``tool_results``
  has no text: a result's text is the ``messages`` row with the same ``seq``).
- ``call_paths``: request-side paths of each call, one row per (call ``seq``, path) with the
  path's managed-memory class (``project``/``user``/``team``/``none``/``escape``), computed by
  the plan stage with :mod:`pipeline.text.paths` and :mod:`pipeline.text.memory` (the only part that
  touches the filesystem, so it is done outside the policy).
- ``info``: session facts (format, project, git branch).
- ``prior``: what earlier steps of a chain already decided (their evictions, tail protection).

Arrow tables or polars DataFrames are accepted. A policy reads them through
:meth:`SessionInput.view`, a per-session index of plain Python lists built once and shared by
every policy of a run (derived from the tables only, so purity holds).

Time model (shared with replay)
-------------------------------
- An *assistant turn* is one API call: assistant rows of kind text/thinking/tool_use grouped by
  ``api_call_id`` (first appearance opens the turn); rows without an id join the turn of the
  assistant row right before them, else open a new one. The turn starts at its first row's
  seq.
- The context an API call sees is every message with ``seq`` < its turn start (after the last
  compaction boundary recorded in the transcript), with every eviction whose ``at_seq`` <=
  the turn start applied.
- An eviction ``at_seq`` is the decision point: a turn start (size, context editing,
  masking), a user prompt (idle), a requested point (force/suggestion) or, for
  ``payload_prune``, the result's own seq (a payload is pruned as it arrives). A decision at
  ``at_seq`` uses only messages with ``seq <= at_seq`` and evicts only items with ``seq <
  at_seq`` (prune: ``seq == at_seq``).

Already-compacted items (the transcript already holds a placeholder or the prune marker, or a
recorded ``microcompact_boundary`` listed the id, or an earlier chain step evicted it) are never
candidates again, which makes re-planning a compacted transcript a no-op.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable

import orjson
import pyarrow as pa

from pipeline.formats.base import tool_family as _tool_family

# ---------------------------------------------------------------------------------------
# Replacement texts (documented in docs/policies.md / pipeline.policies docs)
# ---------------------------------------------------------------------------------------
CLEARED_TEXT = "[Old tool result content cleared]"            # microcompact, strategic
CONTEXT_EDIT_TEXT = "[Tool result cleared by context editing]"  # context_editing
CLEARED_INPUT_TEXT = "{}"                                        # context_editing clear_tool_inputs
PRUNE_MARKER = "[ctxlake compaction]"                           # payload_prune (idempotency guard)
MASK_TEMPLATE = "Old environment output: ({lines} lines omitted)"  # observation_masking (SWE-agent)
_MASK_RE = re.compile(r"^Old environment output: \(\d+ lines omitted\)$")

PROTECTED_MEMORY_CLASSES = frozenset({"project", "user", "team"})


def compaction_state_of(text: str | None) -> str | None:
    """``cleared`` / ``pruned`` / ``masked`` when ``text`` is one of our replacements, else None."""
    if not text:
        return None
    if text == CLEARED_TEXT or text == CONTEXT_EDIT_TEXT:
        return "cleared"
    if len(text) < 64 and _MASK_RE.match(text):
        return "masked"
    if PRUNE_MARKER in text:
        return "pruned"
    return None


def mask_text(text: str | None) -> str:
    """The observation-masking placeholder for ``text`` (its line count, SWE-agent style)."""
    lines = 0 if not text else text.count("\n") + (0 if text.endswith("\n") else 1)
    return MASK_TEMPLATE.format(lines=lines)


class ParamError(ValueError):
    """A policy parameter has a value outside its range (config turns it into ConfigError)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def require_at_least(params: object, **minimums: int) -> None:
    """Raise :class:`ParamError` for the first of ``params``' fields (in the order given) that
    is below its minimum: "must be >= N"."""
    for key, minimum in minimums.items():
        if getattr(params, key) < minimum:
            raise ParamError(key, f"must be >= {minimum}")


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    format: str | None = None
    project: str | None = None
    git_branch: str | None = None
    parent_session_id: str | None = None
    first_user_text: str | None = None


@dataclass(frozen=True)
class PriorEviction:
    """An item an earlier chain step already evicted: keyed by the item's seq."""

    seq: int
    action: str           # clear | prune | clear_input
    at_seq: int
    tokens_after: int
    chars_after: int
    bytes_after: int


@dataclass(frozen=True)
class Prior:
    """State handed from earlier chain steps to later ones."""

    evictions: tuple[PriorEviction, ...] = ()
    tail_pairs: int = 0                 # > 0 when a tail_protect step ran before
    tail_min_user_chars: int = 10
    tail_min_assistant_chars: int = 20
    tail_block_tokens: int = 150


EMPTY_PRIOR = Prior()


def _to_arrow(table: Any) -> pa.Table | None:
    if table is None:
        return None
    if isinstance(table, pa.Table):
        return table
    to_arrow = getattr(table, "to_arrow", None)   # polars DataFrame
    if to_arrow is not None:
        return to_arrow()
    raise TypeError(f"expected an Arrow table or a polars DataFrame, got {type(table).__name__}")


@dataclass(frozen=True, eq=False)
class SessionInput:
    """One session's tables (see the module docstring)."""

    session_id: str
    messages: Any
    tool_calls: Any = None
    tool_results: Any = None
    call_paths: Any = None
    info: SessionInfo | None = None
    prior: Prior = EMPTY_PRIOR
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def view(self) -> "SessionView":
        """The session's index (built once, cached; ``prior`` is applied on top per call)."""
        base = self._cache.get("view")
        if base is None:
            lists = self._cache.pop("lists", None)
            if lists is None:
                lists = tuple(table_lists(_to_arrow(t), sort=True) if t is not None else None
                              for t in (self.messages, self.tool_calls, self.tool_results,
                                        self.call_paths))
            base = build_view(self.session_id, *lists, self.info or SessionInfo(self.session_id))
            self._cache["view"] = base
        return base.with_prior(self.prior)

    def with_prior(self, prior: Prior) -> "SessionInput":
        """The same session seen by a later chain step (shares the cached index)."""
        clone = SessionInput(self.session_id, self.messages, self.tool_calls, self.tool_results,
                             self.call_paths, self.info, prior)
        clone._cache.update(self._cache)
        return clone


# ---------------------------------------------------------------------------------------
# The per-session index
# ---------------------------------------------------------------------------------------
@dataclass(slots=True)
class Call:
    idx: int                 # position in view.calls
    seq: int
    call_id: str | None
    tool_name: str | None
    family: str
    input_json: str | None
    input_tokens: int
    prov: tuple              # (source_id, line_no, json_path, block_no)
    cwd: str | None = None
    known_paths: tuple[str, ...] | None = None   # from call_paths; None: derived on demand
    memory_classes: tuple[str, ...] = ()
    id_count: int = 1        # request-side calls in the session with this call id
    turn: int = -1
    input_clearable: bool = True   # the format keeps the input in a field of its own

    @property
    def paths(self) -> tuple[str, ...]:
        """Request-side paths (``call_paths`` when given, else :func:`pipeline.text.paths.request_paths`
        of the input: a pure function)."""
        if self.known_paths is None:
            from pipeline.text.memory import home_for_cwd
            from pipeline.text.paths import request_paths

            self.known_paths = tuple(request_paths(self.tool_name, self.input_json, self.cwd,
                                                   home=home_for_cwd(self.cwd)))
        return self.known_paths


@dataclass(slots=True)
class Item:
    """A tool result of the session (the unit every policy clears or prunes)."""

    idx: int                 # position in view.items
    msg: int                 # position in the message arrays
    seq: int
    call_id: str | None
    tool_name: str | None
    family: str
    is_error: bool
    shape: str | None
    nbytes: int
    chars: int
    tokens: int
    text: str
    prov: tuple
    call: Call | None
    turn: int                # owning assistant turn (the call's; else the last turn before)
    state: str | None        # already compacted in the transcript: cleared|pruned|masked
    gone_at: int | None      # seq from which it is compacted (transcript/boundary/prior step)
    gone_tokens: int = 0     # its tokens once compacted
    gone_chars: int = 0
    gone_bytes: int = 0
    form: str = "text"       # what nbytes measures: the text, or the JSON of a payload with media
    payload_sha256: str | None = None   # sha256 of that form

    @property
    def paths(self) -> tuple[str, ...]:
        return self.call.paths if self.call is not None else ()

    @property
    def memory_protected(self) -> bool:
        """docs/policies.md managed-memory preservation predicate (read family only)."""
        call = self.call
        return (self.family == "read" and call is not None and self.call_id is not None
                and call.id_count == 1 and len(call.memory_classes) > 0
                and all(c in PROTECTED_MEMORY_CLASSES for c in call.memory_classes))


@dataclass(slots=True)
class Turn:
    index: int
    start: int               # seq of its first row
    ts: int | None           # microseconds since epoch of its first row


@dataclass(slots=True)
class Exchange:
    """A user prompt (consecutive prompt rows) and everything until the next prompt."""

    start: int               # seq of the first prompt row
    end: int                 # seq of the next exchange's start (exclusive), or +inf
    user_text: str
    assistant_text: str


_INF = 1 << 62


# Defaults for nulls in the columns policies read (filled vectorised in table_lists).
FILL_DEFAULTS = {"text": "", "is_prompt": False, "est_tokens": 0, "is_error": False,
                 "payload_bytes": 0, "payload_chars": 0}


# The columns the index reads (others stay in the Arrow tables, unconverted).
VIEW_COLUMNS = frozenset({
    "seq", "role", "kind", "subtype", "text", "timestamp", "is_prompt", "call_id", "est_tokens",
    "api_call_id", "compaction_state", "call_id", "tool_name", "tool_family", "input_json",
    "cwd", "id_calls", "source_id", "line_no", "json_path", "block_no", "is_error",
    "payload_shape", "payload_form", "payload_bytes", "payload_chars", "payload_sha256", "path",
    "memory_class",
})


def table_lists(table: pa.Table | None, *, sort: bool = False,
                columns: frozenset[str] = VIEW_COLUMNS) -> dict[str, list] | None:
    """Columns of ``table`` the index reads, as Python lists (timestamps as microseconds since
    the epoch, nulls of :data:`FILL_DEFAULTS` columns filled); ``sort``: by ``seq`` first."""
    if table is None:
        return None
    import pyarrow.compute as pc   # here: a night with nothing new imports the policies only

    if sort and table.num_rows > 1 and "seq" in table.column_names:
        seq = table.column("seq")
        if not pc.all(pc.greater_equal(seq.slice(1), seq.slice(0, len(seq) - 1))).as_py():
            table = table.sort_by([("seq", "ascending")])
    out: dict[str, list] = {}
    for name in table.column_names:
        if name not in columns:
            continue
        values = table.column(name)
        if pa.types.is_timestamp(values.type):
            values = pc.cast(pc.cast(values, pa.timestamp("us", tz="UTC")), pa.int64())
        default = FILL_DEFAULTS.get(name)
        if default is not None and values.null_count:
            values = pc.fill_null(values, default)
        out[name] = values.to_pylist()
    out["__len__"] = [table.num_rows]
    return out


def slice_lists(lists: dict[str, list], start: int, length: int) -> dict[str, list]:
    out = {name: values[start:start + length] for name, values in lists.items()
           if name != "__len__"}
    out["__len__"] = [length]
    return out


def _get(lists: dict[str, list] | None, name: str, default: Any = None) -> list:
    if lists is None:
        return []
    values = lists.get(name)
    if values is None:
        return [default] * lists["__len__"][0]
    return values


class SessionView:
    """Plain-list index of one session (see :meth:`SessionInput.view`)."""

    def __init__(self, session_id: str, info: SessionInfo):
        self.session_id = session_id
        self.info = info
        self.prior = EMPTY_PRIOR
        # message arrays (sorted by seq)
        self.seq: list[int] = []
        self.role: list[str | None] = []
        self.kind: list[str | None] = []
        self.subtype: list[str | None] = []
        self.text: list[str] = []
        self.ts: list[int | None] = []
        self.is_prompt: list[bool] = []
        self.tokens: list[int] = []
        self.msg_call_id: list[str | None] = []
        self.prefix_tokens: list[int] = [0]
        self.calls: list[Call] = []
        self.items: list[Item] = []
        self.turns: list[Turn] = []
        self.turn_of_msg: list[int] = []          # turn index of each message (-1 before the first)
        self.context_starts: list[int] = []       # seqs of recorded compaction boundaries
        self.item_by_seq: dict[int, Item] = {}
        self.call_by_seq: dict[int, Call] = {}
        self.item_seqs: list[int] = []
        self.turn_starts: list[int] = []
        # (at_seq, item seq, token delta): recorded microcompact clears and prior chain steps
        self._events: list[tuple[int, int, int]] = []
        self._event_ats: list[int] = []
        self._event_prefix: list[int] = [0]
        self._exchanges: list[Exchange] | None = None
        self._exchange_starts: list[int] = []

    # -- derived ---------------------------------------------------------------------------
    def with_prior(self, prior: Prior) -> "SessionView":
        """This index as a later chain step sees it: prior evictions marked as gone."""
        if prior is self.prior:
            return self
        clone = object.__new__(SessionView)
        clone.__dict__.update(self.__dict__)
        clone.prior = prior
        if not prior.evictions:
            return clone
        clone.items = list(self.items)
        clone.item_by_seq = dict(self.item_by_seq)
        events = list(self._events)
        for ev in prior.evictions:
            if ev.action == "clear_input":
                call = clone.call_by_seq.get(ev.seq)
                if call is not None:
                    events.append((ev.at_seq, call.seq, ev.tokens_after - call.input_tokens))
                continue
            item = clone.item_by_seq.get(ev.seq)
            if item is None or item.gone_at is not None:
                continue
            copy = Item(**{name: getattr(item, name) for name in Item.__slots__})
            copy.gone_at, copy.gone_tokens = ev.at_seq, ev.tokens_after
            copy.gone_chars, copy.gone_bytes = ev.chars_after, ev.bytes_after
            clone.items[copy.idx] = copy
            clone.item_by_seq[copy.seq] = copy
            events.append((ev.at_seq, item.seq, ev.tokens_after - item.tokens))
        clone._set_events(events)
        return clone

    def _set_events(self, events: list[tuple[int, int, int]]) -> None:
        events.sort()
        self._events = events
        self._event_ats = [e[0] for e in events]
        self._event_prefix = [0]
        for e in events:
            self._event_prefix.append(self._event_prefix[-1] + e[2])

    def context_start(self, at_seq: int) -> int:
        """Seq from which messages are in the live context at ``at_seq`` (after the last
        recorded compaction boundary before it)."""
        i = bisect.bisect_left(self.context_starts, at_seq) - 1
        return self.context_starts[i] if i >= 0 else -_INF

    def context_tokens(self, at_seq: int) -> int:
        """Estimated tokens of the messages with ``seq < at_seq`` in the live context, with
        the transcript's recorded clears and earlier chain steps (decided at or before
        ``at_seq``) applied."""
        start = self.context_start(at_seq)
        hi = bisect.bisect_left(self.seq, at_seq)
        lo = bisect.bisect_left(self.seq, start)
        total = self.prefix_tokens[hi] - self.prefix_tokens[lo]
        events = self._events
        if events:
            j = bisect.bisect_right(self._event_ats, at_seq)
            total += self._event_prefix[j]
            k = j - 1
            while k >= 0 and events[k][0] == at_seq:        # a prune decided at the item itself
                if events[k][1] >= at_seq:
                    total -= events[k][2]
                k -= 1
            if start > -_INF:                               # rare: a recorded compaction boundary
                total -= sum(d for _, item_seq, d in events[:j] if item_seq < start)
        return total

    def time_at(self, at_seq: int) -> datetime | None:
        """Timestamp of the message at ``at_seq`` (or the nearest earlier one that has one)."""
        i = min(bisect.bisect_right(self.seq, at_seq) - 1, len(self.seq) - 1)
        while i >= 0:
            if self.ts[i] is not None:
                return datetime.fromtimestamp(self.ts[i] / 1e6, tz=timezone.utc)
            i -= 1
        return None

    def live(self, item: Item, at_seq: int) -> bool:
        """In the context at ``at_seq`` and never compacted by the transcript or a prior step."""
        return item.gone_at is None and item.seq < at_seq and item.seq >= self.context_start(at_seq)

    def items_before(self, at_seq: int) -> list[Item]:
        """Items with ``seq < at_seq`` inside the live context window at ``at_seq``."""
        lo = bisect.bisect_left(self.item_seqs, self.context_start(at_seq))
        hi = bisect.bisect_left(self.item_seqs, at_seq)
        return self.items[lo:hi]

    def turn_of_seq(self, seq: int) -> int:
        """Index of the last turn starting at or before ``seq`` (-1 if none)."""
        return bisect.bisect_right(self.turn_starts, seq) - 1

    # -- exchanges / tail protection --------------------------------------------------------
    def exchanges(self) -> list[Exchange]:
        if self._exchanges is not None:
            return self._exchanges
        out: list[Exchange] = []
        user: list[str] = []
        assistant: list[str] = []
        start = None
        last_was_prompt = False
        for i, s in enumerate(self.seq):
            if self.is_prompt[i]:
                if not last_was_prompt:
                    if start is not None:
                        out.append(Exchange(start, s, "\n".join(user).strip(),
                                            "\n".join(assistant).strip()))
                    start, user, assistant = s, [], []
                user.append(self.text[i])
                last_was_prompt = True
                continue
            if self.role[i] == "assistant" and self.kind[i] == "text" and start is not None:
                assistant.append(self.text[i])
            if self.role[i] in ("assistant", "tool") or self.kind[i] in ("tool_use", "tool_result"):
                last_was_prompt = False
        if start is not None:
            out.append(Exchange(start, _INF, "\n".join(user).strip(),
                                "\n".join(assistant).strip()))
        self._exchanges = out
        self._exchange_starts = [e.start for e in out]
        return out

    def tail_exchanges(self, at_seq: int, pairs: int, min_user: int, min_assistant: int
                       ) -> list[Exchange]:
        """The last ``pairs`` meaningful exchanges starting before ``at_seq`` (oldest first).

        An exchange whose user text has < ``min_user`` chars AND whose assistant text has
        < ``min_assistant`` chars is skipped (not counted, not protected); both texts are
        trimmed first (the specification's ``.trim()``: a whitespace-padded "hi" is 2
        characters). Assistant text is taken up to ``at_seq`` only (a policy knows the past).
        """
        if pairs <= 0:
            return []
        chosen: list[Exchange] = []
        exchanges = self.exchanges()
        k = bisect.bisect_left(self._exchange_starts, at_seq) - 1
        while k >= 0 and len(chosen) < pairs:
            ex = exchanges[k]
            if ex.end > at_seq:   # the exchange in progress: only its past
                ex = Exchange(ex.start, ex.end, ex.user_text, self._assistant_text(ex.start, at_seq))
            if len(ex.user_text) >= min_user or len(ex.assistant_text) >= min_assistant:
                chosen.append(ex)
            k -= 1
        chosen.reverse()
        return chosen

    def _assistant_text(self, start: int, stop: int) -> str:
        lo, hi = bisect.bisect_left(self.seq, start), bisect.bisect_left(self.seq, stop)
        return "\n".join(self.text[i] for i in range(lo, hi)
                         if self.role[i] == "assistant" and self.kind[i] == "text").strip()

    def tail_protected(self, at_seq: int) -> set[int]:
        """Seqs of items inside the tail exchanges at ``at_seq`` (empty without tail_protect)."""
        prior = self.prior
        if prior.tail_pairs <= 0:
            return set()
        out: set[int] = set()
        for ex in self.tail_exchanges(at_seq, prior.tail_pairs, prior.tail_min_user_chars,
                                      prior.tail_min_assistant_chars):
            lo = bisect.bisect_left(self.item_seqs, ex.start)
            hi = bisect.bisect_left(self.item_seqs, min(ex.end, at_seq))
            out.update(self.item_seqs[lo:hi])
        return out

    def recent_exchange_block(self, at_seq: int, pairs: int, min_user: int, min_assistant: int,
                              max_tokens: int) -> str | None:
        """The docs/policies.md "recent exchange" block at ``at_seq``: None when no exchange is
        meaningful (the specification writes no block then). Each message is its trimmed
        text truncated to ``max_tokens`` estimated tokens."""
        from pipeline.text.tokens import truncate_to_tokens

        exchanges = self.tail_exchanges(at_seq, pairs, min_user, min_assistant)
        if not exchanges:
            return None
        lines = ["=== RECENT EXCHANGE (protected) ==="]
        for ex in exchanges:
            lines.append("User: " + truncate_to_tokens(ex.user_text, max_tokens))
            lines.append("Assistant: " + truncate_to_tokens(ex.assistant_text, max_tokens))
            lines.append("---")
        lines.append("=== END RECENT EXCHANGE ===")
        return "\n".join(lines)


def _is_turn_row(role: str | None, kind: str | None) -> bool:
    return role == "assistant" and kind in ("text", "thinking", "tool_use")


def _input_clearable(format_name: str | None):
    """The session format's :meth:`Reader.input_clearable` (every input, for an unknown
    format or a session built by hand)."""
    from pipeline.formats import READERS

    reader = READERS.get(format_name or "")
    return reader.input_clearable if reader is not None else (lambda call_id, tool_name: True)


def build_view(session_id: str, messages: dict[str, list], tool_calls: dict[str, list] | None,
               tool_results: dict[str, list] | None, call_paths: dict[str, list] | None,
               info: SessionInfo) -> SessionView:
    """Index one session (columns as lists sorted by seq, see :func:`table_lists`; linear)."""
    view = SessionView(session_id, info)
    n = messages["__len__"][0]
    view.seq = _get(messages, "seq")
    view.role = _get(messages, "role")
    view.kind = _get(messages, "kind")
    view.subtype = _get(messages, "subtype")
    view.text = _get(messages, "text", "")
    view.ts = _get(messages, "timestamp")
    view.is_prompt = _get(messages, "is_prompt", False)
    view.msg_call_id = _get(messages, "call_id")
    view.tokens = _get(messages, "est_tokens", 0)
    api = _get(messages, "api_call_id")
    m_state = _get(messages, "compaction_state")

    prefix = view.prefix_tokens
    acc = 0
    for t in view.tokens:
        acc += t
        prefix.append(acc)

    # -- turns ---------------------------------------------------------------------------
    turn_of_msg = [-1] * n
    by_api: dict[str, int] = {}
    current = -1
    prev_turn_row = False
    recorded_clears: list[tuple[int, list]] = []
    for i in range(n):
        role, kind = view.role[i], view.kind[i]
        if _is_turn_row(role, kind):
            key = api[i]
            if key is not None:
                t = by_api.get(key)
                if t is None:
                    t = len(view.turns)
                    view.turns.append(Turn(t, view.seq[i], view.ts[i]))
                    by_api[key] = t
            elif prev_turn_row and current >= 0:
                t = current
            else:
                t = len(view.turns)
                view.turns.append(Turn(t, view.seq[i], view.ts[i]))
            current = t
            prev_turn_row = True
            turn_of_msg[i] = t
        else:
            prev_turn_row = False
            turn_of_msg[i] = current
            if kind == "boundary":
                if view.subtype[i] == "microcompact_boundary":
                    recorded_clears.append((view.seq[i], _compacted_ids(view.text[i])))
                else:
                    view.context_starts.append(view.seq[i])
    view.turn_of_msg = turn_of_msg
    turn_starts = view.turn_starts = [t.start for t in view.turns]

    def turn_at(seq: int) -> int:
        return bisect.bisect_right(turn_starts, seq) - 1

    # -- calls ---------------------------------------------------------------------------
    paths_by_seq: dict[int, tuple[list[str], list[str]]] = {}
    if call_paths is not None and call_paths["__len__"][0]:
        for cseq, path, mclass in zip(_get(call_paths, "seq"), _get(call_paths, "path"),
                                      _get(call_paths, "memory_class")):
            entry = paths_by_seq.setdefault(cseq, ([], []))
            if path is not None:
                entry[0].append(path)
                entry[1].append(mclass or "none")
    id_counts: dict[str, int] = {}
    calls_by_id: dict[str, list[Call]] = {}
    if tool_calls is not None and tool_calls["__len__"][0]:
        c_seq = _get(tool_calls, "seq")
        c_id = _get(tool_calls, "call_id")
        c_name = _get(tool_calls, "tool_name")
        c_family = _get(tool_calls, "tool_family")
        c_input = _get(tool_calls, "input_json")
        c_tokens = _get(tool_calls, "est_tokens", 0)
        c_cwd = _get(tool_calls, "cwd")
        c_idn = _get(tool_calls, "id_calls")
        c_source = _get(tool_calls, "source_id")
        c_line = _get(tool_calls, "line_no")
        c_path = _get(tool_calls, "json_path")
        c_block = _get(tool_calls, "block_no")
        clearable = _input_clearable(info.format)
        for j in range(tool_calls["__len__"][0]):
            known = paths_by_seq.get(c_seq[j])
            call = Call(j, c_seq[j], c_id[j], c_name[j], c_family[j] or _tool_family(c_name[j]),
                        c_input[j], c_tokens[j], (c_source[j], c_line[j], c_path[j], c_block[j]),
                        c_cwd[j] or info.project, tuple(known[0]) if known else None,
                        tuple(known[1]) if known else (), 1, turn_at(c_seq[j]),
                        clearable(c_id[j], c_name[j]))
            view.calls.append(call)
            view.call_by_seq[call.seq] = call
            if call.call_id is not None:
                id_counts[call.call_id] = id_counts.get(call.call_id, 0) + 1
                calls_by_id.setdefault(call.call_id, []).append(call)
        for j, call in enumerate(view.calls):
            if call.call_id is not None:
                # id_calls (from SQL) also counts calls left out with sidechain rows
                call.id_count = max(id_counts[call.call_id], c_idn[j] or 0)

    # -- items (tool results) -------------------------------------------------------------
    msg_pos = {s: i for i, s in enumerate(view.seq)} if tool_results is not None else {}
    if tool_results is not None and tool_results["__len__"][0]:
        r_seq = _get(tool_results, "seq")
        r_id = _get(tool_results, "call_id")
        r_name = _get(tool_results, "tool_name")
        r_err = _get(tool_results, "is_error", False)
        r_shape = _get(tool_results, "payload_shape")
        r_bytes = _get(tool_results, "payload_bytes", 0)
        r_chars = _get(tool_results, "payload_chars", 0)
        r_tokens = _get(tool_results, "est_tokens", 0)
        r_state = _get(tool_results, "compaction_state")
        r_source = _get(tool_results, "source_id")
        r_line = _get(tool_results, "line_no")
        r_path = _get(tool_results, "json_path")
        r_block = _get(tool_results, "block_no")
        r_form = _get(tool_results, "payload_form", "text")
        r_sha = _get(tool_results, "payload_sha256")
        for j in range(tool_results["__len__"][0]):
            mi = msg_pos.get(r_seq[j])
            if mi is None:
                continue    # a result whose message row was filtered out (sidechain)
            call = None
            candidates = calls_by_id.get(r_id[j]) if r_id[j] is not None else None
            if candidates:
                before = [c for c in candidates if c.seq < r_seq[j]]
                call = before[-1] if before else candidates[0]
            text = view.text[mi]
            state = r_state[j] or m_state[mi] or compaction_state_of(text)
            name = r_name[j] or (call.tool_name if call else None)
            family = call.family if call else _tool_family(name)
            turn = call.turn if call is not None and call.turn >= 0 else turn_at(r_seq[j])
            item = Item(len(view.items), mi, r_seq[j], r_id[j], name, family, bool(r_err[j]),
                        r_shape[j], r_bytes[j], r_chars[j], r_tokens[j], text,
                        (r_source[j], r_line[j], r_path[j], r_block[j]), call, turn, state,
                        -_INF if state else None, r_tokens[j], r_chars[j], r_bytes[j],
                        r_form[j] or "text", r_sha[j])
            view.items.append(item)
            view.item_by_seq[item.seq] = item
    for at, ids in recorded_clears:
        wanted = set(ids)
        for item in view.items:
            if item.gone_at is None and item.seq < at and item.call_id in wanted:
                item.gone_at = at
                item.gone_tokens = item.gone_chars = item.gone_bytes = 0
                view._events.append((at, item.seq, -item.tokens))
    view._set_events(view._events)
    view.item_seqs = [item.seq for item in view.items]
    return view


def _compacted_ids(text: str) -> list:
    try:
        meta = orjson.loads(text) if text else None
    except orjson.JSONDecodeError:
        return []
    ids = meta.get("compactedToolIds") if isinstance(meta, dict) else None
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


# ---------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------
@dataclass
class PolicyOutput:
    """What one policy decided for one session (rows without plan ids; see pipeline.stages.plan).

    ``plans``: dicts with the PLANS columns trigger, at_seq, at_time, tokens_before,
    tokens_after, tokens_saved, evicted, preserved, kept and ``metadata`` (a dict).
    ``evictions``: dicts with the EVICTIONS columns from call_id on, plus ``plan`` (index
    into ``plans``). ``preserved_seqs``: items protected by managed memory at any point.
    """

    plans: list[dict] = field(default_factory=list)
    evictions: list[dict] = field(default_factory=list)
    preserved_seqs: set[int] = field(default_factory=set)
    suggestions: list[dict] = field(default_factory=list)
    suppressed: list[dict] = field(default_factory=list)
    prior: Prior | None = None    # what a later chain step inherits (None: unchanged)

    def prior_evictions(self) -> list[PriorEviction]:
        return [PriorEviction(e["seq"], e["action"], e["at_seq"], e["tokens_after"],
                              e.get("chars_after", 0), e["bytes_after"]) for e in self.evictions]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def eviction_row(view: SessionView, item: Item, *, plan: int, action: str, reason: str,
                 at_seq: int, replacement: str, tokens_after: int, locator: str | None = None,
                 payload_sha256: str | None = None) -> dict:
    """An EVICTIONS row (minus plan id / policy / session) for a cleared or pruned result."""
    source_id, line_no, json_path, block_no = item.prov
    return {
        "plan": plan, "call_id": item.call_id, "tool_name": item.tool_name, "action": action,
        "reason": reason, "paths": list(item.paths), "tokens_before": item.tokens,
        "tokens_after": tokens_after, "bytes_before": item.nbytes,
        "bytes_after": len(replacement.encode("utf-8")), "locator": locator,
        "payload_sha256": payload_sha256, "replacement": replacement, "source_id": source_id,
        "line_no": line_no, "json_path": json_path, "seq": item.seq, "block_no": block_no,
        "at_seq": at_seq, "chars_after": len(replacement),
    }


def input_eviction_row(call: Call, *, plan: int, reason: str, at_seq: int,
                       replacement: str, tokens_after: int) -> dict:
    """An EVICTIONS row clearing a call's input (``clear_input``)."""
    source_id, line_no, json_path, block_no = call.prov
    return {
        "plan": plan, "call_id": call.call_id, "tool_name": call.tool_name,
        "action": "clear_input", "reason": reason, "paths": list(call.paths),
        "tokens_before": call.input_tokens, "tokens_after": tokens_after,
        "bytes_before": len((call.input_json or "").encode("utf-8")),
        "bytes_after": len(replacement.encode("utf-8")), "locator": None,
        "payload_sha256": None, "replacement": replacement, "source_id": source_id,
        "line_no": line_no, "json_path": json_path, "seq": call.seq, "block_no": block_no,
        "at_seq": at_seq, "chars_after": len(replacement),
    }


def plan_row(view: SessionView, *, trigger: str, at_seq: int, tokens_before: int,
             saved: int, evicted: int, preserved: int, kept: int, metadata: dict) -> dict:
    return {
        "trigger": trigger, "at_seq": at_seq, "at_time": view.time_at(at_seq),
        "tokens_before": tokens_before, "tokens_after": tokens_before - saved,
        "tokens_saved": saved, "evicted": evicted, "preserved": preserved, "kept": kept,
        "metadata": metadata,
    }


class Ledger:
    """A policy's own evictions so far, for the context size at its next decision point.

    Decision points are visited in increasing seq, so every recorded eviction is already in
    effect at the next point and concerns an item before it.
    """

    def __init__(self, view: SessionView):
        self.view = view
        self.delta = 0
        self.events: list[tuple[int, int]] = []     # (item seq, token delta)
        self.done: set[int] = set()                 # item seqs evicted by this policy

    def record(self, item_seq: int, tokens_before: int, tokens_after: int) -> None:
        self.delta += tokens_after - tokens_before
        self.events.append((item_seq, tokens_after - tokens_before))
        self.done.add(item_seq)

    def tokens(self, at_seq: int) -> int:
        total = self.view.context_tokens(at_seq) + self.delta
        start = self.view.context_start(at_seq)
        if start > -_INF:
            total -= sum(d for item_seq, d in self.events if item_seq < start)
        return total


def decision_points(*groups: Iterable[tuple[int, int, Any]]) -> list[tuple[int, int, Any]]:
    """Merge (seq, priority, payload) points; one per seq, the lowest priority number wins."""
    best: dict[int, tuple[int, int, Any]] = {}
    for group in groups:
        for point in group:
            current = best.get(point[0])
            if current is None or point[1] < current[1]:
                best[point[0]] = point
    return [best[s] for s in sorted(best)]


def params_dict(params: Any) -> dict:
    """A params dataclass as a plain dict (tuples as lists), for metadata and hashing."""
    out = {}
    for name in getattr(params, "__dataclass_fields__", {}):
        value = getattr(params, name)
        out[name] = list(value) if isinstance(value, (tuple, frozenset, set)) else value
    return out
