"""The flags stage: ``sessions.ignored`` decided once, from the ``ignore_patterns`` matched
against each session's first real user message (``sql/select_session_first_prompts.sql``),
written to ``session_flags`` and read through the ``sessions`` view (docs/policies.md,
``ignore_patterns``). The nightly job runs it right after ingest.
"""

from __future__ import annotations

import pyarrow as pa

from pipeline.core import sqlfiles
from pipeline.core.lake import Lake

SESSION_FLAGS = pa.schema([("session_id", pa.string()), ("ignored", pa.bool_()),
                           ("ignored_by", pa.string())])


def flag_ignored_sessions(lake: Lake, patterns, *, sessions=None) -> int:
    """Write ``session_flags`` (the ``sessions.ignored`` flag) for ``sessions`` (None: all):
    sessions whose first real user message matches an ``ignore_patterns`` regex stay in the
    lake, flagged. Returns how many of them are ignored."""
    from pipeline.policies.ignore_patterns import compile_patterns, matching_pattern

    compiled = compile_patterns(patterns)
    with lake.connect() as con:
        found = con.execute(sqlfiles.load("select_session_first_prompts"),
                            {"session_ids": None if sessions is None else list(sessions)}
                            ).fetchall()
    rows = []
    for session_id, first_user_text in found:
        matched = matching_pattern(first_user_text, compiled)
        rows.append({"session_id": session_id, "ignored": matched is not None, "ignored_by": matched})
    lake.write_session_rows("session_flags", "all", pa.Table.from_pylist(rows, schema=SESSION_FLAGS),
                            sessions, sort_by=["session_id"])
    return sum(1 for row in rows if row["ignored"])
