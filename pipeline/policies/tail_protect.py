"""``tail_protect`` (modifier): the last ``tail_pairs`` meaningful exchanges are never cleared.

An exchange is a user prompt and everything up to the next prompt. Walking back from a
decision point, an exchange whose user text has fewer than ``min_user_chars`` (10) characters
AND whose assistant text has fewer than ``min_assistant_chars`` (20), both trimmed first, is
skipped: not counted and not protected. The tool results inside the chosen exchanges are protected at that point.

Use it in a chain before a clearing policy (``tail_protect+microcompact``): later steps
(microcompact, context_editing, observation_masking, strategic) exclude the protected results
BEFORE any count and carry the "recent exchange" block in their plan metadata
(``recentExchange``). ``payload_prune`` is not affected: pruning is lossless and happens as a
payload arrives. Alone, it plans nothing and writes one row per session (trigger ``tail``,
at the last seq) with the block and ``protectedToolIds``.

The block: ``=== RECENT EXCHANGE (protected) ===``, then per exchange (oldest first)
``User: ...``, ``Assistant: ...``, ``---``, then ``=== END RECENT EXCHANGE ===``; each message
truncated to ``block_tokens`` (150) estimated tokens (:func:`pipeline.text.tokens.truncate_to_tokens`).
When no exchange is meaningful there is nothing to protect and no block is written (the plan
metadata has no ``recentExchange`` key).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.policies.base import PolicyOutput, Prior, SessionInput, plan_row, require_at_least

NAME = "tail_protect"


@dataclass(frozen=True)
class TailProtectParams:
    tail_pairs: int = 3
    min_user_chars: int = 10
    min_assistant_chars: int = 20
    block_tokens: int = 150

    def __post_init__(self) -> None:
        require_at_least(self, tail_pairs=0, min_user_chars=0, min_assistant_chars=0,
                         block_tokens=1)


def prior_for(params: TailProtectParams, base: Prior | None = None) -> Prior:
    """``base`` (default: an empty prior) carrying these tail-protection parameters."""
    return replace(base or Prior(), tail_pairs=params.tail_pairs,
                   tail_min_user_chars=params.min_user_chars,
                   tail_min_assistant_chars=params.min_assistant_chars,
                   tail_block_tokens=params.block_tokens)


def plan_session(session: SessionInput, params: TailProtectParams) -> PolicyOutput:
    prior = prior_for(params, session.prior)
    out = PolicyOutput(prior=prior)
    view = session.with_prior(prior).view()
    if not view.seq:
        return out
    end = view.seq[-1] + 1
    protected = view.tail_protected(end)
    block = view.recent_exchange_block(end, params.tail_pairs, params.min_user_chars,
                                       params.min_assistant_chars, params.block_tokens)
    ids = [view.item_by_seq[s].call_id for s in sorted(protected)
           if view.item_by_seq[s].call_id is not None]
    total = view.context_tokens(end)
    metadata = {"trigger": "tail", "tailPairs": params.tail_pairs, "protectedToolIds": ids}
    if block is not None:           # nothing meaningful to protect: no block at all
        metadata["recentExchange"] = block
    out.plans.append(plan_row(view, trigger="tail", at_seq=end - 1, tokens_before=total, saved=0,
                              evicted=0, preserved=0, kept=len(protected), metadata=metadata))
    return out
