"""Claude Code transcripts: ``~/.claude/projects/<encoded-cwd>/<sessionId>.jsonl``.

Facts (docs/formats.md): one JSON object per line; ``type`` user/assistant/summary/system/
file-history-snapshot/... (unknown types are kept as ``kind = other``); one assistant API
response is written as several lines (one per content block) sharing ``message.id`` and
``requestId`` with usage repeated and ``output_tokens`` final only on the last line: every row
gets ``api_call_id = "<message.id>:<requestId>"`` and the ``messages`` view keeps usage once
per call (its fullest line: most tokens in all, the first of equals, as ccusage keeps). A
line with a ``message.id`` but no ``requestId`` (older versions, some resumed copies) is
keyed ``"<message.id>@<timestamp>"``: the same message written again at the same time is
one call, as ccusage counts it. Lines without a string ``message.id`` are never deduplicated.
``usage.cache_creation.ephemeral_1h_input_tokens`` (the 1-hour part of the cache writes) is
``cache_write_1h_tokens``; a line's ``costUSD`` (written by older versions) is
``cost_usd_recorded``.

Sub-agents: records carrying ``agentId`` (``agent-*.jsonl`` beside the main file, or
``<sessionId>/subagents/``) form their own session ``<sessionId>/agent-<agentId>`` whose
``parent_session_id`` is ``sessionId``. Inline sidechains of 1.0.x (``isSidechain: true``
without ``agentId``, written into the main file) are sub-agent sessions too: each thread (a
sidechain record with ``parentUuid: null`` and the records descending from it through
``parentUuid``) is the session ``<sessionId>/sidechain-<first 8 characters of the uuid of its
first record>`` (the whole uuid if another thread of the file has that prefix) with
``parent_session_id = sessionId``, planned, applied, replayed and summarised like a sub-agent
file (its usage belongs to it, counted once). A sidechain record whose parent is unknown
starts a thread of its own; one without a uuid joins the last thread.

Tools the API runs (as in :mod:`pipeline.formats.anthropic_messages`): an assistant message's
``server_tool_use`` (web_search, web_fetch, code_execution, ...) and ``mcp_tool_use`` blocks
are tool calls, their ``*_tool_result`` / ``mcp_tool_result`` blocks in the same message are
tool results (role ``tool``, ``subtype`` the block type, payload the block's ``content``;
``is_error`` when the content is a ``*_tool_result_error`` object or the block says
``is_error``), declared to apply by :func:`server_tool_result` / :func:`server_tool_input`.
A call or result block without an id (nothing for apply to find it by) carries ``json_path``
``/message/content/<i>``, the block itself.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.formats.base import (
    CALL_TYPES, COMMAND_WRAPPER, Emitter, Reader, RecordError, anthropic_tool_input,
    anthropic_tool_result, call_timestamp, content_text, dumps, first_json_values,
    first_line_members, is_json_number, refused_by_ccusage, server_tool_input,
    server_tool_result, token_count, unexpected, usage_object,
)
from pipeline.formats.openai_chat import emit_tool_call, emit_tool_result
from pipeline.reports.prices import FAST_SUFFIX, NOT_A_MODEL

# Bookkeeping records: kept in ``records`` only (no message row). Besides snapshots, queue
# operations, progress and attachments, the session metadata lines Claude Code 2.x appends
# (titles, tags, the last prompt, agent name/colour/setting, mode, PR link, worktree state):
# one line each, never sent to the model.
BOOKKEEPING = {"file-history-snapshot", "queue-operation", "progress", "attachment",
               "custom-title", "ai-title", "tag", "last-prompt", "agent-name", "agent-color",
               "agent-setting", "mode", "pr-link", "worktree-state",
               # Claude Code 2.1's session-state lines
               "permission-mode", "bridge-session", "atis-latch", "cost-state"}
# what Claude Code writes as the user's turn when the user stops a request: not a prompt
INTERRUPTED = re.compile(r"^\s*\[Request interrupted by user[^\]\n]*\]\s*$")
KNOWN_TYPES = {"user", "assistant", "summary", "system", *BOOKKEEPING}
BOUNDARY_SUBTYPES = {"compact_boundary", "microcompact_boundary"}


def is_result_type(btype: str) -> bool:
    """``tool_result`` or a server/MCP tool's ``<tool>_tool_result`` block type."""
    return btype == "tool_result" or btype.endswith("_tool_result")


def result_is_error(block: dict) -> bool:
    """A result block's ``is_error``, or a server tool's error content."""
    payload = block.get("content")
    return bool(block.get("is_error")) or (
        isinstance(payload, dict) and isinstance(payload.get("type"), str)
        and payload["type"].endswith("_tool_result_error"))


# the two counts ccusage reads no usage without
REQUIRED_COUNTS = ("input_tokens", "output_tokens")


def _usage_columns(usage: dict) -> dict:
    """The usage columns of a Claude usage object. A usage ccusage reads nothing from raises
    :class:`RecordError` (the line is quarantined, with why), so that the sums agree with its:
    ``input_tokens`` or ``output_tokens`` missing or null, a count :func:`token_count`
    refuses (of the cache-write split too), a split that is not an object or null (probed on
    ccusage 20.0.24)."""
    for key in REQUIRED_COUNTS:
        if usage.get(key) is None:
            raise RecordError(f"message.usage.{key} is {'null' if key in usage else 'missing'}: "
                              "ccusage reads no usage without it, so the line is quarantined so "
                              "that it stays out of the usage sums")
    columns = dict(
        input_tokens=token_count(usage, "input_tokens", "message.usage"),
        output_tokens=token_count(usage, "output_tokens", "message.usage"),
        cache_creation_tokens=token_count(usage, "cache_creation_input_tokens", "message.usage"),
        cache_read_tokens=token_count(usage, "cache_read_input_tokens", "message.usage"),
        cache_write_1h_tokens=None, usage_scope="call")
    split = usage.get("cache_creation")
    if isinstance(split, dict):
        # the cache writes by TTL: their sum is the call's writes, as ccusage counts them
        # (not cache_creation_input_tokens, which Claude Code writes equal to it), the 1-hour
        # part priced at the 1-hour rate
        minutes_5 = token_count(split, "ephemeral_5m_input_tokens", "message.usage.cache_creation")
        hour_1 = token_count(split, "ephemeral_1h_input_tokens", "message.usage.cache_creation")
        columns["cache_creation_tokens"] = (minutes_5 or 0) + (hour_1 or 0)
        columns["cache_write_1h_tokens"] = hour_1
    elif split is not None:
        raise RecordError(unexpected("message.usage.cache_creation", split, "an object or null")
                          + ": " + refused_by_ccusage("a line"))
    return columns


# a version as ccusage 20.0.24 reads it: three dotted numbers first ("2.0.61", "1.0.0-beta.1")
_VERSION = re.compile(r"\d+\.\d+\.\d+")
SPEEDS = ("standard", "fast")


def _ccusage_refusal(obj: dict, message: dict, usage: dict) -> str | None:
    """Why ccusage 20.0.24 reads no usage from a line whose usage object it could read: a
    field its schema checks holds a value it refuses (probed field by field, each with a
    number, null, "", {}, [], true, "x" and absent), or None. A time it cannot read is not a
    refusal here: the call is a "(no date)" row (:func:`call_timestamp`)."""
    for where, container, key in (("sessionId", obj, "sessionId"), ("requestId", obj, "requestId"),
                                  ("message.id", message, "id"), ("message.model", message, "model")):
        if key in container and not (isinstance(container[key], str) and container[key]):
            return unexpected(where, container[key], "a non-empty string")
    if "version" in obj and not (isinstance(obj["version"], str) and _VERSION.match(obj["version"])):
        return unexpected("version", obj["version"], "a version such as 2.0.61")
    sidechain = obj.get("isSidechain")
    if sidechain is not None and not isinstance(sidechain, bool):
        return unexpected("isSidechain", sidechain, "true, false or null")
    if not is_json_number(obj.get("costUSD", 0)):
        return unexpected("costUSD", obj["costUSD"], "a number")
    for key in ("cwd", "isApiErrorMessage"):
        if key in obj and obj[key] is None:
            return unexpected(key, None, "a value (ccusage refuses null there)")
    if "speed" in usage and usage["speed"] not in SPEEDS:
        return unexpected("message.usage.speed", usage["speed"], '"standard" or "fast"')
    return None


def call_columns(obj: dict, message: dict) -> dict:
    """The columns of the API call a line records: ``model``, ``api_call_id`` (see the module
    docstring), the usage counts and ``cost_usd_recorded``. A usage ccusage reads nothing from
    (:func:`_usage_columns`, :func:`_ccusage_refusal`) raises :class:`RecordError`: the line is
    quarantined, with why, so that it stays out of the usage sums as it stays out of ccusage's."""
    columns: dict[str, Any] = {}
    usage = usage_object(message, "usage", "message")
    if usage:
        refusal = _ccusage_refusal(obj, message, usage)
        if refusal is not None:
            raise RecordError(f"{refusal}: {refused_by_ccusage('a line')}")
    mid, rid = message.get("id"), obj.get("requestId")
    model = message.get("model")
    if usage and usage.get("speed") == "fast" and isinstance(model, str) and model \
            and not model.endswith(FAST_SUFFIX) and not NOT_A_MODEL.match(model):
        # fast mode is priced apart (pipeline.reports.prices): named as ccusage names it
        model += FAST_SUFFIX
    columns["model"] = model
    stamp = obj.get("timestamp")
    if mid and rid and isinstance(mid, str) and isinstance(rid, str):
        columns["api_call_id"] = f"{mid}:{rid}"
    elif mid and rid is None and isinstance(mid, str) and isinstance(stamp, str) and stamp:
        columns["api_call_id"] = f"{mid}@{stamp}"
    if usage:
        columns.update(_usage_columns(usage))
    if is_json_number(obj.get("costUSD")):
        # older Claude Code versions record the cost they computed for the call
        columns["cost_usd_recorded"] = float(obj["costUSD"])
    return columns


def _carries_usage(obj: dict) -> bool:
    message = obj.get("message")
    return isinstance(message, dict) and isinstance(message.get("usage"), dict)


class ClaudeCodeReader(Reader):
    name = "claude_code"
    layout = "jsonl"
    append_safe = True
    result_shapes = (anthropic_tool_result, server_tool_result)
    input_shapes = (anthropic_tool_input, server_tool_input)

    @classmethod
    def duplicate_paths(cls, obj: Any, path: tuple) -> list[tuple]:
        """A user line with one tool_result block repeats it in ``toolUseResult``."""
        if isinstance(obj, dict) and len(path) >= 4 and path[:2] == ("message", "content") \
                and "toolUseResult" in obj and isinstance(obj.get("message"), dict):
            blocks = obj["message"].get("content")
            if isinstance(blocks, list) and sum(
                    1 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result") == 1:
                return [("toolUseResult",)]
        return []

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        if not path.endswith(".jsonl"):
            return 0
        score = 20 if "/.claude/" in path else 0
        # a first line longer than the head (a pasted log, a large tool result): its members
        # before the payload (sessionId, type) still say what it is
        for obj in first_json_values(head, 5) or (first_line_members(head),):
            if not isinstance(obj, dict):
                continue
            if "sessionId" in obj and isinstance(obj.get("type"), str) and obj["type"] in KNOWN_TYPES:
                return 95
            if obj.get("type") in ("file-history-snapshot", "summary") and "payload" not in obj:
                score = max(score, 80)
        return score

    def begin(self, state: dict) -> None:
        self.session_id: str | None = state.get("session_id")
        self.seen: set[str] = set(state.get("sessions", []))
        # sessions opened by a line without the session's facts (a resumed session's leading
        # ``summary`` lines carry no cwd, branch or version): the first line that has them
        # adds a second session_info row (the sessions view takes each fact's first non-null)
        self.bare: set[str] = set(state.get("bare_sessions", []))
        self._undo: tuple = (self.session_id, None, None)
        # inline sidechain threads: uuid of a sidechain record -> uuid of its thread's root
        self.threads: dict[str, str] = dict(state.get("sidechain_threads", {}))
        self.last_thread: str | None = state.get("last_sidechain_thread")
        self.thread_names: dict[str, str] = dict(state.get("sidechain_names", {}))

    def finish(self, out: Emitter) -> dict:
        state = {"session_id": self.session_id, "sessions": sorted(self.seen)}
        if self.bare:
            state["bare_sessions"] = sorted(self.bare)
        if self.threads:
            state["sidechain_threads"] = dict(sorted(self.threads.items()))
            state["last_sidechain_thread"] = self.last_thread
            state["sidechain_names"] = dict(sorted(self.thread_names.items()))
        return state

    def _thread_name(self, root: str) -> str:
        name = self.thread_names.get(root)
        if name is None:
            name = root[:8]
            if name in self.thread_names.values():
                name = root
            self.thread_names[root] = name
        return name

    def _thread_of(self, obj: dict) -> str:
        """The root uuid of the inline sidechain thread ``obj`` belongs to."""
        uuid, parent = obj.get("uuid"), obj.get("parentUuid")
        uuid = uuid if isinstance(uuid, str) and uuid else None
        if isinstance(parent, str) and parent in self.threads:
            root = self.threads[parent]
        elif uuid is not None:
            root = uuid
        else:
            root = self.last_thread or "unknown"
        if uuid is not None:
            self.threads[uuid] = root
        self.last_thread = root
        return root

    # ------------------------------------------------------------------------------
    def _session_of(self, obj: dict) -> tuple[str, str | None]:
        base = obj.get("sessionId")
        if isinstance(base, str) and base:
            self.session_id = self.session_id or base
        else:
            base = self.session_id or self.ctx.stem
        agent = obj.get("agentId")
        if isinstance(agent, str) and agent:
            return f"{base}/agent-{agent}", base
        if obj.get("isSidechain") is True:
            return f"{base}/sidechain-{self._thread_name(self._thread_of(obj))}", base
        return base, None

    def rollback(self) -> None:
        self.session_id, opened, completed = self._undo
        if opened is not None:
            self.seen.discard(opened)
            self.bare.discard(opened)
        if completed is not None:
            self.bare.add(completed)

    def _session_row_due(self, session_id: str, rtype: str, has_facts: bool) -> bool:
        """Whether this line writes a session_info row: the first session line of the session,
        or the first with its facts after one without them (``self.bare``)."""
        if session_id not in self.seen and rtype in ("user", "assistant", "system", "summary"):
            self.seen.add(session_id)
            if not has_facts:
                self.bare.add(session_id)
            self._undo = (self._undo[0], session_id, None)
            return True
        if has_facts and session_id in self.bare and rtype in ("user", "assistant", "system"):
            self.bare.discard(session_id)
            self._undo = (self._undo[0], None, session_id)
            return True
        return False

    def _open_session(self, obj: dict, rtype: str, out: Emitter) -> dict:
        """The line's session (its session_info row when due) and the columns every row of
        the line shares."""
        self._undo = (self.session_id, None, None)
        session_id, parent = self._session_of(obj)
        if self._session_row_due(session_id, rtype, isinstance(obj.get("cwd"), str)):
            out.session(
                session_id=session_id, format=self.name, project=obj.get("cwd"),
                git_branch=obj.get("gitBranch") or None, parent_session_id=parent,
                agent_id=obj.get("agentId"), cli_version=obj.get("version"),
                timestamp_raw=call_timestamp(obj.get("timestamp"), keep_other=True),
            )
        return dict(
            session_id=session_id, uuid=obj.get("uuid"), parent_uuid=obj.get("parentUuid"),
            timestamp_raw=call_timestamp(obj.get("timestamp")),
            is_sidechain=obj.get("isSidechain") is True, is_meta=obj.get("isMeta") is True,
        )

    def line(self, obj: dict, out: Emitter) -> str:
        rtype = obj.get("type")
        rtype = rtype if isinstance(rtype, str) else "unknown"
        common = self._open_session(obj, rtype, out)
        # ccusage counts a line's message.usage whatever its type: so does the line's row
        call = call_columns(obj, obj["message"]) \
            if rtype not in ("user", "assistant") and _carries_usage(obj) else {}
        if rtype in ("user", "assistant"):
            self._message(obj, rtype, common, out)
        elif rtype == "summary":
            out.message(role="system", kind="summary", subtype="summary",
                        text=obj.get("summary") if isinstance(obj.get("summary"), str) else "",
                        **common, **call)
        elif rtype == "system":
            subtype = obj.get("subtype") if isinstance(obj.get("subtype"), str) else None
            meta = obj.get("compactMetadata") or obj.get("microcompactMetadata")
            text = obj.get("content") if isinstance(obj.get("content"), str) else ""
            if meta is not None and not text:
                text = dumps(meta)
            out.message(role="system", kind="boundary" if subtype in BOUNDARY_SUBTYPES else "meta",
                        subtype=subtype, text=text, **common, **call)
        elif rtype in BOOKKEEPING:
            if call:
                out.message(role="system", kind="meta", subtype=rtype, text="", **common, **call)
        else:
            out.message(role="system", kind="other", subtype=rtype, text="", **common, **call)
        return rtype

    def unread_line(self, obj: dict, out: Emitter) -> None:
        """A quarantined line whose usage ccusage 20.0.24 still counts (probed: content that
        is not a string or a list of objects, a uuid, parentUuid or cwd that is not a string,
        more content blocks than a line holds): its usage as a usage-only row (role assistant,
        kind meta, subtype ``usage_unreadable``, no text), its session opened as the line
        would have, from the line's string facts. Nothing when ccusage counts nothing."""
        if not _carries_usage(obj):
            return
        try:
            call = call_columns(obj, obj["message"])
        except RecordError:
            return
        facts = {key: obj[key] for key in ("sessionId", "agentId", "isSidechain", "timestamp")
                 if key in obj}
        facts.update({key: obj[key] for key in ("cwd", "gitBranch", "version", "uuid", "parentUuid")
                      if isinstance(obj.get(key), str)})
        common = dict(self._open_session(facts, "assistant", out), is_meta=True)
        out.message(role="assistant", kind="meta", subtype="usage_unreadable", text="",
                    is_prompt=False, json_path="/message/usage", **common, **call)

    def _message(self, obj: dict, rtype: str, common: dict, out: Emitter) -> None:
        message = obj.get("message")
        if not isinstance(message, dict):
            raise RecordError(f"a '{rtype}' record needs a 'message' object, found "
                              f"{type(message).__name__}")
        role = message.get("role") if message.get("role") in ("user", "assistant") else rtype
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise RecordError("message.content must be a string or a list of blocks, found "
                              f"{type(content).__name__}")
        usage_cols: dict[str, Any] = {}
        if role == "assistant" or message.get("usage") is not None:
            # ccusage counts a usage whatever the line's role (a user line with one too)
            usage_cols = call_columns(obj, message)
            common["model"] = usage_cols.pop("model")
            if "api_call_id" in usage_cols:
                common["api_call_id"] = usage_cols.pop("api_call_id")
        special = None
        if obj.get("isCompactSummary"):
            special = "summary"
        elif common["is_meta"]:
            special = "meta"
        if isinstance(content, str) or content is None:
            blocks = [{"type": "text", "text": content or ""}]
        else:
            blocks = content
        if not blocks:
            blocks = [{"type": "text", "text": ""}]
        cwd = obj.get("cwd")
        for index, block in enumerate(blocks):
            if not isinstance(block, dict):
                raise RecordError(f"content block {index} is a {type(block).__name__}, "
                                  "expected an object")
            row = dict(common)
            if index == 0:
                row.update(usage_cols)
            btype = block.get("type")
            if btype == "text":
                text = block.get("text") if isinstance(block.get("text"), str) else ""
                kind = special or "text"
                is_prompt = False
                if role == "user" and kind == "text":
                    if COMMAND_WRAPPER.match(text) or INTERRUPTED.match(text):
                        kind = "meta"
                    else:
                        # in a sub-agent session (agent file or inline sidechain thread) the
                        # "user" text is the parent agent's Task prompt: its own prompt
                        is_prompt = bool(text.strip())
                out.message(role=role, kind=kind, text=text, is_prompt=is_prompt, **row)
            elif btype in ("thinking", "redacted_thinking"):
                out.message(role=role, kind="thinking", subtype=btype,
                            text=block.get("thinking") or "", **row)
            elif isinstance(btype, str) and btype in CALL_TYPES:
                # tool_use; server_tool_use / mcp_tool_use (subtype: the block type)
                input_obj = block.get("input")
                input_json = dumps(input_obj) if input_obj is not None else "{}"
                if btype != "tool_use":
                    row["subtype"] = btype
                if not block.get("id"):    # no id for apply to find the block by: its place
                    row["json_path"] = f"/message/content/{index}"
                emit_tool_call(out, dict(row, role=role), call_id=block.get("id"),
                               name=block.get("name"), input_obj=input_obj,
                               input_json=input_json, cwd=cwd)
            elif isinstance(btype, str) and is_result_type(btype):
                # tool_result (user line); a server/MCP tool's result (assistant line)
                if btype != "tool_result":
                    row["subtype"] = btype
                if not block.get("tool_use_id"):
                    row["json_path"] = f"/message/content/{index}"
                emit_tool_result(out, row, call_id=block.get("tool_use_id"), name=None,
                                 payload=block.get("content"), is_error=result_is_error(block))
            else:
                out.message(role=role, kind="other", subtype=str(btype), text=content_text([block]),
                            **row)
