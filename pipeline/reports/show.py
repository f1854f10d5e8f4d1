"""``ctxlake show SESSION``: one session's transcript as typed rows, for the terminal or JSON.

Every block in order (messages, thinking, tool calls and their results), each tool result
with its status and size, and every eviction a plan made of it (policy, action, reason and
the ``compaction://`` locator of the stored payload). The CLI folds tool calls and results
to one line unless asked for the full text.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from pipeline.core import sqlfiles
from pipeline.core.lake import Lake
from pipeline.reports.sessions import resolve_session_id


@dataclasses.dataclass
class Eviction:
    policy: str
    step: str | None
    action: str
    reason: str | None
    locator: str | None
    tokens_before: int | None
    tokens_after: int | None


@dataclasses.dataclass
class Block:
    seq: int
    block_no: int
    role: str | None
    kind: str | None
    timestamp: datetime | None
    model: str | None
    text: str | None
    tool_name: str | None
    call_id: str | None
    is_error: bool | None
    payload_bytes: int | None
    est_tokens: int | None
    is_sidechain: bool
    is_meta: bool
    compaction_state: str | None
    source: str | None          # file:line of the source bytes
    evictions: list[Eviction]


@dataclasses.dataclass
class SessionView:
    session_id: str
    format: str | None
    project: str | None
    git_branch: str | None
    started_at: datetime | None
    ended_at: datetime | None
    parent_session_id: str | None
    model: str | None
    n_user: int
    n_assistant: int
    n_tool_calls: int
    est_tokens: int | None
    blocks: list[Block]

    @property
    def evicted(self) -> int:
        return sum(1 for b in self.blocks if b.evictions)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "evicted": self.evicted}


def show_session(lake: Lake, session: str, *, policy: str | None = None) -> SessionView:
    """The transcript of ``session`` (id or unique prefix) with the evictions of every
    planned policy (or only ``policy``)."""
    with lake.connect() as con:
        session_id = resolve_session_id(con, session)
        head = sqlfiles.fetch_dicts(con.execute(sqlfiles.load("select_show_session"),
                                                {"session_id": session_id}))[0]
        rows = sqlfiles.fetch_dicts(con.execute(sqlfiles.load("select_show_messages"),
                                                {"session_id": session_id}))
        evictions: dict[tuple[int, int], list[Eviction]] = {}
        if con.execute(sqlfiles.load("select_view_exists"), {"name": "evictions"}).fetchone()[0]:
            for row in sqlfiles.fetch_dicts(con.execute(
                    sqlfiles.load("select_show_evictions"),
                    {"session_id": session_id, "policy": policy})):
                evictions.setdefault((row["seq"], row["block_no"]), []).append(Eviction(
                    row["policy"], row["step"], row["action"], row["reason"], row["locator"],
                    row["tokens_before"], row["tokens_after"]))
    blocks = [Block(r["seq"], r["block_no"], r["role"], r["kind"], r["timestamp"], r["model"],
                    r["text"], r["tool_name"], r["call_id"], r["is_error"], r["payload_bytes"],
                    r["est_tokens"], bool(r["is_sidechain"]), bool(r["is_meta"]),
                    r["compaction_state"],
                    f"{r['source_path']}:{r['line_no']}" if r["source_path"] else None,
                    evictions.get((r["seq"], r["block_no"]), []))
              for r in rows]
    return SessionView(head["session_id"], head["format"], head["project"], head["git_branch"],
                       head["started_at"], head["ended_at"], head["parent_session_id"],
                       head["model"], head["n_user"] or 0, head["n_assistant"] or 0,
                       head["n_tool_calls"] or 0, head["est_tokens"], blocks)
