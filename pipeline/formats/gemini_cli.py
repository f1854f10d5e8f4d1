"""Gemini CLI chat recordings: ``~/.gemini/tmp/<project id>/chats/``.

Two on-disk forms, one public format: every ``session_info.format`` row says ``gemini_cli``.
One reader class has one layout, so each form has its own registry key (the value of
``sources.format``):

- ``gemini_cli`` (:class:`GeminiCliReader`, ``layout = "document"``): the legacy
  pretty-printed ``session-*.json`` ``{sessionId, projectHash, startTime, lastUpdated,
  messages[], summary?}``. Rows carry ``line_no = 1`` and ``json_path`` (``/messages/<i>...``).
- ``gemini_cli_jsonl`` (:class:`GeminiCliJsonlReader`, ``layout = "jsonl"``,
  ``append_safe = False``): ``session-<YYYY-MM-DDTHH-MM>-<id8>.jsonl`` (sub-agents:
  ``chats/<parent sessionId>/<sessionId>.jsonl``). Line 1 is the metadata record, then
  message records (the same ``id`` is re-appended on every update: the last one wins, in the
  place the id first took), ``{"$set": {...}}`` metadata patches and ``{"$rewindTo": id}``.
  The file is replayed in order, as the CLI's writer builds its state: a ``$set`` carrying
  ``messages`` replaces the whole list at that point (later message lines append to it);
  ``$rewindTo`` drops that message and everything after it (an unknown id drops everything,
  as the CLI's loader does). A dropped model reply with ``tokens`` (rewound, or left out by a
  ``$set`` list) still cost an API call: it keeps one usage-only row (role assistant, kind
  meta, subtype ``usage_rewound`` / ``usage_replaced``, empty text, ``json_path``
  ``<msg>/tokens``), so usage counts every billed call, as ccusage does. Nothing is emitted from ``line()``: the surviving messages are
  emitted by ``finish()``, each row keeping the provenance of the line that last defined its
  message (``line_no``/``byte_offset``/``byte_len``; ``seq = line_no * SEQ_STRIDE + block``,
  ``block`` counting the rows emitted for that line). If a message defined late sits before
  one defined earlier in the final list, its rows sort by their defining line (the CLI only
  re-appends its LAST message, so this does not happen in its files).

``json_path`` on every row is the JSON pointer, inside the line (JSONL) or the document, of
the value the row was read from: ``<msg>/content``, ``<msg>/thoughts/<j>``,
``<msg>/toolCalls/<k>/args``, and for a result the output/error string itself
(``<msg>/toolCalls/<k>/result/0/functionResponse/response/output``, ``payload_shape =
string``) or the result list when it holds several parts; ``<msg>`` is ``/messages/<i>``
(document), ``""`` (a message line) or ``/$set/messages/<i>`` (a message from a ``$set``).

A message of a document that cannot be read (not an object, no string ``id`` or ``type``,
``content``, ``toolCalls`` or ``thoughts`` of another type, a value no table holds) is
quarantined on its own (a quarantine row at line 0 naming ``messages[<i>]``, its JSON as the
excerpt): the rest of the session is read. A model reply among them whose ``tokens`` is an
object keeps a usage-only row (subtype ``usage_unreadable``; its id, or
``<sessionId>/messages/<i>`` when it has none), as ccusage counts it.

Rows of one message (``MessageRecord{id, timestamp, type, content, displayContent?}``):

- ``user`` -> role user, kind text, ``is_prompt`` when it has text. The CLI treats any input
  starting with ``/`` (but not ``//`` or ``/*``) as a slash command, so such a message (judged
  on ``displayContent`` when present, else ``content``) is kind ``meta``, subtype
  ``slash_command``, not a prompt. ``info``/``error``/``warning`` -> role system, kind meta,
  subtype the type; any other type -> role system, kind other.
- ``gemini`` -> role assistant: one ``thinking`` row per ``thoughts[]`` entry, one ``text``
  row for the content (omitted when empty and the message has thoughts or tool calls), then
  a ``tool_use`` row (+ ``tool_calls``) per ``toolCalls[]`` entry, then a ``tool_result`` row
  (role tool, + ``tool_results``) per call that has a ``result``. Every assistant row carries
  ``api_call_id = <message id>`` and ``model``; the first row of the message carries the usage.
- Function-call/-response parts inside ``content`` (written when the CLI re-syncs its
  history into a ``$set``) become tool rows only when no ``toolCalls[]`` entry of the
  session already holds that call id; otherwise they are duplicates and stay in ``records``.

Usage (``tokens{input, output, cached, thoughts, tool, total}``, the Gemini API's
``usageMetadata``): ``promptTokenCount`` (input) INCLUDES the cached tokens and
``candidatesTokenCount`` (output) EXCLUDES the thinking tokens (``total = input + output +
thoughts + tool``). To make totals comparable with Claude Code and Codex (where input and
cache read are disjoint and output includes reasoning) the rows store
``input_tokens = input - cached + tool``, ``cache_read_tokens = cached``,
``output_tokens = output + thoughts``, ``reasoning_tokens = thoughts`` (a part of
``output_tokens``), so ``input_tokens + cache_read_tokens + output_tokens = total``;
``usage_scope = "call"``. An object that does not add up keeps its input whole, and a count
that is negative, fractional or not a number is read as ccusage reads it (:func:`usage_columns`):
a hostile count never costs the session, whose file is one JSON document.

Tool errors: ``is_error`` when ``status`` is ``error``/``cancelled``, when a
``functionResponse.response`` holds ``error``, or when a shell-family tool's output reports a
non-zero ``Exit Code: N`` (the CLI records ``status: success`` for those; counting them as
errors matches Claude Code, which flags a failed Bash call, and Codex, read the same way).

Session: ``session_id = sessionId`` (the last value a ``$set`` gave it), ``project`` = the
first of ``directories`` when recorded (the only path the CLI writes), else ``projectHash``;
a sub-agent file (``kind: subagent``) has ``parent_session_id`` = its folder name. The
session ``summary``, ``projectHash``, ``kind`` and ``directories`` go to ``meta_json``; the
summary is not a message (the model never saw it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from pipeline.formats.base import (
    SEQ_STRIDE, Emitter, Reader, RecordError, call_timestamp, dumps, first_json_values,
    json_type_name, refused_by_ccusage, str_or_none, tool_family,
)

FORMAT = "gemini_cli"
SYSTEM_TYPES = {"info", "error", "warning"}
ERROR_STATUSES = {"error", "cancelled", "canceled"}
# "Exit Code: 1" as written by run_shell_command (after the Output: section, so the last one counts)
EXIT_CODE = re.compile(r"^Exit Code: (-?\d+)\s*$", re.MULTILINE)


def _parts(content: Any) -> list:
    """Content as a list of parts (a string is one text part, a single Part a list of one)."""
    if content is None:
        return []
    if isinstance(content, list):
        return content
    return [content]


def part_text(part: Any) -> str:
    """Text of one Part: its text, or a ``[kind]`` token for media and other parts."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        if isinstance(part.get("text"), str):
            return part["text"]
        for key in ("inlineData", "fileData", "functionCall", "functionResponse",
                    "executableCode", "codeExecutionResult"):
            if key in part:
                return f"[{key}]"
        return dumps(part)
    return dumps(part)


def content_text(content: Any) -> str:
    """Text the model saw for a message content (text parts joined; thought parts skipped)."""
    if isinstance(content, str):
        return content
    texts = []
    for part in _parts(content):
        if isinstance(part, dict) and (part.get("thought") is True
                                       or "functionCall" in part or "functionResponse" in part):
            continue
        texts.append(part_text(part))
    return "\n".join(texts)


def response_text(response: Any) -> tuple[str, bool]:
    """(text, has_error) of a ``functionResponse.response`` object."""
    if isinstance(response, dict):
        if "error" in response:
            error = response["error"]
            return (error if isinstance(error, str) else dumps(error)), True
        if "output" in response:
            output = response["output"]
            return (output if isinstance(output, str) else dumps(output)), False
        if "content" in response:   # MCP-style {content: [...]} responses
            return content_text(response["content"]), False
    if isinstance(response, str):
        return response, False
    return dumps(response), False


def result_payload(result: Any) -> tuple[str, str, str, bool]:
    """(text, payload_shape, json_path suffix, has_error) of a tool call's ``result``.

    A single functionResponse with a string output/error points at that string (shape
    ``string``: the exact bytes a prune would replace); anything else points at the list.
    """
    parts = _parts(result)
    responses = [p for p in parts if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)]
    if len(parts) == 1 and len(responses) == 1:
        response = responses[0]["functionResponse"].get("response")
        text, has_error = response_text(response)
        if isinstance(response, dict):
            key = "error" if "error" in response else "output" if "output" in response else None
            if key and isinstance(response[key], str):
                return text, "string", f"/0/functionResponse/response/{key}", has_error
        return text, "json", "/0/functionResponse/response", has_error
    texts, has_error = [], False
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            text, err = response_text(part["functionResponse"].get("response"))
            texts.append(text)
            has_error = has_error or err
        else:
            texts.append(part_text(part))
    if isinstance(result, str):
        return result, "string", "", False
    return "\n".join(texts), "blocks", "", has_error


def shell_failed(tool_name: str | None, text: str) -> bool:
    """A shell-family result whose last ``Exit Code: N`` line is non-zero."""
    if tool_family(tool_name) != "shell":
        return False
    codes = EXIT_CODE.findall(text)
    return bool(codes) and int(codes[-1]) != 0


def is_slash_command(text: str) -> bool:
    text = text.lstrip()
    return text.startswith("/") and not text.startswith(("//", "/*"))


def _count(value: Any) -> int:
    """A count of a ``tokens`` object as ccusage 20.0.24 reads it (probed): a JSON number
    cut to an integer towards zero, a negative one 0 (``38.7`` is 38, ``-5`` is 0); anything
    else (missing, null, a string, a boolean) 0. A count beyond 64 bits is kept as it is, for
    the row check to quarantine: no table holds it (ccusage sums it as 2^64 - 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        value = int(value) if math.isfinite(value) else (2 ** 64 if value > 0 else 0)
    return max(value, 0)


def usage_columns(tokens: Any) -> dict:
    """The usage columns of a reply's ``tokens``. The cached tokens are taken out of the
    input only when the object adds up (``total = input + output + thoughts + tool``, each
    count read by :func:`_count`): an object that does not (no total, a total of other
    counts, a count missing or negative) is read as ccusage reads it, its input as already
    without the cached tokens (29 variants of a real session probed)."""
    if not isinstance(tokens, dict):
        return {}
    inp, out, cached, thoughts, tool, total = (
        _count(tokens.get(key))
        for key in ("input", "output", "cached", "thoughts", "tool", "total"))
    adds_up = total == inp + out + thoughts + tool
    return dict(input_tokens=(max(inp - cached, 0) if adds_up else inp) + tool,
                output_tokens=out + thoughts, cache_read_tokens=cached,
                reasoning_tokens=thoughts, usage_scope="call")


# ---------------------------------------------------------------------------------------
# One message -> rows (shared by both forms)
# ---------------------------------------------------------------------------------------
@dataclass
class Row:
    """One messages row, with the tool_calls/tool_results row that goes with it."""

    message: dict
    tool_call: dict | None = None
    tool_result: dict | None = None


@dataclass
class SessionFacts:
    session_id: str
    cwd: str | None
    # call ids that some toolCalls[] entry of the session already covers
    recorded_calls: set[str] = field(default_factory=set)
    recorded_results: set[str] = field(default_factory=set)


def _named_model(msg: dict) -> bool:
    return isinstance(msg.get("model"), str) and bool(msg["model"])


def _counted_reply(msg: Any) -> bool:
    """A model reply with a ``tokens`` object: what ccusage 20.0.24 counts, read or not."""
    return isinstance(msg, dict) and msg.get("type") == "gemini" and isinstance(msg.get("tokens"), dict)


def unread_usage_row(msg: dict, stand_in_id: str, path: str, session_id: str) -> dict:
    """The usage-only row of a reply that could not be read (subtype ``usage_unreadable``),
    under ``stand_in_id`` when it has no string id."""
    return dropped_usage_row(dict(msg, id=msg["id"] if isinstance(msg.get("id"), str) else stand_in_id),
                             path, session_id, "unreadable")


def validate_message(msg: Any, where: str, *, model_named: bool = False) -> None:
    """Raise :class:`RecordError` for a message no row can be made of. ``model_named``: a
    reply with ``tokens`` must name its model too (a session document's: ccusage 20.0.24
    reads no usage from one without, where it reads a JSONL record's whatever its model)."""
    if not isinstance(msg, dict):
        raise RecordError(f"{where} is a {type(msg).__name__}, expected a message object")
    if not isinstance(msg.get("id"), str):
        raise RecordError(f"{where} has no string 'id'")
    if not isinstance(msg.get("type"), str):
        raise RecordError(f"{where} ({msg['id']}) has no string 'type'")
    content = msg.get("content")
    if content is not None and not isinstance(content, (str, list, dict)):
        raise RecordError(f"{where} ({msg['id']}): content must be a string or a list of parts, "
                          f"found {type(content).__name__}")
    if model_named and _counted_reply(msg) and not _named_model(msg):
        # ccusage 20.0.24 reads no usage from such a reply (probed: a number, null, "", an
        # object, an array, true, absent): out of the usage sums too, with why
        raise RecordError(f"{where} ({msg['id']}): model is {json_type_name(msg.get('model'))}, "
                          f"expected a model name: {refused_by_ccusage('a reply')}")
    for key in ("toolCalls", "thoughts"):
        value = msg.get(key)
        if value is not None and not isinstance(value, list):
            raise RecordError(f"{where} ({msg['id']}): '{key}' must be a list, "
                              f"found {type(value).__name__}")
        for index, item in enumerate(value or []):
            if not isinstance(item, dict):
                raise RecordError(f"{where} ({msg['id']}): {key}[{index}] is a "
                                  f"{type(item).__name__}, expected an object")


def collect_recorded(messages: list[dict], facts: SessionFacts) -> None:
    for msg in messages:
        for call in msg.get("toolCalls") or []:
            if isinstance(call.get("id"), str):
                facts.recorded_calls.add(call["id"])
                if call.get("result") is not None:
                    facts.recorded_results.add(call["id"])


def message_rows(msg: dict, path: str, facts: SessionFacts) -> list[Row]:
    """The rows of one (validated) message, in order; ``path`` is its JSON pointer."""
    mtype = msg["type"]
    mid = msg["id"]
    ts = str_or_none(msg.get("timestamp"))
    content = msg.get("content")
    base = dict(session_id=facts.session_id, uuid=mid, timestamp_raw=ts, is_sidechain=False,
                is_prompt=False)
    rows: list[Row] = []

    if mtype == "user":
        display = msg.get("displayContent")
        text = content_text(content)
        shown = content_text(display) if display is not None else text
        if is_slash_command(shown):
            rows.append(Row(dict(base, role="user", kind="meta", subtype="slash_command",
                                 text=text, is_meta=True, is_prompt=False,
                                 json_path=f"{path}/content")))
        elif text or not _function_parts(content):
            rows.append(Row(dict(base, role="user", kind="text", text=text, is_meta=False,
                                 is_prompt=bool(text.strip()), json_path=f"{path}/content")))
        rows.extend(_content_tool_rows(content, path, base, facts, model=None))
        return rows
    if mtype in SYSTEM_TYPES:
        return [Row(dict(base, role="system", kind="meta", subtype=mtype,
                         text=content_text(content), is_meta=True, json_path=f"{path}/content"))]
    if mtype != "gemini":
        return [Row(dict(base, role="system", kind="other", subtype=mtype,
                         text=content_text(content), is_meta=False, json_path=f"{path}/content"))]

    model = str_or_none(msg.get("model"))
    assistant = dict(base, role="assistant", model=model, api_call_id=mid, is_meta=False)
    for index, thought in enumerate(msg.get("thoughts") or []):
        subject = str_or_none(thought.get("subject"))
        description = str_or_none(thought.get("description"))
        text = "\n\n".join(t for t in (subject, description) if t)
        rows.append(Row(dict(assistant, kind="thinking", text=text,
                             timestamp_raw=str_or_none(thought.get("timestamp")) or ts,
                             json_path=f"{path}/thoughts/{index}")))
    calls = msg.get("toolCalls") or []
    text = content_text(content)
    if text or not (rows or calls or _function_parts(content)):
        rows.append(Row(dict(assistant, kind="text", text=text, json_path=f"{path}/content")))
    rows.extend(_content_tool_rows(content, path, assistant, facts, model=model))
    results: list[Row] = []
    for index, call in enumerate(calls):
        call_path = f"{path}/toolCalls/{index}"
        call_id, name = str_or_none(call.get("id")), str_or_none(call.get("name"))
        args = call.get("args")
        input_json = dumps(args) if args is not None else "{}"
        rows.append(Row(
            dict(assistant, kind="tool_use", text=input_json, call_id=call_id, tool_name=name,
                 json_path=f"{call_path}/args"),
            tool_call=dict(session_id=facts.session_id, call_id=call_id, tool_name=name,
                           tool_family=tool_family(name, args), input_json=input_json,
                           cwd=facts.cwd, timestamp_raw=ts, json_path=f"{call_path}/args")))
        if call.get("result") is None:
            continue
        payload, shape, suffix, has_error = result_payload(call["result"])
        status = str_or_none(call.get("status"))
        is_error = has_error or (status in ERROR_STATUSES) or shell_failed(name, payload)
        rts = str_or_none(call.get("timestamp")) or ts
        rpath = f"{call_path}/result{suffix}"
        results.append(Row(
            dict(base, role="tool", kind="tool_result", text=payload, call_id=call_id,
                 tool_name=name, subtype=status, timestamp_raw=rts, is_meta=False,
                 json_path=rpath),
            tool_result=dict(session_id=facts.session_id, call_id=call_id, tool_name=name,
                             is_error=is_error, payload_shape=shape,
                             timestamp_raw=rts, json_path=rpath,
                             # parts with media (an image a tool returned): measured, counted
                             # and pruned as the whole result list, not by its text
                             payload=call["result"] if shape == "blocks" else None)))
    rows.extend(results)
    if rows:
        usage = usage_columns(msg.get("tokens"))
        rows[0].message.update(usage)
        if usage:   # the call is dated by its message's own time, as ccusage dates it (not
            # by a thought's; with no such time, by the session's start: usage_call_rows_of)
            rows[0].message["timestamp_raw"] = call_timestamp(ts)
    return rows


def dropped_usage_row(msg: dict, path: str, session_id: str, why: str) -> dict:
    """The usage-only row of a model reply no longer in the conversation (``why``: rewound |
    replaced): role assistant, kind meta, subtype ``usage_<why>``, no text."""
    return dict(session_id=session_id, uuid=msg["id"], timestamp_raw=call_timestamp(msg.get("timestamp")),
                is_sidechain=False, is_prompt=False, role="assistant", kind="meta",
                subtype=f"usage_{why}", text="", is_meta=True, model=str_or_none(msg.get("model")),
                api_call_id=msg["id"], json_path=f"{path}/tokens", **usage_columns(msg.get("tokens")))


def _function_parts(content: Any) -> bool:
    return any(isinstance(p, dict) and ("functionCall" in p or "functionResponse" in p)
               for p in _parts(content))


def _content_tool_rows(content: Any, path: str, common: dict, facts: SessionFacts,
                       model: str | None) -> list[Row]:
    """functionCall/functionResponse parts not already covered by a toolCalls[] entry."""
    if isinstance(content, str):
        return []
    rows = []
    for index, part in enumerate(_parts(content)):
        if not isinstance(part, dict):
            continue
        part_path = f"{path}/content/{index}" if isinstance(content, list) else f"{path}/content"
        call = part.get("functionCall")
        response = part.get("functionResponse")
        if isinstance(call, dict):
            call_id, name = str_or_none(call.get("id")), str_or_none(call.get("name"))
            if call_id and call_id in facts.recorded_calls:
                continue
            args = call.get("args")
            input_json = dumps(args) if args is not None else "{}"
            rows.append(Row(
                dict(common, role="assistant", kind="tool_use", text=input_json, call_id=call_id,
                     tool_name=name, is_prompt=False, json_path=f"{part_path}/functionCall/args"),
                tool_call=dict(session_id=facts.session_id, call_id=call_id, tool_name=name,
                               tool_family=tool_family(name, args), input_json=input_json,
                               cwd=facts.cwd, timestamp_raw=common.get("timestamp_raw"),
                               json_path=f"{part_path}/functionCall/args")))
        elif isinstance(response, dict):
            call_id, name = str_or_none(response.get("id")), str_or_none(response.get("name"))
            if call_id and call_id in facts.recorded_results:
                continue
            text, has_error = response_text(response.get("response"))
            rpath = f"{part_path}/functionResponse/response"
            cols = {k: v for k, v in common.items()
                    if k not in ("model", "api_call_id")}
            rows.append(Row(
                dict(cols, role="tool", kind="tool_result", text=text, call_id=call_id,
                     tool_name=name, json_path=rpath),
                tool_result=dict(session_id=facts.session_id, call_id=call_id, tool_name=name,
                                 is_error=has_error or shell_failed(name, text),
                                 payload_shape="json",
                                 timestamp_raw=common.get("timestamp_raw"), json_path=rpath)))
    return rows


def recorded_dir(meta: dict) -> str | None:
    """The first workspace directory the session recorded (the only path Gemini CLI writes)."""
    directories = meta.get("directories")
    if isinstance(directories, list) and directories and isinstance(directories[0], str):
        return directories[0]
    return None


def session_columns(meta: dict, ctx_parts: tuple[str, ...]) -> dict:
    first_dir = recorded_dir(meta)
    parent = None
    if meta.get("kind") == "subagent" and len(ctx_parts) >= 2 and ctx_parts[-2] != "chats":
        parent = ctx_parts[-2]
    extra = {k: meta[k] for k in ("projectHash", "kind", "summary", "directories", "lastUpdated")
             if meta.get(k) is not None}
    return dict(session_id=meta.get("sessionId"), format=FORMAT,
                project=first_dir or str_or_none(meta.get("projectHash")), git_branch=None,
                parent_session_id=parent, agent_id=None, cli_version=None,
                timestamp_raw=str_or_none(meta.get("startTime")), meta_json=dumps(extra))


def _looks_like_metadata(obj: Any) -> bool:
    """A JSONL session's first record: its facts (``sessionId``, ``projectHash``), no message
    member. Either fact may be damaged or missing: ccusage still reads the session."""
    return isinstance(obj, dict) and ("sessionId" in obj or "projectHash" in obj) \
        and not {"id", "type", "payload", "$set", "$rewindTo"} & obj.keys()


# ---------------------------------------------------------------------------------------
# Where the payloads sit (read by apply)
# ---------------------------------------------------------------------------------------
def _response_holders(base: tuple, response: Any) -> list[tuple]:
    """A ``functionResponse.response`` at ``base``: its ``error`` or else its ``output`` first
    (the payload itself), then the whole response."""
    if isinstance(response, dict):
        for key in ("error", "output"):
            if key in response:
                return [base + (key,), base]
    return [base]


def tool_call_result(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """A ``toolCalls[]`` entry ``{id, name, result}``: its one functionResponse's output/error,
    then the whole ``result`` list."""
    if not (d.get("id") == call_id and isinstance(d.get("result"), list) and "name" in d):
        return None
    found: list[tuple] = []
    responses = [(i, p["functionResponse"]) for i, p in enumerate(d["result"])
                 if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)]
    if len(d["result"]) == 1 and len(responses) == 1:
        i, fr = responses[0]
        found += _response_holders(here + ("result", i, "functionResponse", "response"),
                                   fr.get("response"))
    return found + [here + ("result",)]


def function_response(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """A ``{"functionResponse": {id, response}}`` part."""
    if isinstance(d.get("functionResponse"), dict) and d["functionResponse"].get("id") == call_id:
        return _response_holders(here + ("functionResponse", "response"),
                                 d["functionResponse"].get("response"))
    return None


def tool_call_input(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """A ``toolCalls[]`` entry's ``args``."""
    if d.get("id") == call_id and "args" in d and "name" in d:
        return [here + ("args",)]
    return None


def function_call_input(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """A ``{"functionCall": {id, args}}`` part's ``args``."""
    if isinstance(d.get("functionCall"), dict) and d["functionCall"].get("id") == call_id \
            and "args" in d["functionCall"]:
        return [here + ("functionCall", "args")]
    return None


def result_display_copies(obj: Any, path: tuple) -> list[tuple]:
    """A ``toolCalls[]`` entry on the way to ``path`` repeats its result in ``resultDisplay``."""
    dups: list[tuple] = []
    node = obj
    for depth, step in enumerate(path):
        if isinstance(node, dict) and step == "result" and node.get("resultDisplay") not in (None, "") \
                and "id" in node and "name" in node:
            dups.append(path[:depth] + ("resultDisplay",))
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            break
    return dups


class _GeminiPayloads:
    """Where both Gemini forms keep tool payloads."""

    result_shapes = (tool_call_result, function_response)
    input_shapes = (tool_call_input, function_call_input)

    @classmethod
    def duplicate_paths(cls, obj: Any, path: tuple) -> list[tuple]:
        return result_display_copies(obj, path)


# ---------------------------------------------------------------------------------------
# Legacy whole-JSON form
# ---------------------------------------------------------------------------------------
class GeminiCliReader(_GeminiPayloads, Reader):
    """Legacy ``session-*.json``: one document per session (registry key ``gemini_cli``)."""

    name = "gemini_cli"
    layout = "document"
    append_safe = True

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        if not path.endswith(".json") or path.endswith(".traj.json"):
            return 0
        has_id, has_hash = b'"sessionId"' in head, b'"projectHash"' in head
        name = path.rsplit("/", 1)[-1]
        in_place = name.startswith("session-") or "/.gemini/" in path
        if has_id and has_hash:
            return 95 if in_place else 80
        # one of the two lost (ccusage still reads the session): where Gemini CLI writes one
        return 90 if (has_id or has_hash) and in_place and b'"messages"' in head else 0

    def document(self, obj: Any, out: Emitter) -> str:
        if not isinstance(obj, dict):
            raise RecordError(f"a Gemini CLI session file holds an object, found {type(obj).__name__}")
        messages = obj.get("messages")
        if not isinstance(messages, list):
            raise RecordError("a Gemini CLI session needs a 'messages' list, found "
                              f"{type(messages).__name__}")
        if not (isinstance(obj.get("sessionId"), str) and obj["sessionId"]):
            # the file's name stands for a missing or damaged sessionId, as in ccusage
            obj = dict(obj, sessionId=self.ctx.stem)
        session = session_columns(obj, self.ctx.parts)
        out.session(json_path="", **session)
        facts = SessionFacts(obj["sessionId"], recorded_dir(obj))
        valid = {index for index, msg in enumerate(messages)
                 if out.read_element(f"messages[{index}]", msg, lambda index=index, msg=msg:
                                     validate_message(msg, f"messages[{index}]",
                                                      model_named=True))}
        collect_recorded([msg for index, msg in enumerate(messages) if index in valid], facts)
        for index, msg in enumerate(messages):
            if index not in valid or not out.read_element(
                    f"messages[{index}]", msg,
                    lambda index=index, msg=msg: self._message(out, msg, f"/messages/{index}", facts)):
                self._unread_usage(out, index, msg, facts)
        return "conversation"

    @staticmethod
    def _message(out: Emitter, msg: dict, path: str, facts: SessionFacts) -> None:
        for row in message_rows(msg, path, facts):
            cols = out.message(**row.message)
            if row.tool_call is not None:
                out.tool_call(seq=cols["seq"], block_no=cols["block_no"], **row.tool_call)
            if row.tool_result is not None:
                out.tool_result(seq=cols["seq"], block_no=cols["block_no"], **row.tool_result)

    @staticmethod
    def _unread_usage(out: Emitter, index: int, msg: Any, facts: SessionFacts) -> None:
        """A message of the session that could not be read (quarantined on its own: a bad
        message costs that message, not the session) still has its ``tokens`` counted when
        it is a model reply, as ccusage 20.0.24 counts every object of type ``gemini`` with a
        ``tokens`` object (probed: a reply without an id, with content of another type, with
        a ``toolCalls`` or ``thoughts`` that is not a list): a usage-only row (kind meta,
        subtype ``usage_unreadable``), unless that row cannot be stored either."""
        if not (_counted_reply(msg) and _named_model(msg)):
            return
        mark = out.mark()
        out.message(**unread_usage_row(msg, f"{facts.session_id}/messages/{index}",
                                       f"/messages/{index}", facts.session_id))
        if out.check_since(mark) is not None:
            out.rollback_to(mark)


# ---------------------------------------------------------------------------------------
# JSONL form
# ---------------------------------------------------------------------------------------
@dataclass
class Defined:
    """A message as last defined: the object and the line that defined it."""

    msg: dict
    line_no: int
    byte_offset: int
    byte_len: int
    json_path: str


class GeminiCliJsonlReader(_GeminiPayloads, Reader):
    """``session-*.jsonl``: replayed in order, emitted at ``finish()`` (key ``gemini_cli_jsonl``)."""

    name = "gemini_cli_jsonl"
    layout = "jsonl"
    append_safe = False

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        if not path.endswith(".jsonl"):
            return 0
        values = first_json_values(head, 1)
        if values and _looks_like_metadata(values[0]) and "type" not in values[0] \
                and "payload" not in values[0]:
            return 95
        if not values and b'"projectHash"' in head[:4096] and b'"sessionId"' in head[:4096] \
                and head.lstrip().startswith(b'{"sessionId"'):
            return 80
        return 0

    def begin(self, state: dict) -> None:
        self.meta: dict = {}
        self.meta_prov: tuple[int, int, int] | None = None
        self.messages: dict[str, Defined] = {}
        self.dropped: dict[str, tuple[Defined, str]] = {}   # id -> (last definition, why)
        self.unreadable: list[Defined] = []     # quarantined replies whose usage counts
        self.session_id: str | None = None

    def _drop(self, ids, why: str) -> None:
        for mid in ids:
            self.dropped[mid] = (self.messages.pop(mid), why)

    def line(self, obj: dict, out: Emitter) -> str:
        prov = (out.line_no, out.byte_offset, out.byte_len)
        if isinstance(obj.get("$rewindTo"), str):
            target = obj["$rewindTo"]
            ids = list(self.messages)
            self._drop(ids[ids.index(target):] if target in self.messages else ids, "rewound")
            return "rewind"
        if isinstance(obj.get("id"), str):
            validate_message(obj, "message record")
            self.messages[obj["id"]] = Defined(obj, *prov, "")
            return f"message:{obj['type']}"
        if isinstance(obj.get("$set"), dict):
            patch = obj["$set"]
            if "messages" in patch:
                messages = patch["messages"]
                if not isinstance(messages, list):
                    raise RecordError("'$set.messages' must be a list, found "
                                      f"{type(messages).__name__}")
                for index, msg in enumerate(messages):
                    validate_message(msg, f"$set.messages[{index}]")
                kept = {msg["id"] for msg in messages}
                self._drop([mid for mid in self.messages if mid not in kept], "replaced")
                self.messages = {msg["id"]: Defined(msg, *prov, f"/$set/messages/{index}")
                                 for index, msg in enumerate(messages)}
            self.meta.update({k: v for k, v in patch.items() if k != "messages"})
            if isinstance(self.meta.get("sessionId"), str):
                self.session_id = self.meta["sessionId"]
            return "set"
        if _looks_like_metadata(obj):
            self.meta.update(obj)
            if self.meta_prov is None:
                self.meta_prov = prov
            if isinstance(self.meta.get("sessionId"), str) and self.meta["sessionId"]:
                self.session_id = self.meta["sessionId"]
            else:   # the file's name stands for it (finish), as in ccusage
                self.meta.pop("sessionId", None)
            return "metadata"
        if "id" in obj or "type" in obj:
            # a message record without a string id: quarantined (unread_line keeps its usage)
            validate_message(obj, "message record")
        return "unknown"

    def unread_line(self, obj: dict, out: Emitter) -> None:
        """A quarantined message record that is a model reply with ``tokens`` (no string id,
        content or thoughts of another type): ccusage 20.0.24 counts it (probed), so it is
        kept as a usage-only row at the end of the file (subtype ``usage_unreadable``; id
        ``<sessionId>/line/<n>`` when it has none)."""
        if _counted_reply(obj):
            self.unreadable.append(Defined(obj, out.line_no, out.byte_offset, out.byte_len, ""))

    @staticmethod
    def _emit_defined(out: Emitter, item: "Defined", facts: SessionFacts,
                      blocks: dict[int, int]) -> None:
        """The rows of one surviving message, with the provenance of its defining line."""
        prov = dict(line_no=item.line_no, byte_offset=item.byte_offset, byte_len=item.byte_len)
        for row in message_rows(item.msg, item.json_path, facts):
            block = blocks.get(item.line_no, 0)
            blocks[item.line_no] = block + 1
            seq = item.line_no * SEQ_STRIDE + block
            out.message(seq=seq, block_no=block, **prov, **row.message)
            if row.tool_call is not None:
                out.tool_call(seq=seq, block_no=block, **prov, **row.tool_call)
            if row.tool_result is not None:
                out.tool_result(seq=seq, block_no=block, **prov, **row.tool_result)

    def finish(self, out: Emitter) -> dict:
        session_id = self.session_id or self.ctx.stem
        if self.meta_prov is not None:
            line_no, offset, length = self.meta_prov
            session = session_columns(dict(self.meta, sessionId=session_id), self.ctx.parts)
            out.session(line_no=line_no, byte_offset=offset, byte_len=length, json_path="",
                        **session)
        defined = list(self.messages.values())
        facts = SessionFacts(session_id, recorded_dir(self.meta))
        collect_recorded([d.msg for d in defined], facts)
        blocks: dict[int, int] = {}
        for item in defined:
            # a message that cannot be stored costs that message (its line was read)
            first_block = blocks.get(item.line_no, 0)
            label = f"line {item.line_no}" + (f" ({item.json_path})" if item.json_path else "")
            if not out.read_element(label, item.msg, lambda item=item: self._emit_defined(
                    out, item, facts, blocks)):
                blocks[item.line_no] = first_block
        # a model reply the user rewound (or a $set re-sync left out) is gone from the
        # conversation, but its API call was made and billed: one meta row keeps its usage
        # (ccusage counts these calls too), the transcript has no text of it
        for mid, (item, why) in self.dropped.items():
            if mid in self.messages or item.msg.get("type") != "gemini" \
                    or not isinstance(item.msg.get("tokens"), dict):
                continue
            block = blocks.get(item.line_no, 0)
            blocks[item.line_no] = block + 1
            out.message(seq=item.line_no * SEQ_STRIDE + block, block_no=block, line_no=item.line_no,
                        byte_offset=item.byte_offset, byte_len=item.byte_len,
                        **dropped_usage_row(item.msg, item.json_path, session_id, why))
        for item in self.unreadable:
            out.read_element(f"line {item.line_no}", item.msg, lambda item=item: out.message(
                seq=item.line_no * SEQ_STRIDE, block_no=0, line_no=item.line_no,
                byte_offset=item.byte_offset, byte_len=item.byte_len,
                **unread_usage_row(item.msg, f"{session_id}/line/{item.line_no}", "", session_id)))
        return {}
