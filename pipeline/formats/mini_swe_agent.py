"""mini-SWE-agent trajectories (``mini_swe_agent``, ``*.traj.json``, one JSON document).

Facts (docs/formats.md): ``{info, messages[], trajectory_format, instance_id?}``; the oldest test
data is a bare list of messages. Every row carries ``json_path`` (``/messages/<i>``, or
``/<i>`` for a bare list). Session: the file stem (the instance id; ``instance_id`` is kept in
``session_info.meta_json``) and its run folder, ``<instance>@<run>``
(:attr:`SourceContext.run_session_id`). Project and each call's ``cwd``: ``info.config.environment.cwd``.

- Roles: system; user (the first is the task; ``extra.interrupt_type`` messages such as
  ``FormatError`` are ``kind = meta``); assistant; tool (v2); exit (v2: stored as role system,
  kind meta, subtype ``exit``: the submission is never shown to the model).
- Tool calls, v2 tool calling (``mini-swe-agent-1.1``): ``tool_calls[]`` ids <->
  ``tool_call_id`` of ``role: tool`` messages. ``is_error`` when ``extra.returncode`` is not 0
  or ``extra.exception_info`` is set.
- v2 text mode (assistant ``extra.actions`` without ``tool_calls``): each action is a call
  with a made-up id ``"<session>#<json_path>/extra/actions/<k>"``, answered in order by the
  following user messages that carry ``extra.returncode``.
- v1 text mode (no ``extra.actions``): an assistant message whose content has exactly one
  action block (``info.config.agent.action_regex`` in v1, ``info.config.model.action_regex``
  in v2; without one, a ```` ```bash ```` block (v1) or a ```` ```mswea_bash_command ````
  block (v2's default, also in its bare-list test data)) made one
  call (tool ``bash``, id ``"<session>#<json_path>"``) answered by the next user message
  (``<returncode>N</returncode><output>...``, a timeout notice, or the submission);
  ``is_error`` when N != 0 or on a timeout notice. With 0 or >= 2 blocks nothing ran: no
  call, and the next user message (the format-error notice) is ``kind = meta``, subtype
  ``format_error``.
- Text-mode calls (v1 and v2) have no input field of their own: the command is part of the
  reply's text, so ``clear_input`` never applies to them (:meth:`MiniSweAgentReader.input_clearable`).
- Usage per call: assistant ``extra.response.usage`` (OpenAI shape) on the message's first
  row, ``usage_scope = call``: ``input_tokens = prompt_tokens - cached_tokens``,
  ``cache_read_tokens = prompt_tokens_details.cached_tokens``, ``output_tokens =
  completion_tokens`` (reasoning included), ``reasoning_tokens =
  completion_tokens_details.reasoning_tokens`` (see ``openai_chat.usage_columns``);
  ``api_call_id`` = the response ``id`` (else ``"<session>#<json_path>"``); model = the
  response's ``model``, else ``info.config.model.model_name``. Per-call ``cost`` is NOT
  stored on call rows.
- v2 Responses API models (``litellm_response_model``, ``openrouter_response_model``,
  ``portkey_response_model``, mini-swe-agent 2.x ``models/``): the assistant turn is the
  response object itself (``response.model_dump()`` plus ``extra{actions, cost,
  timestamp}``; ``object: "response"``, no ``role``). Its ``output[k]`` items are read in
  order at ``/messages/<i>/output/<k>``: ``reasoning`` (its ``summary``/``content`` texts,
  kind thinking, subtype ``reasoning``; an encrypted-only one has no text and no row),
  ``message`` (``output_text``/``refusal`` parts, kind text), ``function_call`` (a call with
  id ``call_id``, input ``arguments``). Results are ``{"type": "function_call_output",
  "call_id", "output", extra}`` messages (``output`` is the payload, ``extra.raw_output``
  its copy; ``is_error`` as for role tool). Usage: the response's own ``usage``
  (``input_tokens`` incl. ``input_tokens_details.cached_tokens``, ``output_tokens``,
  ``output_tokens_details.reasoning_tokens``) on the turn's first row; ``api_call_id`` =
  the response ``id``; model = its ``model``. System, user and format-error messages are
  ``{"type": "message", "role", "content": [{"type": "input_text"}]}`` with OpenRouter and
  Portkey (plain chat messages with litellm): read by role as in chat mode.
- Usage per run: ``info.model_stats.instance_cost`` becomes one row (role assistant, kind
  other, subtype ``model_stats``, ``usage_scope = run``) with the cost ONLY: tokens are
  already on the call rows, so summing tokens and costs over all rows counts nothing twice.
  ``api_calls`` goes to ``session_info.meta_json``; it can exceed the stored assistant
  messages (a v2 reply that failed to parse is not stored, nor its usage).
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.formats.base import (
    Emitter, Reader, RecordError, chat_tool_input, chat_tool_result, content_text, dumps,
    nested_value, nonempty_str,
)
from pipeline.formats.openai_chat import (
    emit_tool_call, emit_tool_result, float_or_none, int_or_none, iso_from_epoch,
    openai_tool_calls, parse_arguments, usage_columns,
)

# v1's default fence (```bash) and v2's (```mswea_bash_command), for files without a regex
DEFAULT_ACTION_REGEX = r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```"
_RETURNCODE = re.compile(r"^\s*<returncode>\s*(-?\d+)\s*</returncode>")
_TIMEOUT = re.compile(r"^\s*The last command .* timed out and has been killed", re.DOTALL)
_ROLES = {"system", "user", "assistant", "tool"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _returncode(value: Any) -> int | None:
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return int_or_none(value)


def _tool_error(extra: dict) -> bool:
    code = _returncode(extra.get("returncode"))
    return (code is not None and code != 0) or bool(extra.get("exception_info"))


def _is_response(message: dict) -> bool:
    """A Responses API response object stored as the assistant turn (``response.model_dump()``,
    or the JSON of OpenRouter's endpoint), as mini's own models tell it: ``object: "response"``."""
    return message.get("object") == "response"


def _item_text(item: dict, *keys: str) -> str:
    """The text parts of a Responses output item's ``keys`` lists (``output_text`` /
    ``refusal`` parts of a message, ``summary_text`` / ``reasoning_text`` of a reasoning)."""
    texts = []
    for key in keys:
        parts = item.get(key)
        if not isinstance(parts, list):
            continue
        for part in parts:
            if isinstance(part, dict):
                value = part.get("text") if isinstance(part.get("text"), str) else part.get("refusal")
                if isinstance(value, str):
                    texts.append(value)
    return "\n".join(texts)


# The end of a made-up text-mode call id (see the module docstring).
TEXT_MODE_CALL_ID = re.compile(r"#/(?:messages/)?\d+(?:/extra/actions/\d+)?\Z")


class MiniSweAgentReader(Reader):
    name = "mini_swe_agent"
    layout = "document"
    result_shapes = (chat_tool_result,)
    input_shapes = (chat_tool_input,)

    @classmethod
    def duplicate_paths(cls, obj: Any, path: tuple) -> list[tuple]:
        """v2: a tool message's content (a ``function_call_output``'s ``output``) is repeated
        in its ``extra.raw_output``."""
        node = obj
        for step in path[:-1]:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                return []
        if path and isinstance(node, dict) and (
                (path[-1] == "content" and node.get("role") == "tool")
                or (path[-1] == "output" and node.get("type") == "function_call_output")):
            extra = node.get("extra")
            if isinstance(extra, dict) and isinstance(extra.get("raw_output"), str) \
                    and extra["raw_output"]:
                return [path[:-1] + ("extra", "raw_output")]
        return []

    @classmethod
    def input_clearable(cls, call_id: str | None, tool_name: str | None = None) -> bool:
        """A text-mode call (made-up id ``<session>#<json_path>``, v1, or
        ``...#<json_path>/extra/actions/<k>``, v2) is a command written inside the reply's
        text: there is no input field to clear (``extra.actions`` is only a copy of it), so
        ``clear_input`` leaves it alone."""
        return not (call_id and TEXT_MODE_CALL_ID.search(call_id))

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
        if path.endswith(".traj.json"):
            # mini's own suffix: a file of another shape is still ours to quarantine
            return 90 if start in (b"{", b"[") else 60
        if path.endswith(".json") and start == b"{":
            compact = head.replace(b'": "', b'":"')
            if b'"mini_version"' in head or b'"trajectory_format":"mini-swe-agent' in compact:
                return 70
        return 0

    def document(self, obj: Any, out: Emitter) -> str:
        if isinstance(obj, list):
            messages, info, prefix, fmt, instance_id = obj, {}, "", None, None
        elif isinstance(obj, dict):
            messages = obj.get("messages")
            if not isinstance(messages, list):
                raise RecordError("a mini-SWE-agent trajectory needs a 'messages' list, found "
                                  f"{type(messages).__name__}")
            info = obj.get("info") if isinstance(obj.get("info"), dict) else {}
            prefix, fmt = "/messages", nonempty_str(obj.get("trajectory_format"))
            instance_id = nonempty_str(obj.get("instance_id"))
        else:
            raise RecordError("a mini-SWE-agent trajectory must be an object or a list of "
                              f"messages, found {type(obj).__name__}")
        session_id = self.ctx.run_session_id
        config = info.get("config") if isinstance(info.get("config"), dict) else {}
        config_model = nonempty_str(nested_value(config, "model", "model_name"))
        cwd = nonempty_str(nested_value(config, "environment", "cwd"))
        regex_text = nested_value(config, "agent", "action_regex")
        if not isinstance(regex_text, str):
            regex_text = nested_value(config, "model", "action_regex")
        try:
            action_regex = re.compile(regex_text if isinstance(regex_text, str)
                                      else DEFAULT_ACTION_REGEX, re.DOTALL)
        except re.error:
            action_regex = re.compile(DEFAULT_ACTION_REGEX, re.DOTALL)
        stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else None
        first_ts = next(filter(None, (iso_from_epoch(nested_value(m, "extra", "timestamp"))
                                      for m in messages)), None)
        meta = {
            "instance_id": instance_id,
            "trajectory_format": fmt,
            "exit_status": info.get("exit_status"),
            "api_calls": int_or_none(stats.get("api_calls")) if stats else None,
            "model": config_model,
        }
        out.session(session_id=session_id, format=self.name, project=cwd,
                    cli_version=nonempty_str(info.get("mini_version")), timestamp_raw=first_ts,
                    json_path="", meta_json=dumps({k: v for k, v in meta.items() if v is not None}))

        names: dict[str, str | None] = {}
        awaiting: list[str] = []          # made-up text-mode calls, answered in order
        awaiting_v1 = False               # the awaited answer is a v1 observation
        format_error_next = False         # v1: the last reply had 0 or >= 2 action blocks
        submission = info.get("submission") if isinstance(info.get("submission"), str) else None

        def read_message(index: int, message: Any) -> None:
            nonlocal awaiting, awaiting_v1, format_error_next
            where = f"{prefix}/{index}"
            if not isinstance(message, dict):
                raise RecordError(f"messages[{index}] is a {type(message).__name__}, "
                                  "expected an object")
            role = message.get("role")
            content = message.get("content")
            if content is not None and not isinstance(content, (str, list)):
                raise RecordError(f"messages[{index}]: content must be a string or a list, "
                                  f"found {type(content).__name__}")
            text = content_text(content)
            extra = message.get("extra") if isinstance(message.get("extra"), dict) else {}
            row = dict(session_id=session_id, json_path=where,
                       timestamp_raw=iso_from_epoch(extra.get("timestamp")))
            if _is_response(message):
                # Responses API models: the assistant turn is the whole response object
                awaiting, awaiting_v1, format_error_next = [], False, False
                self._response(message, row, config_model, cwd, names, out)
            elif message.get("type") == "function_call_output":
                call_id = nonempty_str(message.get("call_id"))
                output = message.get("output")
                emit_tool_result(out, dict(row, subtype="observation"), call_id=call_id,
                                 name=names.get(call_id) if call_id else None, payload=output,
                                 is_error=_tool_error(extra), text=content_text(output))
            elif role == "system":
                out.message(role="system", kind="text", text=text, **row)
            elif role == "assistant":
                awaiting, awaiting_v1, format_error_next = [], False, False
                outcome = self._assistant(message, extra, text, row, config_model, cwd,
                                          action_regex, names, out)
                if outcome == "format_error":
                    format_error_next = True
                elif outcome:
                    awaiting = outcome
                    awaiting_v1 = "actions" not in extra
            elif role == "tool":
                call_id = nonempty_str(message.get("tool_call_id"))
                emit_tool_result(out, dict(row, subtype="observation"), call_id=call_id,
                                 name=names.get(call_id) if call_id else None, payload=content,
                                 is_error=_tool_error(extra), text=text)
            elif role == "user":
                interrupt = nonempty_str(extra.get("interrupt_type"))
                if interrupt:
                    awaiting = []
                    out.message(role="user", kind="meta", subtype=_snake(interrupt), text=text,
                                is_meta=True, **row)
                elif awaiting and (awaiting_v1 or "returncode" in extra):
                    call_id = awaiting.pop(0)
                    if awaiting_v1:
                        code = _RETURNCODE.match(text)
                        is_error = (int(code.group(1)) != 0) if code \
                            else bool(_TIMEOUT.match(text))
                        is_last = index == len(messages) - 1
                        subtype = "submission" if is_last and not code and submission is not None \
                            and text == submission else "observation"
                    else:
                        is_error, subtype = _tool_error(extra), "observation"
                    emit_tool_result(out, dict(row, subtype=subtype), call_id=call_id,
                                     name=names.get(call_id), payload=content,
                                     is_error=is_error, text=text)
                elif format_error_next:
                    format_error_next = False
                    out.message(role="user", kind="meta", subtype="format_error", text=text,
                                is_meta=True, **row)
                else:
                    awaiting = []
                    out.message(role="user", kind="text", text=text,
                                is_prompt=bool(text.strip()), **row)
            elif role == "exit":
                awaiting = []
                out.message(role="system", kind="meta", subtype="exit", text=text, is_meta=True,
                            **row)
            else:
                out.message(role=role if isinstance(role, str) and role in _ROLES else "system", kind="other",
                            subtype=str(role), text=text, **row)

        # a message that cannot be read costs that message, not the trajectory
        for index, message in enumerate(messages):
            out.read_element(f"messages[{index}]", message,
                             lambda index=index, message=message: read_message(index, message))

        if stats is not None:
            out.message(session_id=session_id, role="assistant", kind="other",
                        subtype="model_stats", text="", model=config_model,
                        json_path="/info/model_stats",
                        cost_usd_recorded=float_or_none(stats.get("instance_cost")),
                        usage_scope="run")
        return "trajectory"

    def _response(self, message: dict, row: dict, config_model: str | None, cwd: str | None,
                  names: dict, out: Emitter) -> None:
        """Rows of one Responses API turn, in ``output`` order: ``reasoning`` items (kind
        thinking), ``message`` items (kind text) and ``function_call`` items (tool calls, id =
        ``call_id``, answered by the ``function_call_output`` of that ``call_id``); the
        response's ``usage`` on its first row."""
        where = row["json_path"]
        session_id = row["session_id"]
        model = nonempty_str(message.get("model")) or config_model
        api_call_id = nonempty_str(message.get("id")) or f"{session_id}#{where}"
        row = dict(row, role="assistant", model=model, api_call_id=api_call_id)
        usage = usage_columns(message.get("usage"))
        output = message.get("output")
        if output is not None and not isinstance(output, list):
            raise RecordError(f"messages entry {where}: a response's output must be a list, "
                              f"found {type(output).__name__}")
        emitted = False
        for k, item in enumerate(output or []):
            if not isinstance(item, dict):
                raise RecordError(f"messages entry {where}: output[{k}] is a "
                                  f"{type(item).__name__}, expected an object")
            kind = item.get("type")
            cols = dict(row, json_path=f"{where}/output/{k}", **({} if emitted else usage))
            if kind == "reasoning":
                text = _item_text(item, "summary", "content")
                if not text:
                    continue        # encrypted or empty: nothing the lake can count
                out.message(kind="thinking", subtype="reasoning", text=text, **cols)
            elif kind == "message":
                out.message(kind="text", text=_item_text(item, "content"), **cols)
            elif kind == "function_call":
                call_id = nonempty_str(item.get("call_id")) or nonempty_str(item.get("id"))
                name = nonempty_str(item.get("name"))
                input_obj, input_json = parse_arguments(item.get("arguments"))
                emit_tool_call(out, cols, call_id=call_id, name=name, input_obj=input_obj,
                               input_json=input_json, cwd=cwd)
                if call_id:
                    names[call_id] = name
            else:
                continue            # other items stay in records.raw
            emitted = True
        if not emitted:
            out.message(kind="text", text="", **dict(row, **usage))

    def _assistant(self, message: dict, extra: dict, text: str, row: dict,
                   config_model: str | None, cwd: str | None, action_regex: re.Pattern,
                   names: dict, out: Emitter) -> list[str] | str | None:
        """Rows of one model reply. Returns the made-up call ids awaiting observations,
        ``"format_error"`` for a v1 reply that ran nothing, or None."""
        where = row["json_path"]
        session_id = row["session_id"]
        response = extra.get("response") if isinstance(extra.get("response"), dict) else {}
        model = nonempty_str(response.get("model")) or config_model
        api_call_id = nonempty_str(response.get("id")) or f"{session_id}#{where}"
        row = dict(row, role="assistant", model=model, api_call_id=api_call_id)
        usage = usage_columns(response.get("usage"))
        first = True

        def with_usage(cols: dict) -> dict:
            nonlocal first
            if first:
                first = False
                return dict(cols, **usage)
            return cols

        calls = openai_tool_calls(message.get("tool_calls"), f"messages entry {where}")
        actions = extra.get("actions") if isinstance(extra.get("actions"), list) else None
        text_calls: list[tuple[str, str]] = []     # (made-up id, command)
        outcome: list[str] | str | None = None
        if not calls and actions is not None:
            for k, action in enumerate(actions):
                command = action.get("command") if isinstance(action, dict) else None
                if isinstance(command, str):
                    text_calls.append((f"{session_id}#{where}/extra/actions/{k}", command))
        elif not calls:
            found = action_regex.findall(text)
            if len(found) == 1:
                command = found[0] if isinstance(found[0], str) else str(found[0])
                text_calls.append((f"{session_id}#{where}", command.strip()))
            else:
                outcome = "format_error"
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            out.message(kind="thinking", subtype="reasoning_content", text=reasoning,
                        **with_usage(row))
        if text or not (calls or text_calls):
            out.message(kind="text", text=text, **with_usage(row))
        for k, (call_id, name, input_obj, input_json) in enumerate(calls):
            emit_tool_call(out, with_usage(dict(row, json_path=f"{where}/tool_calls/{k}")),
                           call_id=call_id, name=name, input_obj=input_obj,
                           input_json=input_json, cwd=cwd)
            if call_id:
                names[call_id] = name
        for call_id, command in text_calls:
            emit_tool_call(out, with_usage(row), call_id=call_id, name="bash",
                           input_obj={"command": command}, input_json=dumps({"command": command}),
                           cwd=cwd)
            names[call_id] = "bash"
        if text_calls:
            outcome = [call_id for call_id, _ in text_calls]
        return outcome
