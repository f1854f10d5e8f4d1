"""OpenAI chat-completions message logs (``openai_chat``, ``*.jsonl``).

Two line shapes, chosen per line (docs/formats.md):

- one conversation per line ``{"id"?, "model"?, "usage"?, "messages": [...]}``: the session is
  the conversation ``id``, else ``"<file stem>:<line_no>"``; rows carry ``json_path``
  ``/messages/<i>`` inside the line;
- one message per line ``{"role", "content", ...}``: the whole file is one session named after
  the file stem; pending tool calls are kept in ``reader_state`` so an appended file continues.

Roles: system, developer (stored as role ``system``, subtype ``developer``), user, assistant,
tool (``tool_call_id``), legacy function (``name``; answers the preceding ``function_call``,
which has no id: a stable id ``"<session>#<where the call is>"`` is made up for both sides).
Assistant ``tool_calls[{id, type: function, function{name, arguments}}]``: ``arguments`` is a
JSON string; it is parsed and re-serialised compactly into ``input_json`` (an argument string
that is not JSON is stored as a JSON string). ``reasoning_content``/``reasoning`` strings become
``thinking`` rows. The format has no error flag: ``is_error`` is true only when a producer wrote
``is_error: true`` on the tool message.

Usage: a ``usage`` object on a message (or on a message-per-line line) is that API call's usage
(``usage_scope = call``) on the message's first row; a ``usage`` on a conversation line covers
the logged conversation and becomes one separate row (role assistant, kind other, subtype
``usage``, ``usage_scope = run``) because it cannot be attributed to one call.
Token mapping (:func:`usage_columns`): OpenAI ``prompt_tokens`` includes cached (and, through
litellm, cache-write) tokens, so ``input_tokens = prompt - cached - cache_creation`` and
``cache_read_tokens = prompt_tokens_details.cached_tokens``: the lake's convention is
Anthropic's, where input, cache reads and cache writes are disjoint. ``reasoning_tokens`` is
the part of ``output_tokens`` (= completion tokens) spent on reasoning, not an addition.
``api_call_id`` is the message/response ``id`` when recorded, else ``"<session>#<where>"``, so
the rows of one assistant message count as one API call.

The helpers here (tool-call parsing, usage mapping, epoch timestamps) are shared with the
SWE-agent and mini-SWE-agent readers, whose messages are OpenAI-style.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import orjson

from pipeline.formats.base import (
    Emitter, Reader, RecordError, chat_tool_input, chat_tool_result, content_shape, content_text,
    dumps, first_json_values, tool_family,
)

# Lines of other formats that must never be read as chat logs.
_FOREIGN_KEYS = ("sessionId", "payload", "record_type", "$set", "$rewindTo", "parentUuid",
                 "projectHash")
_CODEX_ITEM_TYPES = {"message", "reasoning", "function_call", "function_call_output",
                     "custom_tool_call", "custom_tool_call_output", "local_shell_call"}
_OPENAI_ROLES = {"system", "developer", "tool", "function"}
_OPENAI_PART_TYPES = {"image_url", "input_audio", "refusal", "file", "input_text", "output_text"}
_ANTHROPIC_BLOCK_TYPES = {"tool_use", "tool_result", "thinking", "redacted_thinking",
                          "server_tool_use", "web_search_tool_result", "mcp_tool_use",
                          "mcp_tool_result", "document"}


# ---------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------
def int_or_none(value: Any) -> int | None:
    """An integer token count, or None (bools and non-integral values are not counts)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def float_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def iso_from_epoch(value: Any) -> str | None:
    """ISO 8601 (UTC) for a Unix time in seconds (number or numeric string); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    if not 0 <= value < 253402300800:  # year 1970..9999
        return None
    return datetime.fromtimestamp(value, timezone.utc).isoformat()


def timestamp_of(obj: dict) -> str | None:
    """A message's time: ``timestamp``/``created_at`` strings, or ``created``/epoch numbers."""
    for key in ("timestamp", "created_at"):
        value = obj.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, (int, float)):
            return iso_from_epoch(value)
    return iso_from_epoch(obj.get("created")) if "created" in obj else None


def parse_arguments(arguments: Any) -> tuple[Any, str]:
    """(input object, input_json) of an OpenAI ``function.arguments`` (a JSON string)."""
    if arguments is None:
        return {}, "{}"
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return None, dumps(arguments)
        return value, dumps(value)
    return arguments, dumps(arguments)


def openai_tool_calls(tool_calls: Any, where: str) -> list[tuple[str | None, str | None, Any, str]]:
    """(call id, tool name, input object, input_json) per OpenAI ``tool_calls`` entry."""
    if tool_calls is None:
        return []
    if not isinstance(tool_calls, list):
        raise RecordError(f"{where}: tool_calls must be a list, found {type(tool_calls).__name__}")
    calls = []
    for index, call in enumerate(tool_calls):
        if not isinstance(call, dict):
            raise RecordError(f"{where}: tool_calls[{index}] is a {type(call).__name__}, "
                              "expected an object")
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        name = function.get("name") if isinstance(function.get("name"), str) else None
        input_obj, input_json = parse_arguments(function.get("arguments"))
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else None
        calls.append((call_id, name, input_obj, input_json))
    return calls


def usage_columns(usage: Any, scope: str = "call") -> dict:
    """Staged usage columns from an OpenAI-style or Anthropic-style ``usage`` object.

    OpenAI: ``prompt_tokens`` includes cached reads (``prompt_tokens_details.cached_tokens``)
    and, through litellm, cache writes (``cache_creation_input_tokens``): they are taken out
    of ``input_tokens`` so that input, cache reads and cache writes are disjoint (the
    Anthropic convention the lake uses). When ``prompt_tokens`` is smaller than cached +
    written (providers that already exclude them), it is used as is. Anthropic's
    ``input_tokens`` already excludes both.
    """
    if not isinstance(usage, dict):
        return {}
    prompt_details = usage.get("prompt_tokens_details")
    prompt_details = prompt_details if isinstance(prompt_details, dict) else {}
    completion_details = usage.get("completion_tokens_details")
    completion_details = completion_details if isinstance(completion_details, dict) else {}
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        prompt = int_or_none(usage.get("prompt_tokens"))
        cached = int_or_none(prompt_details.get("cached_tokens"))
        if cached is None:
            cached = int_or_none(usage.get("cache_read_input_tokens"))
        written = int_or_none(usage.get("cache_creation_input_tokens"))
        if written is None:
            written = int_or_none(prompt_details.get("cache_creation_tokens"))
        input_tokens = prompt
        if prompt is not None and prompt >= (cached or 0) + (written or 0):
            input_tokens = prompt - (cached or 0) - (written or 0)
        return dict(
            input_tokens=input_tokens,
            output_tokens=int_or_none(usage.get("completion_tokens")),
            cache_read_tokens=cached,
            cache_creation_tokens=written,
            reasoning_tokens=int_or_none(completion_details.get("reasoning_tokens")),
            usage_scope=scope,
        )
    # Anthropic Messages / OpenAI Responses shape
    input_details = usage.get("input_tokens_details")
    input_details = input_details if isinstance(input_details, dict) else {}
    output_details = usage.get("output_tokens_details")
    output_details = output_details if isinstance(output_details, dict) else {}
    input_tokens = int_or_none(usage.get("input_tokens"))
    cached = int_or_none(usage.get("cache_read_input_tokens"))
    if cached is None and "cached_tokens" in input_details:
        # Responses API: input_tokens includes the cached part
        cached = int_or_none(input_details.get("cached_tokens"))
        if input_tokens is not None and cached is not None and input_tokens >= cached:
            input_tokens -= cached
    if input_tokens is None and usage.get("output_tokens") is None:
        return {}
    return dict(
        input_tokens=input_tokens,
        output_tokens=int_or_none(usage.get("output_tokens")),
        cache_read_tokens=cached,
        cache_creation_tokens=int_or_none(usage.get("cache_creation_input_tokens")),
        reasoning_tokens=int_or_none(output_details.get("reasoning_tokens")),
        usage_scope=scope,
    )


def emit_tool_call(out: Emitter, row: dict, *, call_id: str | None, name: str | None,
                   input_obj: Any, input_json: str, cwd: str | None = None,
                   family: str | None = None) -> dict:
    """One ``tool_use`` message row plus its ``tool_calls`` row (same seq); returns the row."""
    msg = out.message(kind="tool_use", text=input_json, call_id=call_id, tool_name=name, **row)
    out.tool_call(seq=msg["seq"], block_no=msg["block_no"], session_id=row["session_id"],
                  call_id=call_id, tool_name=name,
                  tool_family=family or tool_family(name, input_obj), input_json=input_json,
                  cwd=cwd, timestamp_raw=row.get("timestamp_raw"),
                  json_path=row.get("json_path"))
    return msg


def emit_tool_result(out: Emitter, row: dict, *, call_id: str | None, name: str | None,
                     payload: Any, is_error: bool, text: str | None = None) -> dict:
    """One ``tool_result`` message row (role tool) plus its ``tool_results`` row.

    The payload text lives in the message row only; the engine derives the result's sizes,
    hash and est_tokens from the message row at the same seq.
    """
    text = content_text(payload) if text is None else text
    row = dict(row, role="tool")
    msg = out.message(kind="tool_result", text=text, call_id=call_id, tool_name=name, **row)
    out.tool_result(seq=msg["seq"], block_no=msg["block_no"], session_id=row["session_id"],
                    call_id=call_id, tool_name=name, is_error=is_error,
                    payload_shape=content_shape(payload), payload=payload,
                    timestamp_raw=row.get("timestamp_raw"), json_path=row.get("json_path"))
    return msg


def _string(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


# ---------------------------------------------------------------------------------------
# Sniffing (shared with anthropic_messages)
# ---------------------------------------------------------------------------------------
def _is_foreign(obj: dict) -> bool:
    if any(key in obj for key in _FOREIGN_KEYS):
        return True
    if "uuid" in obj and "type" in obj:
        return True  # Claude Code
    if obj.get("type") in _CODEX_ITEM_TYPES and "messages" not in obj \
            and "stop_reason" not in obj and "model" not in obj:
        return True  # bare Responses items of older Codex rollouts (an API message has model)
    if "instructions" in obj and "timestamp" in obj and "messages" not in obj:
        return True  # Codex rollout header
    return False


def _message_signals(message: Any) -> tuple[int, int]:
    """(OpenAI, Anthropic) evidence carried by one message."""
    if not isinstance(message, dict):
        return 0, 0
    openai = anthropic = 0
    if isinstance(message.get("role"), str) and message["role"] in _OPENAI_ROLES:
        openai += 1
    if "tool_calls" in message or "tool_call_id" in message or "function_call" in message:
        openai += 2
    content = message.get("content")
    if isinstance(content, list):
        for block in content[:50]:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype in _ANTHROPIC_BLOCK_TYPES or (btype == "image" and "source" in block):
                anthropic += 2
            elif btype in _OPENAI_PART_TYPES:
                openai += 1
    if isinstance(message.get("stop_reason"), str) or message.get("type") == "message":
        anthropic += 1
    return openai, anthropic


def chat_scores(path: str, head: bytes) -> tuple[int, int]:
    """Confidence (OpenAI chat, Anthropic Messages) that a ``.jsonl`` file is such a log.

    Undecided files (only plain string messages) favour OpenAI slightly: both readers produce
    the same rows for them.
    """
    if not path.endswith(".jsonl"):
        return 0, 0
    values = first_json_values(head, 5)
    openai = anthropic = 0
    seen = False
    if values:
        for obj in values:
            if not isinstance(obj, dict) or _is_foreign(obj):
                return 0, 0
            if isinstance(obj.get("messages"), list):
                messages = obj["messages"]
                if isinstance(obj.get("system"), (str, list)):
                    anthropic += 1
            elif isinstance(obj.get("role"), str) and "content" in obj:
                messages = [obj]
            else:
                continue
            for message in messages[:200]:
                if isinstance(message, dict) and isinstance(message.get("role"), str):
                    seen = True
                o, a = _message_signals(message)
                openai += o
                anthropic += a
        if not seen:
            return 0, 0
        high = 70
    else:
        # first line longer than the sniffed head: look at bytes only
        if any(f'"{key}"'.encode() in head for key in _FOREIGN_KEYS) or b'"role"' not in head:
            return 0, 0
        compact = head.replace(b'": "', b'":"')
        if not (compact.lstrip().startswith(b'{"messages"') or compact.lstrip().startswith(b'{"id"')
                or compact.lstrip().startswith(b'{"role"')):
            return 0, 0
        openai = sum(compact.count(m) for m in (b'"tool_calls"', b'"tool_call_id"',
                                                 b'"role":"tool"', b'"role":"developer"'))
        anthropic = sum(compact.count(m) for m in (b'"type":"tool_use"', b'"type":"tool_result"',
                                                    b'"type":"thinking"'))
        high = 50
    if anthropic > openai:
        return high - 40, high
    if openai > anthropic:
        return high, high - 40
    return high - 10, high - 15


# ---------------------------------------------------------------------------------------
# Reader
# ---------------------------------------------------------------------------------------
class ChatReader(Reader):
    """Common line/conversation handling of the OpenAI and Anthropic message-log readers."""

    layout = "jsonl"
    append_safe = True

    def begin(self, state: dict) -> None:
        self.session_id: str | None = state.get("session_id")
        # pending calls of the file-level session (message-per-line): call id -> tool name
        self.pending: dict[str, str | None] = dict(state.get("pending", {}))
        self.legacy_pending: str | None = state.get("legacy_pending")

    def finish(self, out: Emitter) -> dict:
        return {"session_id": self.session_id, "pending": dict(sorted(self.pending.items())),
                "legacy_pending": self.legacy_pending}

    def line(self, obj: dict, out: Emitter) -> str:
        if "messages" in obj:
            return self._conversation(obj, out)
        if "role" in obj:
            return self._single(obj, out)
        return "other"

    # -- the two line shapes -----------------------------------------------------------
    def _conversation(self, obj: dict, out: Emitter) -> str:
        messages = obj.get("messages")
        if not isinstance(messages, list):
            raise RecordError("'messages' must be a list of message objects, found "
                              f"{type(messages).__name__}")
        session_id = _string(obj.get("id")) or f"{self.ctx.run_session_id}:{out.line_no}"
        line_ts = timestamp_of(obj)
        line_model = obj.get("model") if isinstance(obj.get("model"), str) else None
        out.session(session_id=session_id, format=self.name, timestamp_raw=line_ts,
                    meta_json=dumps({"shape": "conversation_per_line"}))
        conversation = {"pending": {}, "legacy_pending": None}
        self._before_messages(obj, session_id, line_ts, out)
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                raise RecordError(f"messages[{index}] is a {type(message).__name__}, "
                                  "expected an object")
            self._message(message, out, session_id=session_id, where=f"/messages/{index}",
                          json_path=f"/messages/{index}", default_ts=line_ts,
                          default_model=line_model, state=conversation)
        usage = usage_columns(obj.get("usage"), scope="run")
        if usage:
            out.message(session_id=session_id, role="assistant", kind="other", subtype="usage",
                        text="", model=line_model, timestamp_raw=line_ts, json_path="/usage",
                        **usage)
        return "conversation"

    def _single(self, obj: dict, out: Emitter) -> str:
        if self.session_id is None:
            self.session_id = self.ctx.run_session_id
            out.session(session_id=self.session_id, format=self.name,
                        timestamp_raw=timestamp_of(obj),
                        meta_json=dumps({"shape": "message_per_line"}))
        state = {"pending": self.pending, "legacy_pending": self.legacy_pending}
        self._message(obj, out, session_id=self.session_id, where=f"line {out.line_no}",
                      json_path=None, default_ts=None, default_model=None, state=state)
        self.legacy_pending = state["legacy_pending"]
        role = obj.get("role")
        return role if isinstance(role, str) else "message"

    def _before_messages(self, obj: dict, session_id: str, ts: str | None, out: Emitter) -> None:
        """Hook for rows that precede the messages of a conversation line (Anthropic system)."""

    def _message(self, message: dict, out: Emitter, *, session_id: str, where: str,
                 json_path: str | None, default_ts: str | None, default_model: str | None,
                 state: dict) -> None:
        raise NotImplementedError

    @staticmethod
    def _role(message: dict, where: str) -> str:
        """A message's ``role``, which must be a string."""
        role = message.get("role")
        if not isinstance(role, str):
            raise RecordError(f"{where}: a message needs a string 'role', found "
                              f"{type(role).__name__}")
        return role

    @staticmethod
    def _locator(json_path: str | None, out: Emitter) -> str:
        """Where a message is, for made-up ids: its JSON pointer, else ``L<line_no>``."""
        return json_path if json_path is not None else f"L{out.line_no}"

    def _api_call_id(self, message: dict, session_id: str, json_path: str | None,
                     out: Emitter) -> str:
        return _string(message.get("id")) or f"{session_id}#{self._locator(json_path, out)}"


class OpenAIChatReader(ChatReader):
    name = "openai_chat"
    result_shapes = (chat_tool_result,)
    input_shapes = (chat_tool_input,)

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        return chat_scores(path, head)[0]

    def _message(self, message: dict, out: Emitter, *, session_id: str, where: str,
                 json_path: str | None, default_ts: str | None, default_model: str | None,
                 state: dict) -> None:
        role = self._role(message, where)
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise RecordError(f"{where}: content must be a string, a list of parts or null, "
                              f"found {type(content).__name__}")
        text = content_text(content)
        row = dict(session_id=session_id, json_path=json_path,
                   timestamp_raw=timestamp_of(message) or default_ts,
                   uuid=_string(message.get("id")))
        pending: dict = state["pending"]
        if role in ("system", "developer"):
            out.message(role="system", kind="text", subtype=role, text=text, **row)
        elif role == "user":
            out.message(role="user", kind="text", text=text, is_prompt=bool(text.strip()), **row)
        elif role == "assistant":
            row["model"] = message.get("model") if isinstance(message.get("model"), str) \
                else default_model
            row["api_call_id"] = self._api_call_id(message, session_id, json_path, out)
            usage = usage_columns(message.get("usage"))
            calls = openai_tool_calls(message.get("tool_calls"), where)
            legacy = message.get("function_call")
            first = True

            def take_usage() -> dict:
                nonlocal first
                extra = usage if first else {}
                first = False
                return extra

            for key in ("reasoning_content", "reasoning"):
                if isinstance(message.get(key), str) and message[key]:
                    out.message(role="assistant", kind="thinking", subtype=key,
                                text=message[key], **row, **take_usage())
                    break
            if text or (not calls and not isinstance(legacy, dict)):
                out.message(role="assistant", kind="text", text=text, **row, **take_usage())
            for index, (call_id, name, input_obj, input_json) in enumerate(calls):
                call_row = dict(row, role="assistant", **take_usage())
                if json_path is not None:
                    call_row["json_path"] = f"{json_path}/tool_calls/{index}"
                emit_tool_call(out, call_row, call_id=call_id, name=name, input_obj=input_obj,
                               input_json=input_json)
                if call_id:
                    pending[call_id] = name
            if isinstance(legacy, dict):
                name = legacy.get("name") if isinstance(legacy.get("name"), str) else None
                input_obj, input_json = parse_arguments(legacy.get("arguments"))
                call_id = f"{session_id}#{self._locator(json_path, out)}/function_call"
                call_row = dict(row, role="assistant", **take_usage())
                if json_path is not None:
                    call_row["json_path"] = f"{json_path}/function_call"
                emit_tool_call(out, call_row, call_id=call_id, name=name, input_obj=input_obj,
                               input_json=input_json)
                state["legacy_pending"] = call_id
                pending[call_id] = name
        elif role == "tool":
            call_id = _string(message.get("tool_call_id"))
            name = pending.pop(call_id, None) if call_id else None
            if name is None and isinstance(message.get("name"), str):
                name = message["name"]
            emit_tool_result(out, row, call_id=call_id, name=name, payload=content,
                             is_error=message.get("is_error") is True, text=text)
        elif role == "function":
            call_id = state.get("legacy_pending")
            state["legacy_pending"] = None
            name = pending.pop(call_id, None) if call_id else None
            if isinstance(message.get("name"), str):
                name = message["name"]
            emit_tool_result(out, row, call_id=call_id, name=name, payload=content,
                             is_error=False, text=text)
        else:
            out.message(role="system", kind="other", subtype=role, text=text, **row)
