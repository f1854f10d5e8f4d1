"""Anthropic Messages API logs (``anthropic_messages``, ``*.jsonl``).

Same two line shapes and session rules as :mod:`pipeline.formats.openai_chat` (one
conversation ``{"id"?, "system"?, "model"?, "messages": [...]}`` per line, or one message per
line). A message is ``{role, content: string | blocks}`` with the block types of Claude Code:
``text``, ``thinking`` (``redacted_thinking`` has no readable text), ``tool_use{id, name,
input}`` (also ``server_tool_use``/``mcp_tool_use``), ``tool_result{tool_use_id, content,
is_error?}`` (also the server tools' ``*_tool_result`` blocks), images and documents (kept as a
``[type]`` token, kind other). Tool results are stored with role ``tool`` (as in the Claude
Code reader). Apply finds a server/MCP tool's result and input blocks through the shapes
:func:`~pipeline.formats.base.server_tool_result` / :func:`~pipeline.formats.base.server_tool_input`
(shared with the Claude Code reader), also in a whole message line; there a call or result
block without an id (nothing to find it by) carries ``json_path`` ``/content/<i>``. A
conversation-level ``system`` (string or text blocks) becomes a system row before the
messages (``json_path`` ``/system``).

Usage: ``usage{input_tokens, output_tokens, cache_creation_input_tokens,
cache_read_input_tokens}`` on a message (API response) is that call's usage on the message's
first row, ``api_call_id`` = the message ``id`` (``msg_...``) when recorded; on a conversation
line it becomes a ``usage_scope = run`` row (see openai_chat).
"""

from __future__ import annotations

from typing import Any

from pipeline.formats.base import (
    CALL_TYPES, Emitter, RecordError, anthropic_tool_input, anthropic_tool_result, content_text,
    dumps, server_tool_input, server_tool_result,
)
from pipeline.formats.openai_chat import (
    ChatReader, chat_scores, emit_tool_call, emit_tool_result, timestamp_of, usage_columns,
)


class AnthropicMessagesReader(ChatReader):
    name = "anthropic_messages"
    result_shapes = (anthropic_tool_result, server_tool_result)
    input_shapes = (anthropic_tool_input, server_tool_input)

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        return chat_scores(path, head)[1]

    def _before_messages(self, obj: dict, session_id: str, ts: str | None, out: Emitter) -> None:
        system = obj.get("system")
        if isinstance(system, (str, list)) and system:
            out.message(session_id=session_id, role="system", kind="text", subtype="system",
                        text=content_text(system), timestamp_raw=ts, json_path="/system")

    def _message(self, message: dict, out: Emitter, *, session_id: str, where: str,
                 json_path: str | None, default_ts: str | None, default_model: str | None,
                 state: dict) -> None:
        role = self._role(message, where)
        content = message.get("content")
        if isinstance(content, str) or content is None:
            blocks: list = [{"type": "text", "text": content or ""}]
            block_paths: list[str | None] = [json_path]
        elif isinstance(content, list):
            blocks = content or [{"type": "text", "text": ""}]
            block_paths = [f"{json_path}/content/{i}" if json_path is not None else None
                           for i in range(len(blocks))]
        else:
            raise RecordError(f"{where}: content must be a string or a list of blocks, found "
                              f"{type(content).__name__}")
        if role not in ("user", "assistant", "system"):
            role_out, unknown_role = "system", role
        else:
            role_out, unknown_role = role, None
        row: dict[str, Any] = dict(session_id=session_id,
                                   timestamp_raw=timestamp_of(message) or default_ts,
                                   uuid=message.get("id") if isinstance(message.get("id"), str)
                                   else None)
        usage: dict = {}
        if role == "assistant":
            row["model"] = message.get("model") if isinstance(message.get("model"), str) \
                else default_model
            row["api_call_id"] = self._api_call_id(message, session_id, json_path, out)
            usage = usage_columns(message.get("usage"))
        pending: dict = state["pending"]
        for index, (block, path) in enumerate(zip(blocks, block_paths)):
            if not isinstance(block, dict):
                raise RecordError(f"{where}: content block {index} is a "
                                  f"{type(block).__name__}, expected an object")
            block_row = dict(row, json_path=path, **(usage if index == 0 else {}))
            btype = block.get("type")
            if unknown_role is not None:
                out.message(role=role_out, kind="other", subtype=unknown_role,
                            text=content_text([block]), **block_row)
            elif btype == "text":
                text = block.get("text") if isinstance(block.get("text"), str) else ""
                out.message(role=role_out, kind="text", text=text,
                            is_prompt=role == "user" and bool(text.strip()), **block_row)
            elif btype in ("thinking", "redacted_thinking"):
                thinking = block.get("thinking") if isinstance(block.get("thinking"), str) else ""
                out.message(role=role_out, kind="thinking", subtype=btype, text=thinking,
                            **block_row)
            elif isinstance(btype, str) and btype in CALL_TYPES:
                call_id = block.get("id") if isinstance(block.get("id"), str) else None
                name = block.get("name") if isinstance(block.get("name"), str) else None
                if not call_id and path is None:
                    block_row["json_path"] = f"/content/{index}"   # no id to find it by
                input_obj = block.get("input")
                input_json = dumps(input_obj) if input_obj is not None else "{}"
                emit_tool_call(out, dict(block_row, role=role_out, subtype=btype),
                               call_id=call_id, name=name, input_obj=input_obj,
                               input_json=input_json)
                if call_id:
                    pending[call_id] = name
            elif isinstance(btype, str) and btype.endswith("tool_result"):
                call_id = block.get("tool_use_id") if isinstance(block.get("tool_use_id"), str) \
                    else None
                name = pending.pop(call_id, None) if call_id else None
                if not call_id and path is None:
                    # a line is one message: without an id apply finds the block by its place
                    block_row["json_path"] = f"/content/{index}"
                emit_tool_result(out, dict(block_row, subtype=btype), call_id=call_id, name=name,
                                 payload=block.get("content"),
                                 is_error=block.get("is_error") is True)
            else:
                out.message(role=role_out, kind="other", subtype=str(btype),
                            text=content_text([block]), **block_row)
