"""``context_editing``: Anthropic's ``clear_tool_uses_20250919`` context edit (docs/policies.md).

Evaluated at every assistant turn start (each API request):
- ``trigger``: when the estimated input tokens of the context (reference estimator, with the
  edits so far) are over ``trigger`` (``trigger_type = "input_tokens"``, 100000), or the
  number of uncleared tool results in context is over ``trigger``
  (``trigger_type = "tool_uses"``).
- Candidates: tool results in context not already cleared/pruned, not of an ``exclude_tools``
  tool, not a managed-memory read, not tail-protected (protected items are removed before
  ``keep`` counts). Errors are cleared like any result (as the API does).
- ``keep``: the ``keep`` (3) most recent candidate tool uses stay; older ones are cleared,
  except results whose estimate is not above the placeholder's (nothing to free).
- ``clear_at_least``: when set (> 0) and the clearing would free fewer estimated tokens,
  nothing is cleared at that point (a plan row with ``evicted = 0`` and
  ``skippedReason = "clear_at_least"`` records it).
- ``clear_tool_inputs``: also replace each cleared call's input by ``{}`` (action
  ``clear_input``; the tool_use block keeps its id and name). A call whose format has no
  input field of its own (a mini-SWE-agent text-mode command, written inside the reply's
  text) or keeps it as a typed object its tool reads back (a Codex ``local_shell_call`` or
  ``web_search_call`` ``action``; ``Reader.input_clearable``) keeps its input: only its
  result is cleared.
Placeholder of a cleared result: ``[Tool result cleared by context editing]``.
Metadata: ``applied_edits: [{type: "clear_tool_uses_20250919", cleared_tool_uses,
cleared_input_tokens}]`` (tokens freed, results and inputs), plus ``clearedToolIds``,
``excludedToolIds``, ``preservedToolIds``, ``tailProtectedToolIds``, ``triggerValue``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.policies.base import (
    CLEARED_INPUT_TEXT, CONTEXT_EDIT_TEXT, Item, Ledger, ParamError, PolicyOutput,
    SessionInput, eviction_row, input_eviction_row, plan_row, require_at_least,
)
from pipeline.text.tokens import estimate_tokens

NAME = "context_editing"
EDIT_TYPE = "clear_tool_uses_20250919"
PLACEHOLDER_TOKENS = estimate_tokens(CONTEXT_EDIT_TEXT)
CLEARED_INPUT_TOKENS = estimate_tokens(CLEARED_INPUT_TEXT)


@dataclass(frozen=True)
class ContextEditingParams:
    trigger: int = 100_000
    trigger_type: str = "input_tokens"
    keep: int = 3
    clear_at_least: int = 0
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool = False

    def __post_init__(self) -> None:
        if self.trigger_type not in ("input_tokens", "tool_uses"):
            raise ParamError("trigger_type", 'must be "input_tokens" or "tool_uses"')
        require_at_least(self, trigger=0, keep=0)
        if self.clear_at_least < 0:
            raise ParamError("clear_at_least", "must be >= 0 (0 = not set)")


def plan_session(session: SessionInput, params: ContextEditingParams) -> PolicyOutput:
    view = session.view()
    out = PolicyOutput()
    ledger = Ledger(view)
    excluded_names = frozenset(params.exclude_tools)
    inputs_cleared: set[int] = {e.seq for e in view.prior.evictions if e.action == "clear_input"}
    pending: list[Item] = []        # live results before the current turn (incremental)
    next_item = 0
    window = None
    items = view.items
    skip_reported = False           # one clear_at_least row per run of skipped points
    for turn in view.turns:
        at_seq = turn.start
        start = view.context_start(at_seq)
        if start != window:
            window = start
            pending = [i for i in pending if i.seq >= start]
        while next_item < len(items) and items[next_item].seq < at_seq:
            item = items[next_item]
            next_item += 1
            if item.gone_at is None and item.seq >= start:
                pending.append(item)
        tokens_before = ledger.tokens(at_seq)
        value = tokens_before if params.trigger_type == "input_tokens" else len(pending)
        if value <= params.trigger:
            continue
        live = pending
        tail = view.tail_protected(at_seq)
        cands, excluded, preserved, tailed = [], [], [], []
        for item in live:
            if item.tool_name in excluded_names:
                excluded.append(item)
            elif item.memory_protected:
                preserved.append(item)
            elif item.seq in tail:
                tailed.append(item)
            else:
                cands.append(item)
        out.preserved_seqs.update(item.seq for item in preserved)
        cleared = cands[:-params.keep] if params.keep else list(cands)
        if params.keep and len(cands) <= params.keep:
            cleared = []
        # a result no bigger than the placeholder stays (clearing it would not free tokens)
        cleared = [item for item in cleared if item.tokens > PLACEHOLDER_TOKENS]
        if not cleared:
            continue
        freed = sum(item.tokens - PLACEHOLDER_TOKENS for item in cleared)
        input_calls = []
        if params.clear_tool_inputs:
            for item in cleared:
                call = item.call
                if call is None or call.seq in inputs_cleared or call.seq >= at_seq \
                        or not call.input_clearable:
                    continue
                if (call.input_json or "") == CLEARED_INPUT_TEXT:
                    continue
                input_calls.append(call)
                freed += call.input_tokens - CLEARED_INPUT_TOKENS
        why = (f"context_editing: {value} {params.trigger_type.replace('_', ' ')} > "
               f"{params.trigger}; older than the {params.keep} most recent tool uses")
        metadata = {
            "trigger": params.trigger_type, "triggerValue": value, "preTokens": tokens_before,
            "keep": params.keep, "clearAtLeast": params.clear_at_least or None,
            "excludedToolIds": [i.call_id for i in excluded if i.call_id is not None],
            "preservedToolIds": [i.call_id for i in preserved if i.call_id is not None],
            "tailProtectedToolIds": [i.call_id for i in tailed if i.call_id is not None],
        }
        plan_index = len(out.plans)
        if params.clear_at_least and freed < params.clear_at_least:
            if skip_reported:
                continue
            skip_reported = True
            metadata.update({"skippedReason": "clear_at_least", "wouldClear": freed,
                             "applied_edits": [], "clearedToolIds": []})
            out.plans.append(plan_row(view, trigger=params.trigger_type, at_seq=at_seq,
                                      tokens_before=tokens_before, saved=0, evicted=0,
                                      preserved=len(preserved), kept=len(cands),
                                      metadata=metadata))
            continue
        skip_reported = False
        gone = {item.seq for item in cleared}
        pending = [item for item in pending if item.seq not in gone]
        for item in cleared:
            out.evictions.append(eviction_row(
                view, item, plan=plan_index, action="clear", reason=why, at_seq=at_seq,
                replacement=CONTEXT_EDIT_TEXT, tokens_after=PLACEHOLDER_TOKENS))
            ledger.record(item.seq, item.tokens, PLACEHOLDER_TOKENS)
        for call in input_calls:
            out.evictions.append(input_eviction_row(
                call, plan=plan_index, reason=why + "; clear_tool_inputs", at_seq=at_seq,
                replacement=CLEARED_INPUT_TEXT, tokens_after=CLEARED_INPUT_TOKENS))
            inputs_cleared.add(call.seq)
            ledger.record(call.seq, call.input_tokens, CLEARED_INPUT_TOKENS)
        metadata.update({
            "applied_edits": [{"type": EDIT_TYPE, "cleared_tool_uses": len(cleared),
                               "cleared_input_tokens": freed}],
            "clearedToolIds": [i.call_id for i in cleared if i.call_id is not None],
            "compactedToolIds": [i.call_id for i in cleared if i.call_id is not None],
            "clearedInputIds": [c.call_id for c in input_calls if c.call_id is not None],
            "tokensSaved": freed,
        })
        out.plans.append(plan_row(view, trigger=params.trigger_type, at_seq=at_seq,
                                  tokens_before=tokens_before, saved=freed, evicted=len(cleared)
                                  + len(input_calls), preserved=len(preserved),
                                  kept=len(cands) - len(cleared), metadata=metadata))
    return out
