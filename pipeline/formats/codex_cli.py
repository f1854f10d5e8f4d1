"""Codex CLI rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``.

Two forms, one public format (every ``session_info.format`` row says ``codex_cli``); one
reader class has one layout, so each form has its own registry key:

- ``codex_cli`` (:class:`CodexCliReader`, JSONL, the Rust CLI), below;
- ``codex_cli_json`` (:class:`CodexCliJsonReader`, document): the TypeScript CLI's
  ``~/.codex/sessions/rollout-<YYYY-MM-DD>-<uuid>.json`` (until mid-2025), one pretty-printed
  ``{"session": {timestamp, id, instructions}, "items": [...]}`` rewritten whole on every
  item; its items are read as ``response_item`` payloads (``json_path`` ``/items/<i>``).

Two line shapes of the JSONL form (docs/formats.md):

- current: ``{timestamp, type, payload}`` with ``type`` in ``session_meta``, ``turn_context``,
  ``response_item``, ``event_msg``, ``compacted`` (any other type is kept as a system row of
  kind ``other``);
- older (mid-2025): line 1 a bare ``{id, timestamp, instructions, git?}`` header, then
  ``{"record_type": "state"}`` lines and bare response items without envelope or timestamp.

Message source: the ``response_item`` stream (what the model was sent and returned, tool calls
included). The ``event_msg`` copies of it (``user_message``, ``agent_message``,
``agent_reasoning``, ``agent_reasoning_raw_content``, ``context_compacted``) stay in
``records`` only, so nothing is counted twice; ``turn_aborted``, review-mode and undo events
become system ``meta`` rows, unknown events system ``other`` rows.

Rows per response item (one row per item; a message's text items are joined by newlines):

- ``message``: role user -> kind text and ``is_prompt``, except the context Codex injects as
  user messages (``<environment_context>``, ``<user_instructions>``, ``# AGENTS.md
  instructions``, ``<turn_aborted>``, ``<user_shell_command>``, ...: kind meta, not a prompt);
  role assistant -> kind text with the model of the latest ``turn_context``; developer/system
  -> role system, kind meta.
- ``reasoning`` -> kind thinking (the ``summary`` texts; the raw ``content`` when no summary).
- ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` / ``web_search_call`` /
  ``tool_search_call`` -> kind tool_use + a ``tool_calls`` row (``input_json``: the
  ``arguments`` JSON text as written, the custom tool's ``input`` string as a JSON string, the
  action object, the tool search's ``arguments`` object); ``cwd`` is the latest known cwd.
  A tool search (``{call_id, execution: client|server, status?, arguments}``, call_id null
  when the server ran it) is tool ``tool_search``.
- ``function_call_output`` / ``custom_tool_call_output`` / ``local_shell_call_output``
  (TypeScript CLI) -> role tool, kind tool_result + a ``tool_results`` row. There is no
  is_error field: a result is an error when its output starts with ``Exit code: N`` (N != 0),
  when a JSON output has ``metadata.exit_code != 0``, or when a structured output says
  ``success: false``. ``tool_search_output{call_id, status, execution, tools}`` -> the same,
  tool ``tool_search``, text the compact JSON of ``tools`` (the loaded tool definitions),
  ``payload_shape`` json, never an error. The rows of a tool search carry ``json_path`` the
  payload itself (``/payload/arguments``, ``/payload/tools``): a search the server ran has
  ``call_id: null`` on both items, so apply could not find them by call id.
- ``ghost_snapshot`` (undo bookkeeping, never sent to the model) -> ``records`` only;
  ``compaction`` items (encrypted) -> system ``other``.
- A ``compacted`` line -> a ``boundary`` row, then the context Codex continued from. Without
  ``replacement_history`` (older rollouts; null or empty alike): a role user ``summary`` row
  (subtype ``compacted``) holding its ``message``. With it (remote compaction since Nov
  2025, local since Feb 2026: the response items that replaced the whole history, written
  nowhere else in the file), one row per item, so that the live context after the boundary
  is what the model was given, and nothing in it counts again: no prompt, no reply, no
  call, no usage. User and assistant messages -> kind ``summary``, subtype ``compacted`` for the one whose text is the
  line's ``message`` (local compaction ends its list with it) and ``replacement_history``
  for the others (earlier user messages Codex keeps, re-sent copies); injected context and
  developer messages -> kind meta as above; ``ghost_snapshot`` -> nothing; any other item
  (the remote compaction's encrypted ``compaction``) -> system ``other`` with its type as
  subtype. A non-empty ``message`` that no item repeats keeps its own summary row, first;
  an empty one (remote compaction) has none. These rows carry ``json_path``
  ``/payload/replacement_history/<i>``.

Usage: ``token_count`` events carry running totals and each total is written twice (the
first event of a turn even has ``info: null``), so the reader keeps the last
``total_token_usage``, skips an event repeating it, and emits each other event's call (its
``last_token_usage``, else the total's increase: as ccusage counts) on one row (role assistant, kind
``other``, subtype ``token_count``, empty text, ``usage_scope = "call"``, no
``api_call_id``). Codex's ``input_tokens`` INCLUDES ``cached_input_tokens`` and its
``output_tokens`` includes ``reasoning_output_tokens``; rows store ``input_tokens = input -
cached``, ``cache_read_tokens = cached``, ``output_tokens = output``, ``reasoning_tokens =
reasoning`` (a part of output), so ``input + cache_read + output`` is the API total, as with
Claude Code. A total that goes DOWN (a restarted count) starts a new baseline: its delta is
the new total itself. A usage row before any ``turn_context`` names a model (older rollouts
name none) is recorded as ``gpt-5`` (:data:`MODEL_WHEN_UNRECORDED`), as ccusage prices it.
A count is read as ccusage reads it (:func:`_count`): a negative, fractional or
non-numeric count is 0, a string holding an integer is that integer; such a count no longer
quarantines its line (one of 2^63 to 2^64 still does).

Forks: a forked or spawned rollout (``forked_from_id``, ``source.subagent.thread_spawn``)
copies its parent's rollout after its own ``session_meta``, the parent's ``session_meta``
included, token_count events and all (written again, with the fork's times or the
original ones), and its running total goes on from the parent's. Counted per file, the
parent's calls would count once more in every fork. So each usage row's ``uuid`` is the
fingerprint of the total it closes, ``"<lineage root>:<input>:<cached>:<output>:<reasoning>"``,
where the lineage root is the id of the latest ``session_meta`` read that is neither a fork
nor a spawned thread (before the copied ones, the fork's parent; else the session's own id):
a copied event has the same fingerprint in the parent's file and in each fork's, and the
usage views count one fingerprint once across the lake (``call_key``), in the session that recorded it first, as Claude Code's copied
``message.id:requestId``. The transcripts stay whole: a fork keeps its copied rows.

State kept across appends (``begin``/``finish``): session id, cwd, model, the last total
usage, the lineage root, the names of calls still waiting for their output, whether the
session row was written. Session: ``session_id`` = the first ``session_meta.id`` (else the uuid in the file
name), ``project`` = its cwd, ``git_branch``, ``cli_version``; a sub-agent rollout
(``source: {"subagent": ...}``) gets ``agent_id`` (the sub-agent kind or nickname) and, for a
spawned thread, ``parent_session_id``. Later ``session_meta`` lines stay in ``records``.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from pipeline.formats.base import (
    Emitter, Reader, RecordError, dumps, first_json_values, json_type_name, nested_value,
    refused_by_ccusage, responses_tool_input, responses_tool_result, str_or_none, tool_family,
    unexpected,
)

FORMAT = "codex_cli"
LINE_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
# event_msg payloads that repeat a response_item (the message source): records only
DUPLICATE_EVENTS = {"user_message", "agent_message", "agent_reasoning",
                    "agent_reasoning_raw_content", "agent_reasoning_section_break",
                    "context_compacted"}
META_EVENTS = {"turn_aborted", "entered_review_mode", "exited_review_mode", "undo_completed"}
TOTAL_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
# user-role messages Codex writes itself (context, instructions, markers): not human prompts
CONTEXTUAL = re.compile(
    r"^\s*(?:<(?:environment_context|user_instructions|turn_aborted|context_update|"
    r"subagent_notification|tool_context|reasoning_context|pinned_notes|skill|"
    r"user_shell_command)>|# AGENTS\.md instructions)", re.IGNORECASE)
CONTEXT_TAG = re.compile(r"^\s*<([a-z_]+)>", re.IGNORECASE)
EXIT_CODE = re.compile(r"\s*Exit code: (-?\d+)")
# unified exec (``exec_command``/``write_stdin``): header lines, then ``Output:``
PROCESS_EXITED = re.compile(r"\s*(?:Chunk ID|Wall time):[^\n]*\n(?:(?!Output:)[^\n]*\n){0,5}?"
                            r"Process exited with code (-?\d+)\n")
ROLLOUT_UUID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")
MAX_PENDING_CALLS = 512
CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call",
              "tool_search_call")
# The model a usage row is priced as when no turn_context (or session_meta) of the rollout
# has named one yet: Codex CLI's default when those rollouts were written, and what ccusage
# assumes for them (its "isFallback" model), so that both price them alike.
MODEL_WHEN_UNRECORDED = "gpt-5"
# the tool names of the calls whose input is a typed ``action`` object, not arguments
TYPED_ACTION_TOOLS = ("local_shell", "web_search")
# ``local_shell_call_output``: the TypeScript CLI's answer to a local_shell_call
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
# the whole-JSON rollout of the TypeScript CLI: ``{"session": {...}, "items": [...]}``
DOCUMENT_HEAD = re.compile(rb'\A\s*\{\s*"session"\s*:\s*\{')


def items_text(items: Any) -> str:
    """Text of a list of content items (``input_text``/``output_text``/...); media as ``[type]``."""
    if isinstance(items, str):
        return items
    if not isinstance(items, list):
        return "" if items is None else dumps(items)
    parts = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif isinstance(item, dict) and isinstance(item.get("type"), str):
            parts.append(f"[{item['type']}]")
        elif isinstance(item, str):
            parts.append(item)
        else:
            parts.append(dumps(item))
    return "\n".join(parts)


def output_failed(text: str) -> bool:
    """``Exit code: N`` (N != 0) at the start, ``Process exited with code N`` among a unified
    exec output's header lines, or ``metadata.exit_code != 0`` in a JSON output."""
    match = EXIT_CODE.match(text) or PROCESS_EXITED.match(text)
    if match:
        return int(match.group(1)) != 0
    if text.lstrip().startswith("{"):
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            return False
        if isinstance(obj, dict):
            meta = obj.get("metadata")
            if isinstance(meta, dict) and isinstance(meta.get("exit_code"), int):
                return meta["exit_code"] != 0
            if obj.get("success") is False:
                return True
    return False


def output_payload(output: Any) -> tuple[str, str, bool]:
    """(text, payload_shape, is_error) of a ``*_call_output.output``."""
    if isinstance(output, str):
        return output, "string", output_failed(output)
    if isinstance(output, list):
        return items_text(output), "blocks", False
    if isinstance(output, dict):
        content = output.get("content")
        if isinstance(content, str):
            return content, "text_object", output.get("success") is False or output_failed(content)
        if isinstance(content, list):
            return items_text(content), "blocks", output.get("success") is False
        return dumps(output), "json", output.get("success") is False
    return ("" if output is None else dumps(output)), "json", False


def check_response_items(items: list, where: str) -> None:
    """Each of ``items`` a response item object (:func:`check_response_item`): checked
    before anything is emitted, so that a bad item quarantines its line whole, with a reason
    naming it (``<where>[i]``)."""
    for index, item in enumerate(items):
        check_response_item(item, f"{where}[{index}]")


def check_response_item(item: Any, label: str) -> None:
    """``item`` a response item object, and a message's content a list or a string."""
    if not isinstance(item, dict):
        raise RecordError(f"{label} must be a response item object, found {type(item).__name__}")
    content = item.get("content")
    if item.get("type") == "message" and content is not None \
            and not isinstance(content, (list, str)):
        raise RecordError(f"{label}.content must be a list of content items, "
                          f"found {type(content).__name__}")


def codex_tool_result(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """Codex's own result items beyond the Responses pair: ``local_shell_call_output{call_id,
    output}`` (TypeScript CLI) and ``tool_search_output{call_id, tools}``."""
    if d.get("call_id") != call_id:
        return None
    kind = d.get("type")
    if kind == "local_shell_call_output" and "output" in d:
        return [here + ("output",)]
    if kind == "tool_search_output" and "tools" in d:
        return [here + ("tools",)]
    return None


def codex_tool_input(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """``tool_search_call{call_id, arguments}`` (``arguments`` is a JSON object, not a string)."""
    if d.get("type") == "tool_search_call" and d.get("call_id") == call_id and "arguments" in d:
        return [here + ("arguments",)]
    return None


def _rollout_line(value: Any, *, whole: bool = True) -> bool:
    """Whether a JSON value is a current rollout's line: an object whose ``type`` is one of
    its line types, with a ``payload`` object (``whole=False``: whatever its payload)."""
    return isinstance(value, dict) and isinstance(value.get("type"), str) \
        and value["type"] in LINE_TYPES and (not whole or isinstance(value.get("payload"), dict))


class CodexCliReader(Reader):
    name = "codex_cli"
    layout = "jsonl"
    result_shapes = (responses_tool_result, codex_tool_result)
    input_shapes = (responses_tool_input, codex_tool_input)
    append_safe = True

    @classmethod
    def input_clearable(cls, call_id: str | None, tool_name: str | None = None) -> bool:
        """A ``local_shell_call`` or ``web_search_call`` has no arguments: its input is the
        typed ``action`` object (``{type: exec, command, ...}``, ``{type: search, query}``)
        that Codex reads back on resume, so ``clear_input`` leaves it alone (its output is
        still cleared)."""
        return tool_name not in TYPED_ACTION_TOOLS

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        if not path.endswith(".jsonl"):
            return 0
        name = path.rsplit("/", 1)[-1]
        rollout = name.startswith("rollout-")
        values = first_json_values(head, 3)
        if values and isinstance(values[0], dict):
            first = values[0]
            # a rollout line; or one whose payload is damaged or missing (quarantined on its
            # own) before rollout lines: ccusage reads the rest of the file, so does ctxlake
            if _rollout_line(first) or _rollout_line(first, whole=False) and len(values) > 1 \
                    and all(_rollout_line(value) for value in values[1:]):
                return 95
            if isinstance(first.get("id"), str) and "timestamp" in first and "type" not in first \
                    and not {"messages", "role", "sessionId", "payload"} & first.keys():
                state_next = len(values) > 1 and isinstance(values[1], dict) \
                    and values[1].get("record_type") == "state"
                if "instructions" in first or state_next or rollout:
                    return 90
            return 0
        if head.startswith(b'{"timestamp":') and b'"type":"session_meta"' in head[:256]:
            return 90
        return 30 if rollout and "/.codex/" in path else 0

    # -- state -------------------------------------------------------------------------
    def begin(self, state: dict) -> None:
        self.session_id: str | None = state.get("session_id")
        self.cwd: str | None = state.get("cwd")
        self.model: str | None = state.get("model")
        self.last_total: dict | None = state.get("last_total")
        self.root: str | None = state.get("root")
        self.calls: dict[str, str | None] = dict(state.get("calls") or {})
        self.session_emitted: bool = bool(state.get("session_emitted"))
        # the JSON pointer of the object being read: set for a document's rows only
        self.where: str | None = None

    def finish(self, out: Emitter) -> dict:
        return {"session_id": self.session_id, "cwd": self.cwd, "model": self.model,
                "last_total": self.last_total, "root": self.root, "calls": self.calls,
                "session_emitted": self.session_emitted}

    # -- lines -------------------------------------------------------------------------
    def rollback(self) -> None:
        (self.session_id, self.cwd, self.model, self.last_total,
         self.session_emitted, self.root) = self._undo

    def line(self, obj: dict, out: Emitter) -> str:
        self._undo = (self.session_id, self.cwd, self.model, self.last_total,
                      self.session_emitted, self.root)
        ltype = obj.get("type")
        if isinstance(ltype, str) and (ltype in LINE_TYPES or "payload" in obj):
            payload = obj.get("payload")
            if not isinstance(payload, dict):
                raise RecordError(f"a '{ltype}' line needs a 'payload' object, found "
                                  f"{json_type_name(payload) if 'payload' in obj else 'none'}")
            ts = str_or_none(obj.get("timestamp"))
            if ltype == "session_meta":
                self._session_meta(payload, ts, out)
            elif ltype == "turn_context":
                self.cwd = str_or_none(payload.get("cwd")) or self.cwd
                self.model = str_or_none(payload.get("model")) or self.model
            elif ltype == "response_item":
                self._item(payload, ts, out, "/payload")
            elif ltype == "event_msg":
                self._event(payload, ts, out)
            elif ltype == "compacted":
                self._compacted(payload, ts, out)
            else:
                out.message(role="system", kind="other", subtype=ltype, text="",
                            **self._common(ts, out))
            return ltype
        if obj.get("record_type") is not None:
            return str(obj["record_type"])
        if isinstance(ltype, str):
            self._item(obj, None, out, "")
            return "response_item"
        if isinstance(obj.get("id"), str) and ("timestamp" in obj or "instructions" in obj):
            self._session_meta(obj, str_or_none(obj.get("timestamp")), out)
            return "session_meta"
        return "unknown"

    # -- pieces ------------------------------------------------------------------------
    def _fallback_session_id(self) -> str:
        match = ROLLOUT_UUID.search(self.ctx.stem)
        return match.group(1) if match else self.ctx.stem

    def _session_meta(self, meta: dict, ts: str | None, out: Emitter) -> None:
        sid = str_or_none(meta.get("id"))
        if self.session_id is None:
            self.session_id = sid or self._fallback_session_id()
        if self.cwd is None:
            self.cwd = str_or_none(meta.get("cwd"))
        source = meta.get("source")
        spawned = isinstance(source, dict) and isinstance(source.get("subagent"), dict) \
            and "thread_spawn" in source["subagent"]
        if sid is not None and meta.get("forked_from_id") is None and not spawned:
            # a root of the lineage: this file's own, or a parent's copied into a fork
            self.root = sid
        elif self.root is None:
            # a fork's own meta: its parent until the copied metas name the root
            self.root = str_or_none(meta.get("forked_from_id")) or str_or_none(
                nested_value(source, "subagent", "thread_spawn", "parent_thread_id"))
        if self.session_emitted or (sid is not None and sid != self.session_id):
            return
        git = meta.get("git") if isinstance(meta.get("git"), dict) else {}
        parent = agent = None
        if isinstance(source, dict) and "subagent" in source:
            sub = source["subagent"]
            if isinstance(sub, str):
                agent = sub
            elif isinstance(sub, dict):
                spawn = sub.get("thread_spawn")
                if isinstance(spawn, dict):
                    parent = str_or_none(spawn.get("parent_thread_id"))
                    agent = str_or_none(spawn.get("agent_nickname")) \
                        or str_or_none(spawn.get("agent_role")) or "thread_spawn"
                else:
                    agent = next(iter(sub), None)
        extra = {k: meta[k] for k in ("originator", "source", "model_provider", "git",
                                      "agent_nickname", "agent_role")
                 if meta.get(k) is not None}
        out.session(session_id=self.session_id, format=FORMAT, project=self.cwd,
                    git_branch=str_or_none(git.get("branch")) or None, parent_session_id=parent,
                    agent_id=agent, cli_version=str_or_none(meta.get("cli_version")),
                    timestamp_raw=str_or_none(meta.get("timestamp")) or ts, meta_json=dumps(extra),
                    **self._where())
        self.session_emitted = True

    def _common(self, ts: str | None, out: Emitter) -> dict:
        if self.session_id is None:
            self.session_id = self._fallback_session_id()
        if not self.session_emitted:
            out.session(session_id=self.session_id, format=FORMAT, project=self.cwd,
                        timestamp_raw=ts, meta_json="{}", **self._where())
            self.session_emitted = True
        return dict(session_id=self.session_id, timestamp_raw=ts, is_sidechain=False,
                    is_prompt=False, **self._where())

    def _where(self) -> dict:
        return {} if self.where is None else {"json_path": self.where}

    def _compacted(self, payload: dict, ts: str | None, out: Emitter) -> None:
        """A boundary, then the context the model was given from then on: the items of
        ``replacement_history`` (one row each, never a prompt), else the ``message`` summary."""
        message = str_or_none(payload.get("message")) or ""
        history = payload.get("replacement_history")
        if history is not None and not isinstance(history, list):
            raise RecordError("replacement_history must be a list of response items, found "
                              f"{type(history).__name__}")
        if isinstance(history, list):
            check_response_items(history, "replacement_history")
        common = self._common(ts, out)
        out.message(role="system", kind="boundary", subtype="compacted", text="", **common)
        if not history:   # absent (older rollouts), null or empty: the summary alone
            out.message(role="user", kind="summary", subtype="compacted", text=message, **common)
            return
        texts = [items_text(item.get("content")) for item in history
                 if item.get("type") == "message"]
        if message and message not in texts:
            out.message(role="user", kind="summary", subtype="compacted", text=message, **common)
        for index, item in enumerate(history):
            self._replacement_item(item, index, message, common, out)

    def _replacement_item(self, item: dict, index: int, message: str, common: dict,
                          out: Emitter) -> None:
        """One ``replacement_history`` item: copies of earlier context (retained user
        messages, the summary, injected context), never prompts, replies or calls."""
        itype = item.get("type")
        if itype == "ghost_snapshot":
            return
        row = dict(common, uuid=str_or_none(item.get("id")),
                   json_path=f"/payload/replacement_history/{index}")
        if itype != "message":
            out.message(role="system", kind="other", subtype=str(itype), text="", **row)
            return
        text = items_text(item.get("content"))
        role = item.get("role")
        if role == "user" and CONTEXTUAL.match(text):
            tag = CONTEXT_TAG.match(text)
            out.message(role="user", kind="meta",
                        subtype=tag.group(1).lower() if tag else "instructions", text=text,
                        is_meta=True, **row)
        elif role in ("user", "assistant"):
            subtype = "compacted" if message and text == message else "replacement_history"
            out.message(role=role, kind="summary", subtype=subtype, text=text, **row)
        else:
            out.message(role="system", kind="meta", subtype=str(role), text=text, is_meta=True,
                        **row)

    def _remember_call(self, call_id: str | None, name: str | None) -> None:
        if not call_id:
            return
        self.calls[call_id] = name
        while len(self.calls) > MAX_PENDING_CALLS:
            del self.calls[next(iter(self.calls))]

    def _item(self, item: dict, ts: str | None, out: Emitter, path: str) -> None:
        """One response item; ``path``: its JSON pointer in the line or document."""
        itype = item.get("type")
        content = item.get("content")
        if itype == "message" and content is not None and not isinstance(content, (list, str)):
            # checked before anything is emitted or remembered: the line is quarantined whole
            raise RecordError("message.content must be a list of content items, found "
                              f"{type(content).__name__}")
        if itype == "ghost_snapshot":
            return
        common = self._common(ts, out)
        common["uuid"] = str_or_none(item.get("id"))
        if itype in ("tool_search_call", "tool_search_output"):
            # the payload itself (``arguments`` / ``tools``): a search the server ran has no
            # call_id for apply to find its item by
            common["json_path"] = path + ("/arguments" if itype == "tool_search_call" else "/tools")
        if itype == "message":
            text = items_text(content)
            role = item.get("role")
            if role == "user":
                if CONTEXTUAL.match(text):
                    tag = CONTEXT_TAG.match(text)
                    out.message(role="user", kind="meta",
                                subtype=tag.group(1).lower() if tag else "instructions",
                                text=text, is_meta=True, **common)
                else:
                    out.message(**dict(common, role="user", kind="text", text=text, is_meta=False,
                                       is_prompt=bool(text.strip())))
            elif role == "assistant":
                out.message(role="assistant", kind="text", text=text, model=self.model,
                            is_meta=False, **common)
            else:
                out.message(role="system", kind="meta", subtype=str(role), text=text,
                            is_meta=True, **common)
        elif itype == "reasoning":
            text = items_text(item.get("summary"))
            if not text and item.get("content"):
                text = items_text(item.get("content"))
            out.message(role="assistant", kind="thinking", text=text, model=self.model,
                        is_meta=False, **common)
        elif itype in CALL_TYPES:
            self._tool_call(item, itype, common, out)
        elif itype in OUTPUT_TYPES or itype == "tool_search_output":
            call_id = str_or_none(item.get("call_id"))
            if itype == "tool_search_output":
                # the definitions of the tools the search loaded: no error field
                output = item.get("tools")
                text, shape, is_error = ("" if output is None else dumps(output)), "json", False
            else:
                output = item.get("output")
                text, shape, is_error = output_payload(output)
            name = self.calls.pop(call_id, None) if call_id else None
            if name is None and itype == "tool_search_output":
                name = "tool_search"
            msg = out.message(role="tool", kind="tool_result", text=text, call_id=call_id,
                              tool_name=name, is_meta=False, **common)
            out.tool_result(seq=msg["seq"], block_no=msg["block_no"], session_id=self.session_id,
                            call_id=call_id, tool_name=name, is_error=is_error,
                            payload_shape=shape, payload=output, timestamp_raw=ts,
                            json_path=common.get("json_path"))
        else:
            out.message(role="system", kind="other", subtype=str(itype), text="", **common)

    def _tool_call(self, item: dict, itype: str, common: dict, out: Emitter) -> None:
        if itype == "function_call":
            name = str_or_none(item.get("name"))
            raw = item.get("arguments")
            parsed: Any = None
            if isinstance(raw, str):
                try:
                    parsed = orjson.loads(raw)
                    input_json = raw
                except orjson.JSONDecodeError:
                    input_json = dumps(raw)
                text = raw
            else:
                parsed = raw
                input_json = dumps(raw) if raw is not None else "{}"
                text = input_json
        elif itype == "custom_tool_call":
            name = str_or_none(item.get("name"))
            raw = item.get("input")
            parsed = raw
            text = raw if isinstance(raw, str) else dumps(raw)
            input_json = dumps(raw)
        elif itype == "tool_search_call":
            # ``arguments`` is a JSON object here (``{query, limit}``; ``{paths}`` when the
            # search ran on the server), not a string
            name = "tool_search"
            parsed = item.get("arguments")
            input_json = dumps(parsed) if parsed is not None else "{}"
            text = input_json
        else:  # local_shell_call / web_search_call: the action object is the input
            name = TYPED_ACTION_TOOLS[0] if itype == "local_shell_call" else TYPED_ACTION_TOOLS[1]
            parsed = item.get("action")
            input_json = dumps(parsed) if parsed is not None else "{}"
            text = input_json
        call_id = str_or_none(item.get("call_id")) or (None if itype == "function_call"
                                                 else str_or_none(item.get("id")))
        self._remember_call(call_id, name)
        msg = out.message(role="assistant", kind="tool_use", text=text, call_id=call_id,
                          tool_name=name, model=self.model, is_meta=False, **common)
        out.tool_call(seq=msg["seq"], block_no=msg["block_no"], session_id=self.session_id,
                      call_id=call_id, tool_name=name, tool_family=tool_family(name, parsed),
                      input_json=input_json, cwd=self.cwd, timestamp_raw=common["timestamp_raw"],
                      json_path=common.get("json_path"))

    def _event(self, event: dict, ts: str | None, out: Emitter) -> None:
        etype = event.get("type")
        etype = etype if isinstance(etype, str) else str(etype)
        if etype in DUPLICATE_EVENTS:
            return
        if etype == "token_count":
            info = event.get("info")
            if isinstance(info, dict):
                self._usage(info, ts, out)
            return
        common = self._common(ts, out)
        if etype in META_EVENTS:
            text = str_or_none(event.get("reason")) or str_or_none(event.get("message")) or ""
            out.message(role="system", kind="meta", subtype=etype, text=text, is_meta=True,
                        **common)
        else:
            out.message(role="system", kind="other", subtype=str(etype), text="", **common)

    def _usage(self, info: dict, ts: str | None, out: Emitter) -> None:
        """One ``token_count`` event's call, counted as ccusage counts it (probed on 20.0.24):
        an event repeating the last total is the same call again (none); else the call is its
        ``last_token_usage`` when the event has one, else the total's increase (a total that
        went down: the total itself); cached input is at most the input."""
        total, call = info.get("total_token_usage"), info.get("last_token_usage")
        for where, counts in (("total_token_usage", total), ("last_token_usage", call)):
            for key in (*TOTAL_KEYS, "total_tokens"):
                value = counts.get(key) if isinstance(counts, dict) else None
                if isinstance(value, (dict, list)):
                    # ccusage 20.0.24 reads no usage from such an event (probed on each count
                    # of both objects): out of the usage sums too, with why
                    raise RecordError(unexpected(f"payload.info.{where}.{key}", value, "a count")
                                      + ": " + refused_by_ccusage("an event", "the line"))
        previous = {k: _count((self.last_total or {}).get(k)) for k in TOTAL_KEYS}
        delta = None if not isinstance(call, dict) else \
            {k: _count(call.get(k)) for k in TOTAL_KEYS}
        if isinstance(total, dict):
            current = {k: _count(total.get(k)) for k in TOTAL_KEYS}
            if self.last_total is not None and current == previous:
                return
            if delta is None:
                went_down = any(current[k] < previous[k] for k in TOTAL_KEYS)
                delta = current if self.last_total is None or went_down else \
                    {k: current[k] - previous[k] for k in TOTAL_KEYS}
        elif delta is not None:
            # no total: the running total is this reader's sum of the calls (their fingerprint)
            current = {k: previous[k] + delta[k] for k in TOTAL_KEYS}
        else:
            return
        self.last_total = current
        if not any(delta.values()):
            return
        cached = min(delta["cached_input_tokens"], delta["input_tokens"])
        common = self._common(ts, out)
        fingerprint = ":".join([self.root or self.session_id,
                                *(str(current[k]) for k in TOTAL_KEYS)])
        out.message(role="assistant", kind="other", subtype="token_count", text="",
                    model=self.model or MODEL_WHEN_UNRECORDED, is_meta=False, uuid=fingerprint,
                    input_tokens=max(delta["input_tokens"] - cached, 0),
                    output_tokens=delta["output_tokens"], cache_read_tokens=cached,
                    reasoning_tokens=delta["reasoning_output_tokens"], usage_scope="call",
                    **common)


# an unsigned integer: its significant digits (more than 20 are beyond 64 bits)
_DIGITS = re.compile(r"\+?0*([0-9]{1,20})")


def _count(value: Any) -> int:
    """A count of a ``token_count`` event as ccusage 20.0.24 reads it (probed): a JSON
    integer from 0 up, or a string holding one (``" 10"``, ``"+10"``, ``"010"``: 10); anything
    else is 0 (a negative count, one written ``10.0`` or ``10.7``, ``"1e1"``, ``"-5"``, a
    boolean, null, a count beyond 64 bits). A count from 2^63 to 2^64 is kept as it is, for
    the row check to quarantine: no table holds it."""
    if isinstance(value, str):
        digits = _DIGITS.fullmatch(value.strip())
        value = int(digits.group(1)) if digits else 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2 ** 64:
        return 0
    return value


class CodexCliJsonReader(CodexCliReader):
    """The TypeScript CLI's whole-JSON rollout (until mid-2025): ``~/.codex/sessions/
    rollout-<YYYY-MM-DD>-<uuid>.json``, one pretty-printed document ``{"session": {timestamp,
    id, instructions}, "items": [response items]}``, rewritten whole on every new item
    (registry key ``codex_cli_json``; its sessions' format is ``codex_cli``). The items are
    read as the JSONL form's ``response_item`` payloads; rows carry ``line_no = 1`` and
    ``json_path`` ``/items/<i>`` (the session row ``/session``). Items have no timestamps and
    the file records neither model, cwd nor usage."""

    name = "codex_cli_json"
    layout = "document"
    append_safe = False

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        if not path.endswith(".json") or path.endswith(".traj.json"):
            return 0
        if not DOCUMENT_HEAD.match(head.lstrip(b"\xef\xbb\xbf")):
            return 0
        name = path.rsplit("/", 1)[-1]
        if name.startswith("rollout-"):
            return 95
        if "/.codex/" in path:
            return 90
        return 70 if b'"items"' in head else 0

    def document(self, obj: Any, out: Emitter) -> str:
        if not isinstance(obj, dict):
            raise RecordError("a Codex CLI JSON rollout holds an object, found "
                              f"{type(obj).__name__}")
        session, items = obj.get("session"), obj.get("items")
        if session is not None and not isinstance(session, dict):
            raise RecordError(f"a Codex CLI JSON rollout's 'session' must be an object, found "
                              f"{type(session).__name__}")
        if not isinstance(items, list):
            raise RecordError(f"a Codex CLI JSON rollout needs an 'items' list, found "
                              f"{type(items).__name__}")
        self.begin({})
        if isinstance(session, dict):
            self.where = "/session"
            self._session_meta(session, str_or_none(session.get("timestamp")), out)
        # an item that cannot be read costs that item, not the rollout
        for index, item in enumerate(items):
            self.where = f"/items/{index}"
            out.read_element(f"items[{index}]", item, lambda index=index, item=item: (
                check_response_item(item, f"items[{index}]"), self._item(item, None, out, self.where)))
        if not items:
            self.where = None
            self._common(None, out)   # the session row of an empty rollout
        return "rollout"
