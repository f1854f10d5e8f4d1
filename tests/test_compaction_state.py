"""Ingesting a compacted transcript marks each replaced result the way the policies do."""

from __future__ import annotations

import json

from pipeline.policies.base import (CLEARED_TEXT, CONTEXT_EDIT_TEXT, PRUNE_MARKER,
                                    compaction_state_of, mask_text)
from tests.helpers.lake import ingest_paths, rows
from tests.test_ingest_bad_input import SESSION, write

TEXTS = [
    CLEARED_TEXT,
    CONTEXT_EDIT_TEXT,
    mask_text("a\nb\nc"),
    f"head...\n{PRUNE_MARKER} payload stored at compaction://{'0' * 64}",
    "an ordinary result",
    "Old environment output: (3 lines omitted) and then more text",
]


def _result_line(n: int, text: str) -> bytes:
    obj = {"type": "user", "sessionId": SESSION, "uuid": f"r{n}", "timestamp": "2026-11-01T10:00:00Z",
           "message": {"role": "user", "content": [
               {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": text}]}}
    return json.dumps(obj).encode() + b"\n"


def test_sql_compaction_state_agrees_with_the_policies_on_every_placeholder(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl",
                 b"".join(_result_line(i, text) for i, text in enumerate(TEXTS)))
    lake, _ = ingest_paths(tmp_path, path)
    got = rows(lake, "SELECT m.text, m.compaction_state, r.compaction_state FROM messages m "
                     "JOIN tool_results r USING (session_id, seq) ORDER BY m.seq")
    assert [(text, state, state) for text, state, _ in got] == got
    assert [state for _, state, _ in got] == [compaction_state_of(text) for text in TEXTS]
    assert [state for _, state, _ in got] == ["cleared", "cleared", "masked", "pruned", None, None]
