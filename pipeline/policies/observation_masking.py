"""``observation_masking``: keep the observations of the last ``window`` turns (SWE-agent /
OpenHands; Lindenbauer et al. 2025).

A tool result belongs to the assistant turn that made its call (an orphan result: the last
turn before it). At the start of turn ``k`` (0-based) the results of turns ``k-window`` ..
``k-1`` stay verbatim; a result of turn ``k-window-1`` or older, still in the live context, is
replaced by ``Old environment output: (N lines omitted)`` (SWE-agent's placeholder; N = the
result's line count). ``at_seq`` = the start of the first turn that no longer keeps it, so
each turn start that masks something is one plan (trigger ``window``).

Managed-memory reads and tail-protected results are never masked; errors are masked like any
observation (as in SWE-agent). An observation whose estimate is not above its placeholder's
stays verbatim (masking it would add tokens; SWE-agent replaces it anyway). ``tools`` (empty = every tool) restricts masking to some tools.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.policies.base import (
    Item, Ledger, ParamError, PolicyOutput, SessionInput, eviction_row, mask_text, plan_row,
)
from pipeline.text.tokens import estimate_tokens

NAME = "observation_masking"


@dataclass(frozen=True)
class ObservationMaskingParams:
    window: int = 10
    tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ParamError("window", "must be at least 1")


def plan_session(session: SessionInput, params: ObservationMaskingParams) -> PolicyOutput:
    view = session.view()
    out = PolicyOutput()
    ledger = Ledger(view)
    only = frozenset(params.tools)
    by_turn: dict[int, list[Item]] = {}
    for item in view.items:
        by_turn.setdefault(item.turn, []).append(item)
    waiting: list[Item] = []       # protected at an earlier point: retried at every turn
    for k in range(params.window, len(view.turns)):
        at_seq = view.turns[k].start
        expired = k - params.window - 1            # -1: results before the first turn
        batch = waiting + by_turn.get(expired, [])
        waiting = []
        tail = view.tail_protected(at_seq) if view.prior.tail_pairs else set()
        masked: list[Item] = []
        preserved = []
        for item in batch:
            if not view.live(item, at_seq) or (only and item.tool_name not in only):
                continue
            if item.memory_protected:
                preserved.append(item)
                continue
            if item.seq in tail:
                waiting.append(item)
                continue
            masked.append(item)
        out.preserved_seqs.update(item.seq for item in preserved)
        # (item, placeholder, its tokens), keeping only items the placeholder shrinks
        masked = [(item, text, after) for item in masked
                  for text in (mask_text(item.text),) for after in (estimate_tokens(text),)
                  if item.tokens > after]
        if not masked:
            continue
        tokens_before = ledger.tokens(at_seq)
        plan_index = len(out.plans)
        saved = 0
        why = f"window: older than the last {params.window} turns (turn {k + 1})"
        for item, replacement, after in masked:
            out.evictions.append(eviction_row(view, item, plan=plan_index, action="clear",
                                              reason=why, at_seq=at_seq,
                                              replacement=replacement, tokens_after=after))
            ledger.record(item.seq, item.tokens, after)
            saved += item.tokens - after
        metadata = {
            "trigger": "window", "window": params.window, "turn": k + 1,
            "maskedTurn": expired + 1 if expired >= 0 else None, "preTokens": tokens_before, "tokensSaved": saved,
            "compactedToolIds": [i.call_id for i, _, _ in masked if i.call_id is not None],
            "preservedToolIds": [i.call_id for i in preserved if i.call_id is not None],
        }
        out.plans.append(plan_row(view, trigger="window", at_seq=at_seq,
                                  tokens_before=tokens_before, saved=saved, evicted=len(masked),
                                  preserved=len(preserved), kept=0, metadata=metadata))
    return out
