"""Transcript formats: one reader module per format, chosen per file by auto-detection; each
reader class also declares where its format keeps payloads (read by apply, docs/apply.md)."""

from __future__ import annotations

import re

from pipeline.core.errors import UsageError
from pipeline.formats.base import Reader
from pipeline.formats.claude_code import ClaudeCodeReader
from pipeline.formats.codex_cli import CodexCliJsonReader, CodexCliReader
from pipeline.formats.gemini_cli import GeminiCliJsonlReader, GeminiCliReader
from pipeline.formats.mini_swe_agent import MiniSweAgentReader
from pipeline.formats.openai_chat import OpenAIChatReader
from pipeline.formats.anthropic_messages import AnthropicMessagesReader
from pipeline.formats.swe_agent import SweAgentReader

READERS: dict[str, type[Reader]] = {
    cls.name: cls
    for cls in (
        ClaudeCodeReader,
        GeminiCliReader,
        GeminiCliJsonlReader,
        CodexCliReader,
        CodexCliJsonReader,
        SweAgentReader,
        MiniSweAgentReader,
        OpenAIChatReader,
        AnthropicMessagesReader,
    )
}

# Files worth sniffing at all; anything else under an archive root is ignored (and counted).
CANDIDATE_SUFFIXES = (".jsonl", ".json", ".traj")
# A transcript in a form no reader opens (compressed, .ndjson, an upper-case suffix): not read,
# but said (ingest's ``unread``), never skipped as silently as a README is
UNREAD_TRANSCRIPT = re.compile(r"\.(?:jsonl|json|traj|ndjson)(?:\.(?:gz|bz2|xz|zst|zstd|lz4))?$",
                               re.IGNORECASE)
# Files the agents write beside their transcripts that hold no conversation of their own:
# Claude Code's sub-agent metadata (``<session>/subagents/agent-<id>.meta.json``), Gemini CLI's
# prompt log (``tmp/<project hash>/logs.json``) and saved-chat copies of a conversation
# (``checkpoint-<tag>.json``, written by ``/chat save``: read, they would count the session's
# messages twice). Sniffed like any file; when no reader claims one (the usual case), it is
# listed as skipped, not warned about every night as "not recognised".
COMPANION_FILES = re.compile(r"(?:^|/)(?:agent-[^/]*\.meta\.json|logs\.json|checkpoint-[^/]*\.json)$")


def reader_class(name: str) -> type[Reader]:
    try:
        return READERS[name]
    except KeyError:
        raise UsageError(f"unknown format '{name}'",
                         hint="choose one of: " + ", ".join(sorted(READERS))) from None


def detect(path: str, head: bytes) -> str | None:
    """The best-scoring format for a file, or None when no reader recognises it."""
    best, best_score = None, 0
    for name, cls in READERS.items():
        try:
            score = cls.sniff(path, head)
        except Exception:   # a head of unexpected types (e.g. {"type": []}) is not this format
            score = 0
        if score > best_score:
            best, best_score = name, score
    return best
