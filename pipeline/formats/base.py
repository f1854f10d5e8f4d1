"""The reader contract shared by every transcript format.

A reader turns parsed JSON into rows of the staged tables (``pipeline.core.schema.STAGED``)
through an :class:`Emitter`. The ingest engine owns bytes, lines, JSON parsing, provenance
and the quarantine; a reader only interprets objects:

- ``layout = "jsonl"``: the engine calls ``begin(ctx, state)``, then ``line(obj, out)`` for
  every parsed line (in order), then ``finish(out) -> state``. ``state`` is a small JSON-able
  dict kept in ``sources.reader_state`` so that an append-only file can be continued from its
  watermark (e.g. Codex's session id and last ``total_token_usage``). ``append_safe = False``
  (Gemini JSONL with ``$set``/``$rewindTo``) makes any change re-read the whole file.
- ``layout = "document"``: the engine parses the whole file once and calls
  ``document(obj, out)``; rows carry ``line_no = 1`` and a ``json_path``.

A reader raises :class:`RecordError` with a sentence a person understands when an object
does not have the shape its format requires; the engine rolls back that line's rows and
quarantines it. A document's elements (a session's messages, a trajectory's history entries,
a rollout's items) are read each through :meth:`Emitter.read_element`, so that a bad element
costs that element: its rows are rolled back and it is quarantined on its own (a quarantine
row at line 0 naming it), the rest of the document is read. Readers never do I/O and keep every field they do not understand in
``records.raw``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Callable, ClassVar

import orjson
import pyarrow as pa

from pipeline.core.errors import RecordError
from pipeline.core.schema import STAGED
from pipeline.text.jsonspan import leading_members
from pipeline.text.media import media_tokens

__all__ = ["Emitter", "Reader", "SourceContext", "RecordError", "tool_family", "dumps",
           "content_text", "SEQ_STRIDE"]

# seq = line_no * SEQ_STRIDE + block_no: order within a session that survives appends.
SEQ_STRIDE = 10_000
# the tables a reader appends to (what a line's rollback undoes)
READER_TABLES = ("messages", "tool_calls", "tool_results", "session_info")
# what an Emitter collects: the readers' tables and the engine's quarantine rows (the engine
# keeps ``records`` itself, as columns)
EMITTED_TABLES = (*READER_TABLES, "quarantine")


# -- the row check: a reader's rows must fit the staged columns, line by line -----------------
# (a value of the wrong type would otherwise fail the Arrow conversion of a whole batch, far
# from its line; checked when the line ends, its rows are rolled back and the line quarantined)
TOKEN_COLUMNS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens",
                 "reasoning_tokens")
# the largest token count kept: 2^53 - 1, the largest integer a JSON writer in JavaScript
# (Claude Code, Gemini CLI) holds exactly; far beyond any real call, and sums of such counts
# cannot overflow the 64-bit columns and reports
MAX_TOKEN_COUNT = 2**53 - 1
# a recorded cost above this is not a cost (the reports sum costs as DECIMAL(38, 12))
MAX_COST_USD = 1e9
_INT_RANGE = {pa.int64(): (-2**63, 2**63 - 1), pa.int32(): (-2**31, 2**31 - 1)}
_PY_TYPE = {pa.string(): (str,), pa.bool_(): (bool,), pa.float64(): (float, int),
            pa.int64(): (int,), pa.int32(): (int,)}
_EXPECTED = {str: "a string", bool: "true or false", float: "a number", int: "an integer"}


# what check_row checks of a value beyond its type
_PLAIN, _TIMESTAMP, _TOKENS, _COST, _RANGE = range(5)


def _column_specs(table: str) -> dict[str, tuple]:
    """Per staged column: its Python types, what else is checked of it and its integer range."""
    def kind(name: str, dtype) -> int:
        if name == "timestamp_raw":
            return _TIMESTAMP
        if name in TOKEN_COLUMNS:
            return _TOKENS
        if name == "cost_usd_recorded":
            return _COST
        return _RANGE if dtype in _INT_RANGE else _PLAIN
    return {name: (_PY_TYPE[dtype], kind(name, dtype), _INT_RANGE.get(dtype))
            for name, dtype in STAGED[table].items()}


COLUMN_SPECS = {table: _column_specs(table) for table in ("messages", "tool_calls", "tool_results",
                                                         "session_info")}


def is_json_number(value: Any) -> bool:
    """Whether a parsed JSON value is a number (a boolean is not, though Python's ``bool`` is
    an ``int``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_type_name(value: Any) -> str:
    """The JSON type of a parsed value, as a person reads it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def unexpected(where: str, value: Any, expected: str) -> str:
    """A reason's first clause: where a value is, what it is, what was expected."""
    return f"{where} is {json_type_name(value)} ({short_value(value)}), expected {expected}"


def refused_by_ccusage(unit: str, subject: str = "it") -> str:
    """A reason's tail for a value ccusage 20.0.24 reads no usage from (``unit``: a line, an
    event, a reply; ``subject``: what is quarantined)."""
    return (f"ccusage reads no usage from such {unit}, so {subject} is quarantined so that it "
            "stays out of the usage sums")


def short_value(value: Any) -> str:
    """A value as a reason quotes it: its JSON, cut at 60 characters."""
    if is_json_number(value) and abs(value) >= 1e21:
        return f"{value:.3e}"
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


_YEAR = re.compile(r"\s*([+-]?)(\d+)-")
_BC = re.compile(r"\bBC\s*$", re.IGNORECASE)
_INFINITE = frozenset({"infinity", "-infinity", "+infinity", "inf", "-inf", "+inf"})
_ISO_LAST = frozenset("0123456789Z")


# the form of the times Claude Code writes, and the only one ccusage dates a line by (probed
# on ccusage 20.0.24: milliseconds or none, Z or a +hh:mm offset; "2026-11-06 10:00:00",
# microseconds, a lower-case z, "+0200", 24:00 and second 60 are not read)
_WRITTEN_TIME = re.compile(r"(\d{4}-\d\d-\d\d)T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{3})?"
                           r"(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)")


@functools.lru_cache(maxsize=4096)
def _calendar_date(day: str) -> bool:
    """Whether YYYY-MM-DD is a day of the calendar (not 2026-02-29 or 2026-11-31)."""
    import datetime

    try:
        datetime.date.fromisoformat(day)
    except ValueError:
        return False
    return True


def written_timestamp(raw: Any) -> str | None:
    """``raw`` when it is a time as Claude Code writes it (ISO 8601 to the second or the
    millisecond, with Z or an offset, on a day of the calendar), else None: usage reports date
    a call by such a time only, as ccusage does (a call with another time string is a "(no
    date)" row, not a call of the day of its neighbours)."""
    if isinstance(raw, str):
        match = _WRITTEN_TIME.fullmatch(raw)
        if match is not None and _calendar_date(match.group(1)):
            return raw
    return None


def call_timestamp(stamp: Any, *, keep_other: bool = False) -> Any:
    """The time a line's usage is dated by, as the rows keep it: a time as the agent writes it
    (:func:`written_timestamp`); None for another string (ccusage does not date a call by it
    either), except one the row check quarantines (an infinite time, a year outside
    0002-9998: :func:`odd_timestamp`), kept as it is so that it does; another JSON value:
    None, or as it is with ``keep_other`` (the row check then quarantines the line:
    "timestamp_raw is a number")."""
    if not isinstance(stamp, str):
        return stamp if keep_other else None
    return written_timestamp(stamp) or (stamp if odd_timestamp(stamp) is not None else None)


def odd_timestamp(raw: str) -> str | None:
    """Why a raw timestamp is outside the years the lake's stages can hold (0002-9998: Python's
    datetime ends at years 1 and 9999, and a time zone moves a time across them), or None.
    DuckDB parses infinity, BC years and years up to 294247: those would reach every stage."""
    # the usual form first (every line has one): a 4-digit year in range, ending in a digit
    # or Z, hence neither infinite nor BC
    if raw[4:5] == "-" and "0002" <= raw[:4] <= "9998" and raw[:4].isascii() and raw[:4].isdigit() \
            and raw[-1:] in _ISO_LAST:
        return None
    if raw.strip().lower() in _INFINITE:
        return f"timestamp {short_value(raw)} is infinite"
    if _BC.search(raw):
        return f"timestamp {short_value(raw)} is a BC date"
    match = _YEAR.match(raw)
    if match and (match.group(1) == "-" or not 2 <= int(match.group(2)) <= 9998):
        return f"timestamp {short_value(raw)} has a year outside 0002-9998"
    return None


def check_row(table: str, row: dict) -> str | None:
    """Why ``row`` cannot be a ``table`` row (a value of the wrong type or out of range), or
    None. Keys that are not staged columns are ignored (the Arrow conversion ignores them)."""
    specs = COLUMN_SPECS[table]
    for key, value in row.items():
        if value is None:
            continue
        spec = specs.get(key)
        if spec is None:
            continue
        types, kind, bounds = spec
        if type(value) not in types:
            return unexpected(key, value, _EXPECTED[types[0]])
        if kind == _PLAIN:
            continue
        if kind == _TIMESTAMP:
            odd = odd_timestamp(value)
            if odd is not None:
                return (f"{odd}, the years every report and time zone can hold: the line is "
                        "quarantined so that no later stage meets it")
        elif kind == _TOKENS:
            if value < 0:
                return (f"usage {key} is {short_value(value)}: a token count cannot be negative (the line is "
                        "quarantined so that it stays out of the usage sums)")
            if value > MAX_TOKEN_COUNT:
                return (f"usage {key} is {short_value(value)}, over the largest count kept ({MAX_TOKEN_COUNT:,}"
                        " = 2^53-1; a 64-bit count ends at 9,223,372,036,854,775,807): the line"
                        " is quarantined so that it stays out of the usage sums")
        elif kind == _COST:
            if not 0 <= value <= MAX_COST_USD:   # NaN fails both comparisons
                return (f"recorded cost {short_value(value)} USD is not a cost (negative, not finite or"
                        f" over {MAX_COST_USD:,.0f} USD): the line is quarantined so that it stays"
                        " out of the cost sums")
        elif not bounds[0] <= value <= bounds[1]:
            return f"{key} is {value}, outside the {64 if bounds[1] > 2**31 else 32}-bit range"
    return None


@dataclass
class SourceContext:
    """What a reader may know about the file it reads (no I/O through it)."""

    path: str
    source_id: str
    generation: int
    root: str = ""

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def stem(self) -> str:
        name = self.name
        for suffix in (".traj.json", ".jsonl", ".json", ".traj"):
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return name

    @property
    def parts(self) -> tuple[str, ...]:
        return PurePosixPath(self.path).parts

    @property
    def run_session_id(self) -> str:
        """A one-file-per-session trajectory's id: the stem (the instance id), then ``@`` and
        the folder it sits in below the archive root (the run), leaving out an instance folder
        of the stem's own name (SWE-agent writes ``<run>/<instance>/<instance>.traj``). A
        benchmark reruns the same instances in every run, so the stem alone would merge the
        replays of different runs into one session; a file at the root keeps the plain stem."""
        stem = self.stem
        try:
            folder = PurePosixPath(self.path).parent.relative_to(PurePosixPath(self.root))
        except ValueError:
            return stem
        parts = list(folder.parts)
        if parts and parts[-1] == stem:
            parts.pop()
        return f"{stem}@{'/'.join(parts)}" if parts else stem


def dumps(value: Any) -> str:
    """Compact JSON with non-ASCII kept (how Claude Code writes). An integer beyond 64 bits
    (which orjson does not write) is written by the standard library, digit for digit."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except TypeError as exc:
        if "64-bit" not in str(exc):
            raise
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- small readers of untrusted values: a value of the wrong type reads as absent -------------
def nested_value(obj: Any, *keys: str) -> Any:
    """``obj[key1][key2]...``, or None as soon as a level is not a dict."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def nonempty_str(value: Any) -> str | None:
    """``value`` when it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def str_or_none(value: Any) -> str | None:
    """``value`` when it is a string (empty too), else None."""
    return value if isinstance(value, str) else None


def exact_int(value: Any, default: int | None = None) -> int | None:
    """``value`` when it is an int (a bool is not) or an integral float (how a JSON number
    beyond 64 bits parses: kept as a number so the row check can report it), else ``default``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return default


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def loads_json(data: bytes | str) -> Any:
    """``orjson.loads``, and for JSON text holding a lone UTF-16 surrogate escape
    (``"\\ud83d"``: valid JSON, which JavaScript's ``JSON.stringify`` writes for a string cut
    inside an emoji, as Claude Code, Gemini CLI and Codex do; orjson refuses it) the standard
    library's parse with each lone surrogate read as U+FFFD, so that the text is valid UTF-8
    in every table. The raw bytes are untouched (apply edits byte spans: a pruned file keeps
    the escape, and restores byte for byte). Any other error is orjson's, raised as is."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as error:
        if "surrogate" not in str(error):
            raise
        refused = error

    def constant(name: str):   # NaN and Infinity are not JSON: orjson's answer stands
        raise refused

    try:
        text = bytes(data).decode("utf-8") if not isinstance(data, str) else data
        value = json.loads(text, parse_constant=constant)
    except (UnicodeDecodeError, ValueError):
        raise refused from None
    except RecursionError:   # nested deeper than Python parses: a recursion bomb, as orjson says
        raise orjson.JSONDecodeError("recursion limit exceeded", text, 0) from None
    return _without_lone_surrogates(value)


def _without_lone_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        if not _LONE_SURROGATE.search(value):
            return value
        # a valid pair stays one character; an unpaired half becomes U+FFFD
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(key): _without_lone_surrogates(item)
                for key, item in value.items()}
    return value


def token_count(container: dict, key: str, where: str) -> int | None:
    """``container[key]`` as a token count: None when absent, an int; any other value (null, a
    number written with a fraction or exponent: ``100.0``, ``1e2``) raises
    :class:`RecordError`, so that the line is quarantined (as ccusage 20.0.24 leaves such a
    line out) rather than counted. A count beyond 64 bits, which parses as a float, is kept as a
    number (:func:`exact_int`) for the row check to report ("over the largest count kept")."""
    if key not in container:
        return None
    value = container[key]
    count = None if type(value) is float and abs(value) < 2.0 ** 64 else exact_int(value)
    if count is None:
        raise RecordError(unexpected(f"{where}.{key}", value, "an integer token count") +
                          ": the line is quarantined so that it stays out of the usage sums")
    return count


def usage_object(container: dict, key: str, where: str) -> dict | None:
    """``container[key]`` as a usage object: None when absent or null; any value other than an
    object raises :class:`RecordError` (the line is quarantined, not read as "no usage")."""
    value = container.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise RecordError(unexpected(f"{where}.{key}", value, "an object") +
                      ": the line is quarantined so that it stays out of the usage sums")


def content_text(content: Any) -> str:
    """Text of a message/tool-result content: a string, a ``{text}`` object or a block list.

    Text blocks are joined with newlines; non-text blocks (images, documents) are represented
    by a short ``[image]``-style token so they are counted but not inlined.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        if isinstance(content.get("text"), str):
            return content["text"]
        return dumps(content)
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif block.get("type"):
                    parts.append(f"[{block['type']}]")
                else:
                    parts.append(dumps(block))
            else:
                parts.append(dumps(block))
        return "\n".join(parts)
    return dumps(content)


def media_payload(content: Any) -> tuple[int, str] | None:
    """(UTF-8 bytes, sha256 hex) of ``content``'s compact JSON when it is a block list (or a
    Codex ``{content: [...]}`` output) whose text leaves a block out: an image or a document
    (base64 data), or any typed block without text; None otherwise.

    Such a payload's text is a few ``[image]`` tokens while the transcript carries hundreds of
    kB of base64 (twice, in Claude Code's ``toolUseResult``): measured by its text it would
    never count as oversized. Its JSON is the form apply finds under the result's holder
    (``orjson.dumps`` of the parsed value) and the form the payload store keeps."""
    blocks = content.get("content") if isinstance(content, dict) else content   # Codex {content}
    if not isinstance(blocks, list) or not any(
            isinstance(block, dict) and (block.get("type") and not isinstance(block.get("text"), str)
                                         or "inlineData" in block or "fileData" in block)
            for block in blocks):   # typed blocks; Gemini's untyped media parts
        return None
    try:
        data = orjson.dumps(content)
    except TypeError:     # an integer beyond 64 bits: measured by its text, as before
        return None
    return len(data), hashlib.sha256(data).hexdigest()


def content_shape(content: Any) -> str:
    if isinstance(content, str):
        return "string"
    if isinstance(content, dict) and "text" in content:
        return "text_object"
    if isinstance(content, list):
        return "blocks"
    return "json"


_FAMILY = {
    # Claude Code
    "Read": "read", "NotebookRead": "read", "Write": "write", "Edit": "edit", "MultiEdit": "edit",
    "NotebookEdit": "edit", "Bash": "shell", "BashOutput": "shell", "KillShell": "shell",
    "Grep": "search", "Glob": "glob", "LS": "glob", "WebFetch": "web", "WebSearch": "web",
    "TodoWrite": "todo", "TodoRead": "todo", "TaskCreate": "todo", "TaskUpdate": "todo",
    "Task": "task", "Agent": "task", "ExitPlanMode": "other",
    # Gemini CLI / Qwen Code
    "read_file": "read", "read_many_files": "read", "write_file": "write", "replace": "edit",
    "edit": "edit", "run_shell_command": "shell", "grep_search": "search",
    "search_file_content": "search", "grep": "search", "glob": "glob", "list_directory": "glob",
    "ls": "glob", "web_fetch": "web", "google_web_search": "web", "web_search": "web",
    "write_todos": "todo", "todo_write": "todo", "save_memory": "memory", "task": "task",
    # Codex CLI
    "shell": "shell", "shell_command": "shell", "exec_command": "shell", "write_stdin": "shell",
    "local_shell": "shell",
    "apply_patch": "edit", "update_plan": "todo", "view_image": "read",
    # SWE-agent / mini-SWE-agent
    "bash": "shell", "str_replace_editor": "edit", "submit": "other", "open": "read",
    "goto": "read", "scroll_up": "read", "scroll_down": "read", "create": "write",
    "search_dir": "search", "search_file": "search", "find_file": "glob",
    "insert": "edit", "filemap": "read",
}


def tool_family(name: str | None, input_obj: Any = None) -> str:
    """Family of a tool across formats: read/write/edit/shell/search/glob/web/todo/task/memory/other.

    SWE-agent's ``str_replace_editor`` is a read when its command is ``view``.
    """
    if not isinstance(name, str) or not name:
        return "other"
    if name == "str_replace_editor" and isinstance(input_obj, dict):
        command = input_obj.get("command")
        if command == "view":
            return "read"
        if command == "create":
            return "write"
        return "edit"
    family = _FAMILY.get(name)
    return family or "other"  # MCP tools (mcp_*/mcp__*) and unknown tools included


class Emitter:
    """Collects one file's staged rows, filling provenance; a line's rows can be rolled back."""

    def __init__(self, ctx: SourceContext):
        self.ctx = ctx
        self.rows: dict[str, list[dict]] = {name: [] for name in EMITTED_TABLES}
        self._reader_tables = [self.rows[name] for name in READER_TABLES]
        self.line_no = 1
        self.byte_offset = 0
        self.byte_len = 0
        self._block = 0
        self._marks: tuple[int, ...] = (0,) * len(READER_TABLES)
        self._line_prov: dict = {}
        # (reason, element) of each element of a document quarantined on its own
        self.item_problems: list[tuple[str, Any]] = []

    # -- engine side -------------------------------------------------------------------
    def start_line(self, line_no: int, byte_offset: int, byte_len: int) -> None:
        self.line_no, self.byte_offset, self.byte_len = line_no, byte_offset, byte_len
        self._block = 0
        self._marks = tuple(len(rows) for rows in self._reader_tables)
        self._line_prov = {"source_id": self.ctx.source_id, "generation": self.ctx.generation,
                           "line_no": line_no, "byte_offset": byte_offset, "byte_len": byte_len}

    def check_line(self) -> str | None:
        """Why one of the current line's rows cannot be stored (:func:`check_row`), or None."""
        return self.check_since(self._marks)

    def rollback_line(self) -> None:
        self.rollback_to(self._marks)
        self.item_problems.clear()

    # -- one element of a document (reader side) --------------------------------------
    def mark(self) -> tuple[int, ...]:
        """Where the rows stand now, for :meth:`check_since` and :meth:`rollback_to`: a
        document reader marks each element (a message of a session document) so that a bad
        one costs that element only."""
        return tuple(len(rows) for rows in self._reader_tables)

    def check_since(self, mark: tuple[int, ...]) -> str | None:
        """Why one of the rows emitted since ``mark`` cannot be stored, or None."""
        for table, rows, start in zip(READER_TABLES, self._reader_tables, mark):
            for index in range(start, len(rows)):
                reason = check_row(table, rows[index])
                if reason is not None:
                    return f"a value of the wrong type or range: {reason}"
        return None

    def rollback_to(self, mark: tuple[int, ...]) -> None:
        for rows, start in zip(self._reader_tables, mark):
            del rows[start:]

    def read_element(self, label: str, element: Any, emit: Callable[[], Any]) -> bool:
        """``emit()`` the rows of one element of a document (``label``: where it is, e.g.
        ``messages[3]``); when it raises :class:`RecordError` or one of its rows cannot be
        stored, its rows are rolled back and it is quarantined on its own, the reason
        starting with ``label``. Returns whether it was read."""
        mark = self.mark()
        try:
            emit()
            reason = self.check_since(mark)
        except RecordError as exc:
            reason = exc.message
        if reason is None:
            return True
        self.rollback_to(mark)
        self.quarantine_item(reason if reason.startswith(label) else f"{label}: {reason}", element)
        return False

    def quarantine_item(self, reason: str, element: Any) -> None:
        """Quarantine one element of the document being read (its rows already rolled back
        by the reader): ingest stores it as a quarantine row of its own (line 0: not a line
        of the file, whose one line is read) with ``reason`` and the element's JSON."""
        self.item_problems.append((reason, element))

    def take(self) -> dict[str, list[dict]]:
        rows, self.rows = self.rows, {name: [] for name in EMITTED_TABLES}
        self._reader_tables = [self.rows[name] for name in READER_TABLES]
        self._marks = (0,) * len(READER_TABLES)
        return rows

    # -- reader side -------------------------------------------------------------------
    def _prov(self, cols: dict) -> dict:
        """The row with the current line's provenance (values the reader set win)."""
        if not self._line_prov:
            self.start_line(self.line_no, self.byte_offset, self.byte_len)
        return {**self._line_prov, **cols}

    def next_block(self) -> tuple[int, int]:
        """(block_no, seq) for the next ordered row of the current line/document."""
        block = self._block
        self._block += 1
        if block >= SEQ_STRIDE and self.line_no != 1:
            raise RecordError(f"more than {SEQ_STRIDE} content blocks in one line")
        return block, self.line_no * SEQ_STRIDE + block

    def message(self, **cols: Any) -> dict:
        if "seq" not in cols:
            cols["block_no"], cols["seq"] = self.next_block()
        row = self._prov(cols)
        self.rows["messages"].append(row)
        return row

    def tool_call(self, *, seq: int, block_no: int, **cols: Any) -> None:
        cols["seq"], cols["block_no"] = seq, block_no
        if "tool_family" not in cols:
            cols["tool_family"] = tool_family(cols.get("tool_name"))
        self.rows["tool_calls"].append(self._prov(cols))

    def tool_result(self, *, seq: int, block_no: int, payload: Any = None, **cols: Any) -> None:
        """A tool result's metadata; its payload text is the ``messages`` row at the same seq
        (kind ``tool_result``), from which sizes, hash and est_tokens are derived in SQL.
        ``payload``: the recorded value where the format's result holder puts it (what apply
        rewrites); a block list with media is measured by its JSON (:func:`media_payload`)."""
        cols["seq"], cols["block_no"] = seq, block_no
        media = media_payload(payload)
        if media is not None:
            cols["payload_json_bytes"], cols["payload_json_sha256"] = media
            tokens = media_tokens(payload)
            if tokens is not None:   # on the payload's message row, whose est_tokens adds them
                for row in reversed(self.rows["messages"]):
                    if row.get("seq") == seq and row.get("kind") == "tool_result":
                        row["media_tokens"] = tokens
                        break
        self.rows["tool_results"].append(self._prov(cols))

    def session(self, **cols: Any) -> None:
        self.rows["session_info"].append(self._prov(cols))


# -- where payloads sit (read by apply) ----------------------------------------------------
# A shape is a function (here, obj, call_id) -> the paths, relative to the node searched, of
# the call's payload when ``obj`` (a dict found at ``here``) has that shape, else None.
Shape = Callable[[tuple, dict, str], "list[tuple] | None"]


def iter_dicts(node: Any, path: tuple = ()):
    """(path, dict) for every object inside ``node``, depth first, in document order."""
    stack = [(path, node)]
    while stack:
        here, value = stack.pop()
        if isinstance(value, dict):
            yield here, value
            children = list(value.items())
        elif isinstance(value, list):
            children = list(enumerate(value))
        else:
            continue
        for key, child in reversed(children):
            if isinstance(child, (dict, list)):
                stack.append((here + (key,), child))


def find_holders(node: Any, call_id: str | None, shapes: tuple[Shape, ...]) -> list[tuple]:
    """The paths inside ``node`` where ``shapes`` put ``call_id``'s payload (document order;
    the first shape that fits an object wins for it)."""
    if not call_id or not shapes:
        return []
    found: list[tuple] = []
    for here, obj in iter_dicts(node):
        for shape in shapes:
            paths = shape(here, obj, call_id)
            if paths is not None:
                found += paths
                break
    return found


# the shapes of the vendor APIs that several formats record
def anthropic_tool_result(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """Anthropic Messages ``{"type": "tool_result", "tool_use_id", "content"}``."""
    if d.get("type") == "tool_result" and d.get("tool_use_id") == call_id and "content" in d:
        return [here + ("content",)]
    return None


def anthropic_tool_input(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """Anthropic Messages ``{"type": "tool_use", "id", "input"}``."""
    if d.get("type") == "tool_use" and d.get("id") == call_id and "input" in d:
        return [here + ("input",)]
    return None


# Server tools (run by the API: web_search, web_fetch, code_execution, ...) and MCP connector
# tools: ``server_tool_use`` / ``mcp_tool_use{id, name, input}`` in an assistant message, their
# results in the same message as ``<tool>_tool_result`` / ``mcp_tool_result{tool_use_id,
# content}``; a failed server tool's content is ``{"type": "<tool>_tool_result_error",
# "error_code"}``, an MCP result says ``is_error``.
SERVER_CALL_TYPES = frozenset({"server_tool_use", "mcp_tool_use"})
# the content blocks of an Anthropic message that are tool calls
CALL_TYPES = frozenset({"tool_use", *SERVER_CALL_TYPES})


def server_tool_result(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """A server/MCP tool's result ``{"type": "<tool>_tool_result", "tool_use_id", "content"}``."""
    kind = d.get("type")
    if isinstance(kind, str) and kind.endswith("_tool_result") and d.get("tool_use_id") == call_id \
            and "content" in d:
        return [here + ("content",)]
    return None


def server_tool_input(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """A server/MCP tool's call ``{"type": "server_tool_use" | "mcp_tool_use", "id", "input"}``."""
    kind = d.get("type")
    if isinstance(kind, str) and kind in SERVER_CALL_TYPES and d.get("id") == call_id \
            and "input" in d:
        return [here + ("input",)]
    return None


def chat_tool_result(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """OpenAI Chat ``{"role": "tool", "tool_call_id" (or SWE-agent's "tool_call_ids"), "content"}``."""
    if d.get("role") == "tool" and "content" in d and (
            d.get("tool_call_id") == call_id
            or (isinstance(d.get("tool_call_ids"), list) and call_id in d["tool_call_ids"])):
        return [here + ("content",)]
    return None


def chat_tool_input(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """OpenAI Chat ``tool_calls[]`` entry ``{"id", "function": {"arguments"}}``."""
    if d.get("id") == call_id and isinstance(d.get("function"), dict) \
            and "arguments" in d["function"]:
        return [here + ("function", "arguments")]
    return None


def responses_tool_result(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """OpenAI Responses ``{"type": "function_call_output" | "custom_tool_call_output",
    "call_id", "output"}``."""
    if d.get("type") in ("function_call_output", "custom_tool_call_output") \
            and d.get("call_id") == call_id and "output" in d:
        return [here + ("output",)]
    return None


def responses_tool_input(here: tuple, d: dict, call_id: str) -> list[tuple] | None:
    """OpenAI Responses ``function_call{call_id, arguments}`` / ``custom_tool_call{call_id, input}``."""
    kind = d.get("type")
    if kind == "function_call" and d.get("call_id") == call_id and "arguments" in d:
        return [here + ("arguments",)]
    if kind == "custom_tool_call" and d.get("call_id") == call_id and "input" in d:
        return [here + ("input",)]
    return None


class Reader:
    """Base class of a format reader; see the module docstring for the contract.

    Apply reads where a format keeps its payloads from the class: ``result_shapes`` and
    ``input_shapes`` (the tool results and tool-call inputs answering a call id, through
    :meth:`result_holders` / :meth:`input_holders`), ``result_keys`` / ``input_keys`` (the
    fields of the row's own JSON node tried after them), :meth:`duplicate_paths` (fields
    that hold a copy of a payload) and :meth:`input_clearable` (calls with no input field)."""

    name: ClassVar[str] = ""
    layout: ClassVar[str] = "jsonl"          # jsonl | document
    append_safe: ClassVar[bool] = True
    result_shapes: ClassVar[tuple[Shape, ...]] = ()
    input_shapes: ClassVar[tuple[Shape, ...]] = ()
    result_keys: ClassVar[tuple[str, ...]] = ("content", "observation", "output")
    input_keys: ClassVar[tuple[str, ...]] = ("input", "arguments", "args")

    @classmethod
    def result_holders(cls, node: Any, call_id: str | None) -> list[tuple]:
        """Paths (relative to ``node``) of the tool-result payloads answering ``call_id``."""
        return find_holders(node, call_id, cls.result_shapes)

    @classmethod
    def input_holders(cls, node: Any, call_id: str | None) -> list[tuple]:
        """Paths (relative to ``node``) of ``call_id``'s input (the request side)."""
        return find_holders(node, call_id, cls.input_shapes)

    @classmethod
    def duplicate_paths(cls, obj: Any, path: tuple) -> list[tuple]:
        """Fields of the line/document ``obj`` holding a copy of the payload at ``path``."""
        return []

    @classmethod
    def input_clearable(cls, call_id: str | None, tool_name: str | None = None) -> bool:
        """Whether the call's input sits in a field of its own that ``clear_input`` can
        replace (False where the format writes the command inside the reply's text, or keeps
        it as a typed object its own tool must read back)."""
        return True

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        """Confidence 0..100 that ``path`` (first bytes ``head``) is in this format."""
        return 0

    def __init__(self, ctx: SourceContext):
        self.ctx = ctx

    # jsonl layout
    def begin(self, state: dict) -> None:
        pass

    def line(self, obj: dict, out: Emitter) -> str:
        """Emit rows for one parsed line; return its record type."""
        raise NotImplementedError

    def finish(self, out: Emitter) -> dict:
        return {}

    def rollback(self) -> None:
        """Undo what the last ``line`` call changed in the reader's own state: the engine calls
        it when it quarantines that line (its rows are rolled back too), so that a quarantined
        line costs that line only (e.g. not the session it would have opened)."""

    def unread_line(self, obj: dict, out: Emitter) -> None:
        """Rows a quarantined line still gives, emitted after its rows and the reader's state
        were rolled back (the line stays quarantined): none by default. Claude Code keeps the
        usage ccusage counts from such a line (a usage-only row). The engine rolls these rows
        back too, and calls :meth:`rollback`, when one cannot be stored."""

    # document layout
    def document(self, obj: Any, out: Emitter) -> str:
        """Emit rows for a whole-JSON file; return its record type."""
        raise NotImplementedError


def first_json_values(head: bytes, limit: int = 3) -> tuple[Any, ...]:
    """Up to ``limit`` complete JSON lines from the head of a file (for sniffing; read-only:
    every reader sniffs the same head, so it is parsed once). A line that is not JSON (a
    damaged first line: NUL bytes, ``NaN``) is passed over, so the file is still recognised
    by its good lines and ingest quarantines that one line, not the whole file."""
    return _head_values(head)[:limit]


@functools.lru_cache(maxsize=4)
def first_line_members(head: bytes) -> dict:
    """The leading members of a first line that runs past ``head`` (parsed up to the first
    one cut off: :func:`pipeline.text.jsonspan.leading_members`); empty when the first line
    ends within the head (:func:`first_json_values` has it whole) or is not an object."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if b"\n" in text:
        return {}
    return leading_members(text)


@functools.lru_cache(maxsize=4)
def _head_values(head: bytes, most: int = 5) -> tuple[Any, ...]:
    values = []
    text = head.lstrip(b"\xef\xbb\xbf")
    for raw in text.split(b"\n", most)[:most]:
        raw = raw.strip()
        if not raw:
            continue
        try:
            values.append(loads_json(raw))
        except orjson.JSONDecodeError:
            continue
    return tuple(values)


COMMAND_WRAPPER = re.compile(r"^\s*<(command-name|command-message|command-args|local-command-stdout|local-command-stderr)>")
