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


def first_prompt_matches(con, compiled, session_ids=None) -> dict[str, tuple[str | None, str | None]]:
    """Every session (or those in ``session_ids``) -> (its first real user message, the
    ``ignore_patterns`` pattern that message matches or None): THE answer to "is this session
    ignored", used by this stage, by plan and by summarize. ``compiled``: compiled patterns."""
    from pipeline.policies.ignore_patterns import matching_pattern

    found = con.execute(sqlfiles.load("select_session_first_prompts"),
                        {"session_ids": None if session_ids is None else list(session_ids)}).fetchall()
    return {session_id: (text, matching_pattern(text, compiled)) for session_id, text in found}


def flag_ignored_sessions(lake: Lake, patterns, *, sessions=None) -> int:
    """Write ``session_flags`` (the ``sessions.ignored`` flag) for ``sessions`` (None: all):
    sessions whose first real user message matches an ``ignore_patterns`` regex stay in the
    lake, flagged. Returns how many of them are ignored."""
    from pipeline.policies.ignore_patterns import compile_patterns

    compiled = compile_patterns(patterns)
    with lake.connect() as con:
        found = first_prompt_matches(con, compiled, sessions)
    rows = [{"session_id": session_id, "ignored": matched is not None, "ignored_by": matched}
            for session_id, (_text, matched) in found.items()]
    lake.write_session_rows("session_flags", "all", pa.Table.from_pylist(rows, schema=SESSION_FLAGS),
                            sessions, sort_by=["session_id"])
    return sum(1 for row in rows if row["ignored"])
