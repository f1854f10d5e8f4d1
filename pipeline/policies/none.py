"""``none``: the baseline. Nothing is cleared; one plan row per session records the context.

The row has trigger ``none``, ``at_seq`` = the session's last seq, ``tokens_before`` =
``tokens_after`` = the estimated tokens of the whole live context (every message after the last
recorded compaction boundary), so every saving can be read against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.policies.base import PolicyOutput, SessionInput, plan_row

NAME = "none"


@dataclass(frozen=True)
class NoneParams:
    pass


def plan_session(session: SessionInput, params: NoneParams) -> PolicyOutput:
    view = session.view()
    out = PolicyOutput()
    if not view.seq:
        return out
    last = view.seq[-1]
    total = view.context_tokens(last + 1)
    out.plans.append(plan_row(view, trigger="none", at_seq=last, tokens_before=total, saved=0,
                              evicted=0, preserved=0, kept=len(view.items), metadata={
                                  "trigger": "none", "preTokens": total, "turns": len(view.turns),
                                  "toolResults": len(view.items)}))
    return out
