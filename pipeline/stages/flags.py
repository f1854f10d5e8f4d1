"""The flags stage: ``sessions.ignored`` decided once, from the ``ignore_patterns`` matched
against each session's first real user message (``sql/select_session_first_prompts.sql``),
written to ``session_flags`` and read through the ``sessions`` view (docs/policies.md,
``ignore_patterns``). The nightly job runs it right after ingest; plan, summarize and replay
read its verdicts through :func:`session_verdicts` / :func:`ignored_sessions`.
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa

from pipeline.core import sqlfiles
from pipeline.core.lake import Lake
from pipeline.core.ledger import LAYOUT, Ledger, fingerprint, lake_state

SESSION_FLAGS = pa.schema([("session_id", pa.string()), ("ignored", pa.bool_()),
                           ("ignored_by", pa.string())])
STAGE = "flags"


def stage_settings(patterns: Iterable[str]) -> dict:
    """The flags stage's settings as the ledger records them (what its verdicts depend on)."""
    return {"ignore_patterns": list(patterns), "layout": LAYOUT}


def first_prompts(con, session_ids=None) -> dict[str, str | None]:
    """Every session (or those in ``session_ids``) -> its first real user message."""
    found = con.execute(sqlfiles.load("select_session_first_prompts"),
                        {"session_ids": None if session_ids is None else list(session_ids)}).fetchall()
    return dict(found)


def first_prompt_matches(con, compiled, session_ids=None) -> dict[str, tuple[str | None, str | None]]:
    """Every session (or those in ``session_ids``) -> (its first real user message, the
    ``ignore_patterns`` pattern that message matches or None): THE rule for "is this session
    ignored", applied by this stage (and by a stage run while the flags are not current).
    ``compiled``: compiled patterns."""
    from pipeline.policies.ignore_patterns import matching_pattern

    return {session_id: (text, matching_pattern(text, compiled))
            for session_id, text in first_prompts(con, session_ids).items()}


def flags_current(lake: Lake, patterns: Iterable[str]) -> bool:
    """``session_flags`` holds the verdict of every session of the lake as it is now, for
    these patterns: the flags stage's ledger marker is of the lake's current sources and of
    these settings, and no session failed there."""
    return Ledger(lake).finished(STAGE, lake_state(lake), fingerprint(stage_settings(patterns)))


def _recorded(con, session_ids) -> dict[str, str | None]:
    """``session_flags``: session -> the pattern it is ignored by (None: not ignored)."""
    found = con.execute(sqlfiles.load("select_session_flags"),
                        {"session_ids": None if session_ids is None else list(session_ids)}).fetchall()
    return dict(found)


def session_verdicts(lake: Lake, con, patterns: Iterable[str], compiled, session_ids=None
                     ) -> dict[str, tuple[str | None, str | None]]:
    """Like :func:`first_prompt_matches`, the verdict read from ``session_flags`` when the
    flags are current for ``patterns`` (``compiled``: the same, compiled), else decided by
    :func:`first_prompt_matches` (a lake the nightly job has not flagged, or other patterns)."""
    patterns = list(patterns)
    if not flags_current(lake, patterns):
        return first_prompt_matches(con, compiled, session_ids)
    recorded = _recorded(con, session_ids)
    return {session_id: (text, recorded.get(session_id))
            for session_id, text in first_prompts(con, session_ids).items()}


def ignored_sessions(lake: Lake, con, patterns: Iterable[str], compiled, session_ids=None
                     ) -> dict[str, str]:
    """The ignored sessions (of ``session_ids``, None: all) -> the pattern each matches; as
    :func:`session_verdicts` decides them, without the first prompts when the flags are
    current. No pattern: none."""
    patterns = list(patterns)
    if not compiled:
        return {}
    if flags_current(lake, patterns):
        found = _recorded(con, session_ids)
    else:
        found = {s: matched for s, (_text, matched)
                 in first_prompt_matches(con, compiled, session_ids).items()}
    return {session_id: matched for session_id, matched in found.items() if matched is not None}


def flag_ignored_sessions(lake: Lake, patterns, *, sessions=None) -> int:
    """Write ``session_flags`` (the ``sessions.ignored`` flag) for ``sessions`` (None: all):
    sessions whose first real user message matches an ``ignore_patterns`` regex stay in the
    lake, flagged. Returns how many of them are ignored."""
    from pipeline.policies.ignore_patterns import compile_patterns

    compiled = compile_patterns(patterns)
    with lake.connect(scope=sessions) as con:
        found = first_prompt_matches(con, compiled, sessions)
    rows = [{"session_id": session_id, "ignored": matched is not None, "ignored_by": matched}
            for session_id, (_text, matched) in found.items()]
    lake.write_session_rows("session_flags", "all", pa.Table.from_pylist(rows, schema=SESSION_FLAGS),
                            sessions, sort_by=["session_id"])
    return sum(1 for row in rows if row["ignored"])
