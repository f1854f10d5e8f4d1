"""Build a small :class:`SessionInput` in code (tests, examples, replay tests).

Rows look like the lake's: one "line" per call of the builder (``seq = line * 10000 +
block``), ``est_tokens`` from :func:`pipeline.text.tokens.estimate_tokens`, payload sizes in UTF-8
bytes and code points, ``compaction_state`` as ingest computes it. Assistant rows of one turn
share an ``api_call_id``; a tool call continues the current turn when the previous row was an
assistant row, else it opens a new turn (a result always closes the API call, as in Claude
Code). Times are minutes after ``start``.

    b = SessionBuilder("s1", project="/work/p")
    b.prompt("fix the failing test", at=0)
    b.assistant("Looking.", at=1)
    b.tool("Read", {"file_path": "src/a.py"}, "...file text...", at=1)
    session = b.build()          # call_paths classified with pipeline.text.memory
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import orjson
import pyarrow as pa

from pipeline.formats.base import tool_family
from pipeline.policies.base import PRUNE_MARKER, CLEARED_TEXT, SessionInfo, SessionInput
from pipeline.text.tokens import estimate_tokens

STRIDE = 10_000


def _state(text: str | None) -> str | None:
    if text == CLEARED_TEXT:
        return "cleared"
    if text and PRUNE_MARKER in text:
        return "pruned"
    return None


class SessionBuilder:
    def __init__(self, session_id: str = "s1", *, project: str | None = "/work/project",
                 start: str = "2026-01-05T09:00:00+00:00", git_branch: str | None = None,
                 format: str = "claude_code"):
        self.session_id = session_id
        self.project = project
        self.start = datetime.fromisoformat(start).astimezone(timezone.utc)
        self.git_branch = git_branch
        self.format = format
        self.messages: list[dict] = []
        self.calls: list[dict] = []
        self.results: list[dict] = []
        self.line = 0
        self.minutes = 0.0
        self.turn = 0
        self._in_turn = False
        self._ids = 0

    # -- helpers ---------------------------------------------------------------------------
    def _time(self, at: float | None) -> datetime:
        if at is not None:
            self.minutes = float(at)
        return self.start + timedelta(minutes=self.minutes)

    def _row(self, role: str, kind: str, text: str, at: float | None, **extra: Any) -> dict:
        self.line += 1
        seq = self.line * STRIDE
        row = {
            "session_id": self.session_id, "seq": seq, "role": role, "kind": kind,
            "subtype": extra.pop("subtype", None), "text": text,
            "call_id": extra.pop("call_id", None), "tool_name": extra.pop("tool_name", None),
            "timestamp": self._time(at), "is_prompt": extra.pop("is_prompt", False),
            "is_meta": extra.pop("is_meta", False), "is_sidechain": False,
            "est_tokens": estimate_tokens(text), "char_len": len(text),
            "text_bytes": len(text.encode("utf-8")), "api_call_id": extra.pop("api_call_id", None),
            "compaction_state": _state(text) if kind == "tool_result" else None,
            "source_id": "src0", "line_no": self.line, "json_path": None, "block_no": 0,
        }
        assert not extra, extra
        self.messages.append(row)
        return row

    def _open_turn(self, new_turn: bool) -> str:
        if new_turn or not self._in_turn:
            self.turn += 1
        self._in_turn = True
        return f"msg_{self.turn:04d}:req"

    # -- rows ------------------------------------------------------------------------------
    def prompt(self, text: str, *, at: float | None = None) -> int:
        """A real user prompt (``is_prompt``)."""
        self._in_turn = False
        return self._row("user", "text", text, at, is_prompt=True)["seq"]

    def meta(self, text: str, *, at: float | None = None, role: str = "user") -> int:
        self._in_turn = False
        return self._row(role, "meta", text, at, is_meta=True)["seq"]

    def assistant(self, text: str, *, at: float | None = None, new_turn: bool = True) -> int:
        api = self._open_turn(new_turn)
        return self._row("assistant", "text", text, at, api_call_id=api)["seq"]

    def boundary(self, subtype: str = "compact_boundary", *, metadata: dict | None = None,
                 at: float | None = None) -> int:
        self._in_turn = False
        text = orjson.dumps(metadata).decode() if metadata is not None else ""
        return self._row("system", "boundary", text, at, subtype=subtype)["seq"]

    def call(self, tool: str, input_obj: Any = None, *, at: float | None = None,
             call_id: str | None = None, new_turn: bool = False, cwd: str | None = None) -> str:
        """A tool_use row (and its tool_calls row); returns the call id."""
        if call_id is None:
            self._ids += 1
            call_id = f"toolu_{self._ids:04d}"
        api = self._open_turn(new_turn)
        input_json = orjson.dumps(input_obj if input_obj is not None else {}).decode()
        row = self._row("assistant", "tool_use", input_json, at, call_id=call_id,
                        tool_name=tool, api_call_id=api)
        self.calls.append({
            "session_id": self.session_id, "seq": row["seq"], "call_id": call_id,
            "tool_name": tool, "tool_family": tool_family(tool, input_obj),
            "input_json": input_json, "cwd": cwd or self.project,
            "est_tokens": estimate_tokens(input_json), "source_id": "src0",
            "line_no": row["line_no"], "json_path": None, "block_no": 0,
        })
        return call_id

    def result(self, call_id: str | None, text: str, *, error: bool = False,
               at: float | None = None, shape: str = "string", tool: str | None = None) -> int:
        """A tool_result row (and its tool_results row); returns its seq."""
        self._in_turn = False
        row = self._row("tool", "tool_result", text, at, call_id=call_id)
        self.results.append({
            "session_id": self.session_id, "seq": row["seq"], "call_id": call_id,
            "tool_name": tool, "is_error": error, "payload_shape": shape,
            "payload_bytes": len(text.encode("utf-8")), "payload_chars": len(text),
            "est_tokens": estimate_tokens(text), "payload_sha256": None,
            "compaction_state": _state(text), "source_id": "src0", "line_no": row["line_no"],
            "json_path": None, "block_no": 0,
        })
        return row["seq"]

    def tool(self, tool: str, input_obj: Any, result: str, *, error: bool = False,
             at: float | None = None, shape: str = "string", new_turn: bool = False,
             call_id: str | None = None) -> int:
        """A call and its result; returns the result's seq."""
        cid = self.call(tool, input_obj, at=at, call_id=call_id, new_turn=new_turn)
        return self.result(cid, result, error=error, shape=shape)

    # -- build -----------------------------------------------------------------------------
    def build(self, *, classify: Callable[[str, str | None], str] | None = None,
              roots=None) -> SessionInput:
        """The SessionInput; read-family calls get paths and memory classes via
        :mod:`pipeline.text.paths` and ``classify(raw_path, cwd)`` (default: pipeline.text.memory with
        ``roots``, default roots when None)."""
        from pipeline.text.memory import Classifier, MemoryRoots, home_for_cwd
        from pipeline.text.paths import request_path_entries

        if classify is None:
            classifier = Classifier(roots or MemoryRoots())

            def classify(path: str, cwd: str | None) -> str:
                return classifier.classify(path, cwd=cwd, home=home_for_cwd(cwd))

        paths = {"session_id": [], "seq": [], "call_id": [], "path": [], "memory_class": []}
        for call in self.calls:
            if call["tool_family"] != "read":
                continue
            entries = request_path_entries(call["tool_name"], call["input_json"], call["cwd"],
                                           home=home_for_cwd(call["cwd"]))
            for entry in entries or [None]:
                paths["session_id"].append(self.session_id)
                paths["seq"].append(call["seq"])
                paths["call_id"].append(call["call_id"])
                paths["path"].append(entry.path if entry else None)
                paths["memory_class"].append(classify(entry.raw, call["cwd"]) if entry else None)
        info = SessionInfo(self.session_id, self.format, self.project, self.git_branch)
        return SessionInput(self.session_id, _table(self.messages, MESSAGE_TYPES),
                            _table(self.calls, CALL_TYPES), _table(self.results, RESULT_TYPES),
                            pa.table(paths, schema=pa.schema([
                                ("session_id", pa.string()), ("seq", pa.int64()),
                                ("call_id", pa.string()), ("path", pa.string()),
                                ("memory_class", pa.string())])), info)


MESSAGE_TYPES = {
    "session_id": pa.string(), "seq": pa.int64(), "role": pa.string(), "kind": pa.string(),
    "subtype": pa.string(), "text": pa.string(), "call_id": pa.string(),
    "tool_name": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"),
    "is_prompt": pa.bool_(), "is_meta": pa.bool_(), "is_sidechain": pa.bool_(),
    "est_tokens": pa.int64(), "char_len": pa.int64(), "text_bytes": pa.int64(),
    "api_call_id": pa.string(), "compaction_state": pa.string(), "source_id": pa.string(),
    "line_no": pa.int64(), "json_path": pa.string(), "block_no": pa.int32(),
}
CALL_TYPES = {
    "session_id": pa.string(), "seq": pa.int64(), "call_id": pa.string(),
    "tool_name": pa.string(), "tool_family": pa.string(), "input_json": pa.string(),
    "cwd": pa.string(), "est_tokens": pa.int64(), "source_id": pa.string(),
    "line_no": pa.int64(), "json_path": pa.string(), "block_no": pa.int32(),
}
RESULT_TYPES = {
    "session_id": pa.string(), "seq": pa.int64(), "call_id": pa.string(),
    "tool_name": pa.string(), "is_error": pa.bool_(), "payload_shape": pa.string(),
    "payload_bytes": pa.int64(), "payload_chars": pa.int64(), "est_tokens": pa.int64(),
    "payload_sha256": pa.string(), "compaction_state": pa.string(), "source_id": pa.string(),
    "line_no": pa.int64(), "json_path": pa.string(), "block_no": pa.int32(),
}


def _table(rows: list[dict], types: dict[str, pa.DataType]) -> pa.Table:
    schema = pa.schema(list(types.items()))
    return pa.Table.from_pylist(rows, schema=schema)


def apply_evictions(session: SessionInput, evictions: list[dict] | pa.Table) -> SessionInput:
    """``session`` as its compacted transcript would be re-ingested: every eviction's
    replacement put in place (results: text, sizes, ``est_tokens`` and ``compaction_state``
    as ingest computes them; ``clear_input``: the call's input). Pure; for tests and replay."""
    rows = evictions.to_pylist() if isinstance(evictions, pa.Table) else list(evictions)
    by_result = {e["seq"]: e["replacement"] for e in rows if e["action"] in ("clear", "prune")}
    by_input = {e["seq"]: e["replacement"] for e in rows if e["action"] == "clear_input"}

    def rewrite(table: pa.Table, text_col: str, replaced: dict[int, str], sizes: dict) -> pa.Table:
        data = table.to_pylist()
        for row in data:
            new = replaced.get(row["seq"])
            if new is None:
                continue
            row[text_col] = new
            for column, fn in sizes.items():
                if column in row:
                    row[column] = fn(new)
        return pa.Table.from_pylist(data, schema=table.schema)

    messages = pa.table(session.messages) if not isinstance(session.messages, pa.Table) \
        else session.messages
    msg_text = {**by_result, **by_input}
    messages = rewrite(messages, "text", msg_text, {
        "est_tokens": estimate_tokens, "char_len": len,
        "text_bytes": lambda t: len(t.encode("utf-8")),
    })
    data = messages.to_pylist()
    for row in data:
        if row["seq"] in by_result and "compaction_state" in row:
            row["compaction_state"] = _state(row["text"])
    messages = pa.Table.from_pylist(data, schema=messages.schema)
    results = session.tool_results
    if results is not None:
        data = results.to_pylist()
        for row in data:
            new = by_result.get(row["seq"])
            if new is not None:
                row.update(payload_bytes=len(new.encode("utf-8")), payload_chars=len(new),
                           est_tokens=estimate_tokens(new), compaction_state=_state(new))
        results = pa.Table.from_pylist(data, schema=results.schema)
    calls = session.tool_calls
    if calls is not None and by_input:
        calls = rewrite(calls, "input_json", by_input, {"est_tokens": estimate_tokens})
    return SessionInput(session.session_id, messages, calls, results, session.call_paths,
                        session.info)
