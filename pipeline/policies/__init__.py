"""Compaction policies (docs/policies.md), one module each, and their registry.

Every planning policy exposes ``plan_session(session: SessionInput, params) -> PolicyOutput``
(pure: one session's tables in, plan rows out) and a frozen ``*Params`` dataclass whose
defaults are the numbers of docs/policies.md. ``ignore_patterns`` is a session filter used by the
plan stage, not a planning policy. Policies are combined into chains by
:mod:`pipeline.core.config` (``payload_prune+microcompact``) and run by :mod:`pipeline.stages.plan`.

Replacement texts (what ``apply`` writes in place of a payload):

- ``microcompact``, ``strategic``: ``[Old tool result content cleared]`` (Claude Code's).
- ``context_editing``: ``[Tool result cleared by context editing]``; a cleared input: ``{}``.
- ``observation_masking``: ``Old environment output: (N lines omitted)`` (SWE-agent's).
- ``payload_prune``: head + elision line + tail + ``[ctxlake compaction]`` + locator
  (:func:`pipeline.policies.payload_prune.replacement_text`).

:func:`pipeline.policies.base.compaction_state_of` recognises all of them, so re-planning a
compacted transcript changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pipeline.policies import (
    context_editing, microcompact, none, observation_masking, payload_prune, strategic,
    tail_protect,
)
from pipeline.policies.base import PolicyOutput, SessionInput

__all__ = ["PolicyInfo", "REGISTRY", "FILTERS", "policy_info", "SessionInput", "PolicyOutput"]


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    plan_session: Callable[[SessionInput, object], PolicyOutput]
    params: type
    summary: str


REGISTRY: dict[str, PolicyInfo] = {
    info.name: info for info in (
        PolicyInfo("none", none.plan_session, none.NoneParams,
                   "baseline: nothing cleared"),
        PolicyInfo("microcompact", microcompact.plan_session, microcompact.MicrocompactParams,
                   "clear old tool results on idle / size / force, keep recent, keep memory"),
        PolicyInfo("payload_prune", payload_prune.plan_session,
                   payload_prune.PayloadPruneParams,
                   "replace payloads over 16384 bytes by preview + locator (stored)"),
        PolicyInfo("tail_protect", tail_protect.plan_session, tail_protect.TailProtectParams,
                   "modifier: protect the last meaningful exchanges in later chain steps"),
        PolicyInfo("context_editing", context_editing.plan_session,
                   context_editing.ContextEditingParams,
                   "Anthropic clear_tool_uses_20250919: trigger, keep, clear_at_least"),
        PolicyInfo("observation_masking", observation_masking.plan_session,
                   observation_masking.ObservationMaskingParams,
                   "mask tool results older than the last N turns"),
        PolicyInfo("strategic", strategic.plan_session, strategic.StrategicParams,
                   "compact at task boundaries after enough weighted tool calls"),
    )
}

# Session filters: configured at the top level of ctxlake.toml, not selectable as a policy.
FILTERS = ("ignore_patterns",)


def policy_info(name: str) -> PolicyInfo | None:
    return REGISTRY.get(name)
