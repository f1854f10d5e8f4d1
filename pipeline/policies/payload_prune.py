"""``payload_prune``: oversized tool payloads, store-before-prune (docs/policies.md).

- Only tool-result content, of shape ``string``, ``text_object`` (``{text}``) or ``blocks``
  (a list of content blocks); the payload is the result's text as ingested
  (``messages.text``: text blocks joined with newlines). Other shapes are skipped. A block
  list with media (an image or document block, whose text is only ``[image]``) is measured,
  hashed and stored as its JSON (``tool_results.payload_form = 'json'``): hundreds of kB of
  base64 are oversized, and the store gives them back as recorded.
- Oversized: UTF-8 byte length STRICTLY greater than ``max_bytes`` (16384).
- Replacement (:func:`replacement_text`): the first ``head_chars`` (2048) characters, an
  elision line, the last ``tail_chars`` (512) characters, then the marker
  ``[ctxlake compaction]`` with the locator ``compaction://<sha256 of the payload's UTF-8
  bytes>``. Characters are Unicode code points (never half a surrogate pair).
- The marker is the idempotency guard: a result already holding it (or a clear placeholder)
  is skipped. Managed-memory reads are protected (never pruned). A payload whose
  replacement would not be smaller is skipped. Skips of oversized payloads are counted.
- The plan stage does NOT write the store: ``apply`` stores the payload at
  ``<store>/<sha256>.payload`` before rewriting the transcript (and aborts that session's
  prune on any store failure). The eviction row carries ``locator`` and ``payload_sha256``.
- Time: a payload is pruned as it arrives (``at_seq`` = the result's own seq). Tail
  protection does not apply (pruning is lossless and the payload stays retrievable).
- One plan row per session that pruned something: trigger ``oversized``, ``at_seq`` = the
  last pruned result's seq, tokens over the live context at that point (including that
  result); metadata ``prunedCount``, ``bytesSaved``, ``locators[]``, ``skippedCount``,
  ``maxBytes``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pipeline.policies.base import (
    PRUNE_MARKER, PolicyOutput, SessionInput, eviction_row, plan_row, require_at_least,
)
from pipeline.text.tokens import estimate_tokens

NAME = "payload_prune"
PRUNABLE_SHAPES = frozenset({"string", "text_object", "blocks"})


@dataclass(frozen=True)
class PayloadPruneParams:
    max_bytes: int = 16384
    head_chars: int = 2048
    tail_chars: int = 512

    def __post_init__(self) -> None:
        require_at_least(self, max_bytes=0, head_chars=0, tail_chars=0)


def locator_for(sha256_hex: str) -> str:
    return f"compaction://{sha256_hex}"


def replacement_text(payload: str, sha256_hex: str, *, head_chars: int = 2048,
                     tail_chars: int = 512, json_bytes: int | None = None) -> str:
    """The exact text that takes an oversized payload's place.

    ``<head>\\n[... N characters elided ...]\\n<tail>\\n[ctxlake compaction] full payload: B
    bytes, sha256 H; retrieve it from the payload store: compaction://H``. ``json_bytes``: the
    payload is a block list with media, stored as its JSON of that many bytes (``payload`` is
    its text, whose head and tail are kept); the marker line then says ``B bytes of JSON``.
    """
    nbytes = len(payload.encode("utf-8")) if json_bytes is None else json_bytes
    form = "" if json_bytes is None else " of JSON (content blocks with media)"
    head = payload[:head_chars]
    tail = payload[len(payload) - tail_chars:] if tail_chars and len(payload) > head_chars else ""
    if len(head) + len(tail) > len(payload):
        tail = payload[len(head):]
    elided = len(payload) - len(head) - len(tail)
    return (f"{head}\n[... {elided} characters elided ...]\n{tail}\n"
            f"{PRUNE_MARKER} full payload: {nbytes} bytes{form}, sha256 {sha256_hex}; "
            f"retrieve it from the payload store: {locator_for(sha256_hex)}")


def plan_session(session: SessionInput, params: PayloadPruneParams) -> PolicyOutput:
    view = session.view()
    out = PolicyOutput()
    # one plan per live-context window (normally one per session; a recorded compaction
    # boundary opens a new window), so every plan's token counts are exact
    windows: dict[int, tuple[list, list[int]]] = {}
    for item in view.items:
        if item.nbytes <= params.max_bytes:
            continue
        pruned, skipped = windows.setdefault(view.context_start(item.seq), ([], [0]))
        if item.gone_at is not None or PRUNE_MARKER in item.text:
            skipped[0] += 1
            continue
        if item.shape not in PRUNABLE_SHAPES:
            skipped[0] += 1
            continue
        if item.memory_protected:
            out.preserved_seqs.add(item.seq)
            skipped[0] += 1
            continue
        payload = item.text
        if item.form == "json" and item.payload_sha256:   # media: measured and stored as JSON
            nbytes, sha, json_bytes = item.nbytes, item.payload_sha256, item.nbytes
        else:
            data = payload.encode("utf-8")
            nbytes, sha, json_bytes = len(data), hashlib.sha256(data).hexdigest(), None
        if nbytes <= params.max_bytes:   # payload_bytes disagreed with the text: trust text
            continue
        replacement = replacement_text(payload, sha, head_chars=params.head_chars,
                                       tail_chars=params.tail_chars, json_bytes=json_bytes)
        if len(replacement.encode("utf-8")) >= nbytes:
            skipped[0] += 1
            continue
        pruned.append((item, sha, replacement))
    for start in sorted(windows):
        pruned, skipped = windows[start]
        if pruned:
            _plan_window(view, out, pruned, skipped[0], params)
    return out


def _plan_window(view, out: PolicyOutput, pruned: list, skipped: int,
                 params: PayloadPruneParams) -> None:
    plan_index = len(out.plans)
    last = pruned[-1][0]
    at_seq = last.seq
    tokens_before = view.context_tokens(at_seq) + last.tokens
    saved = 0
    bytes_saved = 0
    for item, sha, replacement in pruned:
        tokens_after = estimate_tokens(replacement)
        row = eviction_row(view, item, plan=plan_index, action="prune",
                           reason=f"oversized: {item.nbytes} bytes > {params.max_bytes}",
                           at_seq=item.seq, replacement=replacement, tokens_after=tokens_after,
                           locator=locator_for(sha), payload_sha256=sha)
        out.evictions.append(row)
        saved += item.tokens - tokens_after
        bytes_saved += row["bytes_before"] - row["bytes_after"]
    preserved = sum(1 for s in out.preserved_seqs if view.context_start(s) == view.context_start(at_seq))
    metadata = {
        "trigger": "oversized", "maxBytes": params.max_bytes, "prunedCount": len(pruned),
        "bytesSaved": bytes_saved, "locators": [locator_for(sha) for _, sha, _ in pruned],
        "skippedCount": skipped,
        "compactedToolIds": [i.call_id for i, _, _ in pruned if i.call_id is not None],
        "preTokens": tokens_before, "tokensSaved": saved,
    }
    out.plans.append(plan_row(view, trigger="oversized", at_seq=at_seq,
                              tokens_before=tokens_before, saved=saved, evicted=len(pruned),
                              preserved=preserved, kept=0, metadata=metadata))
