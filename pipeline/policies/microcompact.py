"""``microcompact``: managed-memory microcompaction (docs/policies.md), as Claude Code does it.

Triggers (``-1`` disables idle/size):
- ``idle``: at a user turn (the first prompt row of an exchange, never inside a tool loop),
  when the gap since the last assistant row before it is over ``idle_minutes``. Clears every
  candidate except the ``keep_recent`` most recent. ``at_seq`` = the prompt's seq.
- ``size``: at every assistant turn start, when the characters of the candidates in context are
  over ``size_chars``: clears oldest first (never the ``keep_recent`` most recent) until the
  total is at or below ``low_water_chars``. ``at_seq`` = the turn start.
- ``force``: at each requested point (``force_at_seq`` seqs, ``force_at_turn`` 1-based turn
  numbers: replay options), like idle.
When several fire at the same seq, force beats idle beats size (one plan per point).

A result whose estimate is not above the placeholder's (9 tokens) is never cleared (it would
save nothing; ``toolsTooSmall`` counts them). Candidates at a point: results in the live
context before it, of a compactable tool, not an error, not already cleared/pruned (by the transcript, a recorded microcompact boundary, an
earlier chain step or this run), not a managed-memory read (the preservation predicate,
:attr:`pipeline.policies.base.Item.memory_protected`) and not tail-protected. Protected items
are removed BEFORE ``keep_recent`` and the size threshold apply, so ``toolsKept``,
``tokensSaved`` and ``compactedToolIds`` describe exactly what happened.

A plan row is written for each point that clears at least one result. Metadata (a superset of
Claude Code's ``microcompactMetadata``): ``trigger``/``triggerReason``, ``preTokens``,
``gapMinutes``, ``thresholdMinutes``, ``toolResultCharsBefore``/``After`` (candidates' chars;
cleared ones count as the placeholder), ``toolsCleared``, ``toolsKept``, ``toolsPreserved``,
``toolsTailProtected``, ``keepRecent``, ``tokensSaved`` = ceil((charsBefore - charsAfter) / 4)
(Claude Code's formula; the plan row's ``tokens_saved`` uses the reference estimator instead),
``evictedReadPaths``, ``unresolvedEvictedReads`` (cleared reads without a known path),
``compactedToolIds``, ``preservedToolIds``, ``tailProtectedToolIds``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.policies.base import (
    CLEARED_TEXT, Item, Ledger, ParamError, PolicyOutput, SessionInput, SessionView, ceil_div,
    decision_points, eviction_row, plan_row, require_at_least,
)
from pipeline.text.tokens import estimate_tokens

NAME = "microcompact"

# docs/policies.md lists (Claude Code, Gemini/Qwen, Codex) plus the same families of the other
# formats ctxlake reads (SWE-agent / mini-SWE-agent ``bash`` and ``str_replace_editor``).
DEFAULT_COMPACTABLE = (
    "Read", "Bash", "Grep", "Glob", "WebFetch", "Edit", "MultiEdit", "Write",
    "read_file", "run_shell_command", "grep_search", "glob", "web_fetch", "replace", "write_file",
    "shell", "shell_command", "apply_patch",
    "bash", "str_replace_editor",
)
CLEARED_TOKENS = estimate_tokens(CLEARED_TEXT)


@dataclass(frozen=True)
class MicrocompactParams:
    idle_minutes: float = 60.0
    size_chars: int = 500_000
    low_water_chars: int = 250_000
    keep_recent: int = 5
    compactable_tools: tuple[str, ...] = DEFAULT_COMPACTABLE
    force_at_seq: tuple[int, ...] = ()
    force_at_turn: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.keep_recent < 1:
            raise ParamError("keep_recent", "must be at least 1")
        if self.idle_minutes != -1 and self.idle_minutes < 0:
            raise ParamError("idle_minutes", "must be >= 0, or -1 to disable the idle trigger")
        if self.size_chars != -1 and self.size_chars < 1:
            raise ParamError("size_chars", "must be >= 1, or -1 to disable the size trigger")
        require_at_least(self, low_water_chars=0)
        if any(t < 1 for t in self.force_at_turn):
            raise ParamError("force_at_turn", "turn numbers start at 1")


def idle_points(view: SessionView, idle_minutes: float) -> list[tuple[int, int, tuple]]:
    """(seq, priority, ("idle", gap minutes)) at each user turn after a long enough gap."""
    points = []
    last_assistant_ts = None
    prev_prompt = False
    for i, seq in enumerate(view.seq):
        if view.role[i] == "assistant":
            if view.ts[i] is not None:
                last_assistant_ts = view.ts[i]
            prev_prompt = False
            continue
        if view.is_prompt[i]:
            if not prev_prompt and last_assistant_ts is not None and view.ts[i] is not None:
                gap = (view.ts[i] - last_assistant_ts) / 60e6
                if gap > idle_minutes:
                    points.append((seq, 1, ("idle", gap)))
            prev_prompt = True
        elif view.role[i] == "tool" or view.kind[i] in ("tool_result", "tool_use"):
            prev_prompt = False
    return points


def force_points(view: SessionView, seqs, turns, trigger: str = "force") -> list[tuple]:
    points = [(int(s), 0, (trigger, None)) for s in seqs]
    for number in turns:
        if number <= len(view.turns):
            points.append((view.turns[number - 1].start, 0, (trigger, None)))
    return points


@dataclass
class Partition:
    candidates: list[Item]
    preserved: list[Item]
    tail: list[Item]


def partition(view: SessionView, ledger: Ledger, at_seq: int, tools: frozenset[str]) -> Partition:
    """Compactable live results before ``at_seq``, with the protected ones set apart."""
    tail_seqs = view.tail_protected(at_seq)
    out = Partition([], [], [])
    for item in view.items_before(at_seq):
        if item.gone_at is not None or item.seq in ledger.done:
            continue
        if item.tool_name not in tools or item.is_error:
            continue
        if item.memory_protected:
            out.preserved.append(item)
        elif item.seq in tail_seqs:
            out.tail.append(item)
        else:
            out.candidates.append(item)
    return out


def clear_at(view: SessionView, ledger: Ledger, out: PolicyOutput, *, at_seq: int,
             trigger: str, params: MicrocompactParams, tools: frozenset[str],
             gap: float | None = None, extra: dict | None = None, reason: str = "") -> list[Item]:
    """Apply one microcompact decision at ``at_seq`` (idle/force/suggestion: all but the
    ``keep_recent`` most recent; size: oldest first down to the low-water mark)."""
    part = partition(view, ledger, at_seq, tools)
    out.preserved_seqs.update(item.seq for item in part.preserved)
    cands = part.candidates
    chars_before = sum(item.chars for item in cands)
    keep = params.keep_recent
    older = cands[:-keep] if len(cands) > keep else []
    # a result no bigger than the placeholder is left as it is (clearing would not save)
    too_small = [item for item in older if item.tokens <= CLEARED_TOKENS]
    older = [item for item in older if item.tokens > CLEARED_TOKENS]
    if trigger == "size":
        if chars_before <= params.size_chars:
            return []
        target = min(params.low_water_chars, params.size_chars)
        total = chars_before
        cleared = []
        for item in older:
            if total <= target:
                break
            cleared.append(item)
            total -= item.chars - len(CLEARED_TEXT)
        why = (f"size: {chars_before} chars of compactable results > {params.size_chars}; "
               f"oldest first down to {target}")
    else:
        cleared = older
        if trigger == "idle":
            why = (f"idle: {gap:.1f} min since the last assistant message > "
                   f"{params.idle_minutes:g} min")
        else:
            why = reason or trigger
    if not cleared:
        return []
    why += f"; older than the {keep} most recent compactable results"
    tokens_before = ledger.tokens(at_seq)
    plan_index = len(out.plans)
    saved = 0
    chars_cleared = 0
    read_paths: list[str] = []
    unresolved = 0
    for item in cleared:
        row = eviction_row(view, item, plan=plan_index, action="clear", reason=why,
                           at_seq=at_seq, replacement=CLEARED_TEXT, tokens_after=CLEARED_TOKENS)
        out.evictions.append(row)
        ledger.record(item.seq, item.tokens, CLEARED_TOKENS)
        saved += item.tokens - CLEARED_TOKENS
        chars_cleared += item.chars - len(CLEARED_TEXT)
        if item.family == "read":
            if item.paths:
                read_paths.extend(p for p in item.paths if p not in read_paths)
            else:
                unresolved += 1
    chars_after = chars_before - chars_cleared
    metadata = {
        "trigger": trigger, "triggerReason": trigger, "preTokens": tokens_before,
        "gapMinutes": round(gap, 3) if gap is not None else None,
        "thresholdMinutes": params.idle_minutes,
        "toolResultCharsBefore": chars_before, "toolResultCharsAfter": chars_after,
        "toolsCleared": len(cleared), "toolsKept": len(cands) - len(cleared),
        "toolsPreserved": len(part.preserved), "toolsTailProtected": len(part.tail),
        "toolsTooSmall": len(too_small),
        "keepRecent": keep, "tokensSaved": ceil_div(max(chars_cleared, 0), 4),
        "evictedReadPaths": read_paths, "unresolvedEvictedReads": unresolved,
        "compactedToolIds": [i.call_id for i in cleared if i.call_id is not None],
        "preservedToolIds": [i.call_id for i in part.preserved if i.call_id is not None],
        "tailProtectedToolIds": [i.call_id for i in part.tail if i.call_id is not None],
    }
    if view.prior.tail_pairs > 0:
        prior = view.prior
        block = view.recent_exchange_block(
            at_seq, prior.tail_pairs, prior.tail_min_user_chars, prior.tail_min_assistant_chars,
            prior.tail_block_tokens)
        if block is not None:       # nothing to protect: no block at all
            metadata["recentExchange"] = block
    if extra:
        metadata.update(extra)
    out.plans.append(plan_row(view, trigger=trigger, at_seq=at_seq, tokens_before=tokens_before,
                              saved=saved, evicted=len(cleared), preserved=len(part.preserved),
                              kept=len(cands) - len(cleared), metadata=metadata))
    return cleared


class RunningChars:
    """Characters of the live, compactable, non-error, non-memory results before a point,
    kept incrementally (a cheap necessary condition for the size trigger: tail protection
    only lowers the exact total, computed by :func:`partition` when this is over)."""

    def __init__(self, view: SessionView, tools: frozenset[str]):
        self.view, self.tools = view, tools
        self.next = 0
        self.total = 0
        self.counted: set[int] = set()
        self.window = None

    def advance(self, at_seq: int, done: set[int]) -> int:
        view = self.view
        start = view.context_start(at_seq)
        if start != self.window:
            self.window, self.total, self.counted = start, 0, set()
            self.next = 0
            while self.next < len(view.items) and view.items[self.next].seq < start:
                self.next += 1
        items = view.items
        while self.next < len(items) and items[self.next].seq < at_seq:
            item = items[self.next]
            self.next += 1
            if (item.gone_at is None and item.seq not in done and item.tool_name in self.tools
                    and not item.is_error and not item.memory_protected):
                self.total += item.chars
                self.counted.add(item.seq)
        return self.total

    def cleared(self, items: list[Item]) -> None:
        for item in items:
            if item.seq in self.counted:
                self.counted.discard(item.seq)
                self.total -= item.chars


def plan_session(session: SessionInput, params: MicrocompactParams) -> PolicyOutput:
    view = session.view()
    out = PolicyOutput()
    ledger = Ledger(view)
    tools = frozenset(params.compactable_tools)
    idle = idle_points(view, params.idle_minutes) if params.idle_minutes != -1 else []
    size = [(t.start, 2, ("size", None)) for t in view.turns] if params.size_chars != -1 else []
    force = force_points(view, params.force_at_seq, params.force_at_turn)
    running = RunningChars(view, tools)
    for at_seq, _, (trigger, gap) in decision_points(force, idle, size):
        total = running.advance(at_seq, ledger.done)
        if trigger == "size" and total <= params.size_chars:
            continue
        cleared = clear_at(view, ledger, out, at_seq=at_seq, trigger=trigger, params=params,
                           tools=tools, gap=gap, reason="force: requested compaction point")
        running.cleared(cleared)
    return out
