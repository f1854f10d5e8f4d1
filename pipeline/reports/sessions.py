"""One resolver for every command that takes a session id (``recover``, ``suggest``, ``show``,
``plan/apply/replay/summarize --session``).

The id as stored, or a unique prefix of it. A prefix shared by a session and its own
sub-agent sessions (``<id>/agent-...``) means the session. Ambiguous or unknown is a
:class:`~pipeline.core.errors.UsageError` that lists the candidates.
"""

from __future__ import annotations

from pipeline.core import sqlfiles
from pipeline.core.errors import UsageError
from pipeline.core.lake import Lake

SHOWN = 5


def resolve_session_id(con, session: str) -> str:
    """An exact session id, or the one id starting with ``session`` (a unique prefix), over
    an open lake connection."""
    rows = con.execute(sqlfiles.load("select_session_ids_like"), {"prefix": session}).fetchall()
    ids = [r[0] for r in rows]
    if session in ids:
        return session
    if len(ids) == 1:
        return ids[0]
    heads = [i for i in ids if all(other == i or other.startswith(i + "/") for other in ids)]
    if len(heads) == 1:  # a session and its sub-agent sessions (``<id>/agent-...``)
        return heads[0]
    if not ids:
        near = _candidates(con, session)
        listed = ("; candidates: " + ", ".join(near)) if near else "; the lake has no sessions"
        raise UsageError(f"no session '{session}' in the lake{listed}",
                         hint="give a session id or a unique prefix; list them with: ctxlake sql "
                              "\"SELECT session_id, started_at FROM sessions ORDER BY started_at\"")
    shown = ", ".join(ids[:SHOWN]) + (f" ... ({len(ids) - SHOWN} more)" if len(ids) > SHOWN else "")
    raise UsageError(f"'{session}' matches {len(ids)} sessions: {shown}",
                     hint="give more of the id")


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _candidates(con, session: str) -> list[str]:
    """The ids to offer for an unknown ``session``: those sharing its longest prefix (4
    characters at least: a typo at the end), else the closest by difflib, else the ids
    containing it or the most recent (``select_session_candidates``)."""
    import difflib

    every = [r[0] for r in con.execute(sqlfiles.load("select_session_ids_like"),
                                       {"prefix": ""}).fetchall()]
    best = max((_common_prefix(session, i) for i in every), default=0)
    if best >= 4:
        return [i for i in every if _common_prefix(session, i) == best][:SHOWN]
    close = difflib.get_close_matches(session, every, n=SHOWN, cutoff=0.6)
    if close:
        return close
    return [r[0] for r in con.execute(sqlfiles.load("select_session_candidates"),
                                      {"text": session, "n": SHOWN}).fetchall()]


def resolve_session(lake: Lake, session: str) -> str:
    """The session id ``session`` names in ``lake`` (see the module docstring)."""
    with lake.connect() as con:
        return resolve_session_id(con, session)
