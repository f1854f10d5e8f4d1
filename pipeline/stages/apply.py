"""Apply a plan: write pruned transcripts in the source format, every removed byte stored.

``apply_policy`` mirrors the archive under ``<out>/<policy>/``: untouched files are byte copies,
a line holding an evicted payload has just that JSON value's byte span replaced, and the
original bytes go to the content-addressed store with a restore manifest BEFORE the output is
renamed into place. Where each format keeps its payloads, the no-loss order and the failure
rules: docs/apply.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import orjson
import pyarrow as pa

from pipeline.core import sqlfiles
from pipeline.core.batching import contiguous_runs
from pipeline.core.config import policy_key
from pipeline.core.errors import CtxlakeError, StoreError, UnknownFormatError, UsageError
from pipeline.formats.base import Reader, content_text, loads_json
from pipeline.text.jsonspan import SpanError, find_spans, parse_pointer, resolve
from pipeline.core.lake import (FILE_MODE, OUTPUT_MARKER, Lake, check_output_folder, claim_folder, glob_escape,
                                private_dirs, write_marker)
from pipeline.core.store import (
    PayloadStore, _write_all, arm_crash_points, crash_point, file_sha256, sha256_hex, sync_files,
)

__all__ = ["apply_policy", "ApplySummary", "ApplyError", "encode_json_string",
           "OUTPUT_TEMP", "LOCATOR"]

BOM = b"\xef\xbb\xbf"
LOCATOR = re.compile(r"compaction://([0-9a-f]{64})")
OUTPUT_TEMP = re.compile(r"^\.ctxlake-.*\.tmp$")
RESULT_ACTIONS = ("clear", "prune")
MANIFEST_VERSION = 1
# outputs are made durable and renamed into place in batches of this many bytes / files
BATCH_BYTES = 64 * 1024 * 1024
BATCH_FILES = 512
# below this many source bytes, one process is faster than a pool of forked workers
PARALLEL_MIN_BYTES = 24 * 1024 * 1024


class ApplyError(CtxlakeError):
    """A plan cannot be applied to a file as it is (payload not found, changed, ambiguous)."""


# --------------------------------------------------------------------------------------
# JSON string encoding in the source's style
# --------------------------------------------------------------------------------------
def encode_json_string(text: str, *, ascii_only: bool) -> bytes:
    """``text`` as a JSON string: ``"``, ``\\``, ``\\n\\r\\t\\b\\f`` and other control
    characters escaped (``\\u00xx``), as JavaScript's ``JSON.stringify`` and Python's ``json``
    write it; non-ASCII kept as UTF-8 unless ``ascii_only``."""
    if not ascii_only:
        try:
            return orjson.dumps(text)       # same escapes as json.dumps, several times faster
        except TypeError:                   # lone surrogates: orjson refuses them
            pass
    return json.dumps(text, ensure_ascii=ascii_only).encode("utf-8")


def _codec_for(value: Any, raw: bytes) -> str:
    """How the original span can be rebuilt from the value's text: json, json_ascii or raw."""
    if isinstance(value, str):
        try:
            if encode_json_string(value, ascii_only=False) == raw:
                return "json"
            if encode_json_string(value, ascii_only=True) == raw:
                return "json_ascii"
        except (UnicodeEncodeError, ValueError):
            pass
    return "raw"


# --------------------------------------------------------------------------------------
# locating payloads
# --------------------------------------------------------------------------------------
def _candidates(fmt: type[Reader], obj: Any, ev: dict) -> list[tuple]:
    """Absolute paths where the eviction's payload may be, most specific first: where the
    file's format puts the call's payload under the row's ``json_path``, then that node's own
    payload fields, then the node itself (Gemini's ``json_path`` of a call is its ``args``).
    Empty for the input of a call whose format keeps it inside the reply's text
    (``input_clearable``): that message is refused, never replaced by ``{}``."""
    pointer = ev.get("json_path") or ""
    is_input = ev["action"] == "clear_input"
    if is_input and not fmt.input_clearable(ev.get("call_id"), ev.get("tool_name")):
        return []
    try:
        node, base = resolve(obj, parse_pointer(pointer))
    except SpanError as exc:
        raise ApplyError(f"json_path {pointer!r} not found ({exc})") from None
    holders = fmt.input_holders(node, ev.get("call_id")) if is_input \
        else fmt.result_holders(node, ev.get("call_id"))
    out = [base + rel for rel in holders]
    block_no = ev.get("block_no")
    if block_no is not None and len(out) > 1:
        preferred = [p for p in out if p[:3] == ("message", "content", block_no)]
        out = preferred + [p for p in out if p not in preferred]
    if pointer and not isinstance(node, dict):
        out.append(base)
    if isinstance(node, dict):
        keys = fmt.input_keys if is_input else fmt.result_keys
        out.extend(base + (key,) for key in keys if key in node)
        if pointer:
            out.append(base)
    seen: set = set()
    return [p for p in out if not (p in seen or seen.add(p))]


def _matching_forms(value: Any, raw: bytes, wanted: set[str]) -> dict[str, bytes]:
    """Of the payload's byte forms a plan may have hashed (its text, its JSON bytes, its
    compact JSON), those whose sha256 is in ``wanted``, computed lazily in that order."""
    found: dict[str, bytes] = {}
    makers = (lambda: content_text(value).encode("utf-8"), lambda: bytes(raw),
              lambda: orjson.dumps(value))
    for make in makers:
        try:
            form = make()
        except TypeError:
            continue
        digest = sha256_hex(form)
        if digest in wanted:
            found[digest] = form
            if len(found) == len(wanted):
                break
    return found


def _locator_sha(locator: str | None) -> str | None:
    if not locator:
        return None
    match = LOCATOR.fullmatch(locator.strip())
    if not match:
        raise ApplyError(f"locator {locator!r} is not compaction://<sha256>")
    return match.group(1)


@dataclasses.dataclass
class _Edit:
    start: int            # span in the line/document content
    end: int
    new: bytes
    value: Any            # the original parsed value
    locator_sha: str | None = None
    locator_bytes: bytes | None = None


def _eviction_order(ev: dict) -> tuple:
    return (ev.get("at_seq") if ev.get("at_seq") is not None else -1,
            ev.get("seq") if ev.get("seq") is not None else -1,
            ev.get("action") or "", ev.get("replacement") or "")


def _new_value(ev: dict, original: Any, ascii_only: bool) -> tuple[bytes, Any]:
    """The bytes written in place of ``original`` and the value they parse to.

    A result payload becomes the replacement as a JSON string. A call's input
    (``clear_input``) keeps its JSON kind: a string input (Codex ``arguments``) becomes the
    replacement as a string, an object input becomes the replacement's JSON value when the
    replacement is JSON text (``{}``), else the replacement as a string.
    """
    text = ev["replacement"]
    if ev["action"] == "clear_input" and not isinstance(original, str):
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError:
            parsed = None
        else:
            return orjson.dumps(parsed) if not ascii_only else \
                json.dumps(parsed, separators=(",", ":")).encode("ascii"), parsed
    return encode_json_string(text, ascii_only=ascii_only), text


def rewrite_json(fmt: type[Reader], content: bytes, evictions: list[dict]) -> tuple[bytes, list[_Edit]]:
    """Apply ``evictions`` to one JSON text (a JSONL line without its newline, or a document)
    of format ``fmt`` (its reader class: where its payloads sit).

    Returns the new text and the edits (spans of ``content``, in order). Raises ApplyError.
    """
    try:
        obj = loads_json(content)
    except orjson.JSONDecodeError as exc:
        raise ApplyError(f"not valid JSON any more: {exc}") from None
    ascii_only = content.isascii()
    plan_paths: dict[tuple, list[tuple]] = {}
    for ev in evictions:
        action = ev.get("action")
        if action not in ("clear", "prune", "clear_input"):
            raise ApplyError(f"unknown eviction action {action!r} for call {ev.get('call_id')}")
        if not isinstance(ev.get("replacement"), str):
            raise ApplyError(f"eviction of call {ev.get('call_id')} has no replacement text")
        plan_paths[id(ev)] = _candidates(fmt, obj, ev)
        if not plan_paths[id(ev)]:
            raise ApplyError(f"no {'input' if action == 'clear_input' else 'tool result'} "
                             f"for call {ev.get('call_id')!r} here")
    dup_map: dict[tuple, list[tuple]] = {}
    for ev in evictions:
        if ev["action"] in RESULT_ACTIONS:
            for path in plan_paths[id(ev)]:
                if path not in dup_map:
                    dup_map[path] = fmt.duplicate_paths(obj, path)
    every = sorted({p for paths in plan_paths.values() for p in paths}
                   | {d for dups in dup_map.values() for d in dups})
    try:
        spans = find_spans(content, every, value=obj)
    except SpanError as exc:
        raise ApplyError(f"cannot locate the payload bytes: {exc}") from None
    targets: dict[tuple, tuple[dict, bool]] = {}   # path -> (eviction, is_duplicate)
    locators: dict[tuple, tuple[str, bytes]] = {}
    for ev in sorted(evictions, key=_eviction_order):
        wanted = ev.get("payload_sha256")
        loc_sha = _locator_sha(ev.get("locator"))
        picked = None
        stored_form = None
        for path in plan_paths[id(ev)]:
            if wanted or loc_sha:
                value, _ = resolve(obj, path)
                start, end = spans[path]
                need = {d for d in (wanted, loc_sha) if d}
                digests = _matching_forms(value, content[start:end], need)
                if len(digests) < len(need):
                    continue
                if loc_sha:
                    stored_form = (loc_sha, digests[loc_sha])
            picked = path
            break
        if picked is None:
            raise ApplyError(f"the payload of call {ev.get('call_id')!r} no longer matches the "
                             f"plan (sha256 {wanted or loc_sha})",
                             hint="the file changed since it was planned: ingest and plan again")
        targets[picked] = (ev, False)
        locators.pop(picked, None)
        if stored_form is not None:
            locators[picked] = stored_form
        if ev["action"] in RESULT_ACTIONS:
            for dup in dup_map[picked]:
                if dup not in targets or targets[dup][1]:
                    targets[dup] = (ev, True)
    ordered = sorted(targets, key=lambda p: spans[p])
    for before, after in zip(ordered, ordered[1:]):
        if spans[after][0] < spans[before][1]:
            raise ApplyError("two evicted values overlap (one inside the other): "
                             f"/{'/'.join(map(str, before))} and /{'/'.join(map(str, after))}")
    edits: list[_Edit] = []
    pieces: list[bytes] = []
    expected: dict[tuple, Any] = {}
    cursor = 0
    for path in ordered:
        ev, _ = targets[path]
        start, end = spans[path]
        value, _ = resolve(obj, path)
        new, expected[path] = _new_value(ev, value, ascii_only)
        loc = locators.get(path)
        if content[start:end] == new:
            continue
        edits.append(_Edit(start, end, new, value, *(loc or (None, None))))
        pieces.append(content[cursor:start])
        pieces.append(new)
        cursor = end
    if not edits:
        return content, []
    pieces.append(content[cursor:])
    rewritten = b"".join(pieces)
    try:
        check = loads_json(rewritten)
        for path in ordered:
            got, _ = resolve(check, path)
            if got != expected[path]:
                raise ApplyError("internal check failed: the rewritten value differs")
    except (orjson.JSONDecodeError, SpanError) as exc:
        raise ApplyError(f"internal check failed: rewritten JSON is invalid ({exc})") from None
    return rewritten, edits


# --------------------------------------------------------------------------------------
# one file
# --------------------------------------------------------------------------------------
def format_of(source: dict) -> type[Reader]:
    """The reader class of the format ingest recorded for ``source`` (its layout and where its
    payloads sit). Raises UnknownFormatError: a format is never guessed from the bytes."""
    from pipeline.formats import READERS

    cls = READERS.get(source.get("format") or "")
    if cls is None:
        raise UnknownFormatError(
            f"the lake records the format {source.get('format')!r} for this file, which is not "
            f"a known format ({', '.join(sorted(READERS))})", path=source.get("path"),
            hint="run `ctxlake ingest` again with this version of ctxlake")
    return cls


@dataclasses.dataclass
class _Rewrite:
    pieces: list            # bytes / memoryview parts of the output
    edits: list             # (at_out, new_len, original_bytes, value, locator_sha, locator_bytes)


def _rewrite_file(data: bytes, fmt: type[Reader], evictions: list[dict]) -> _Rewrite:
    """Output pieces and absolute edits for one file's bytes, in format ``fmt``."""
    view = memoryview(data)
    pieces: list = []
    edits: list = []
    out_pos = 0
    cursor = 0

    def emit_unit(start: int, end: int, unit_evictions: list[dict]) -> None:
        nonlocal out_pos, cursor
        content_start = start + (len(BOM) if start == 0 and data.startswith(BOM) else 0)
        new, unit_edits = rewrite_json(fmt, bytes(view[content_start:end]), unit_evictions)
        if not unit_edits:
            return
        pieces.append(view[cursor:content_start])
        out_pos += content_start - cursor
        previous = 0
        for edit in unit_edits:
            out_pos += edit.start - previous
            original = bytes(view[content_start + edit.start:content_start + edit.end])
            edits.append((out_pos, len(edit.new), original, edit.value, edit.locator_sha,
                          edit.locator_bytes))
            out_pos += len(edit.new)
            previous = edit.end
        out_pos += (end - content_start) - previous
        pieces.append(new)
        cursor = end

    if fmt.layout == "document":
        end = len(data)
        emit_unit(0, end, evictions)
    else:
        by_line: dict[int, list[dict]] = {}
        for ev in evictions:
            line_no = ev.get("line_no")
            if not isinstance(line_no, int) or line_no < 1:
                raise ApplyError(f"eviction of call {ev.get('call_id')!r} has no line number")
            by_line.setdefault(line_no, []).append(ev)
        line, pos = 1, 0
        for target in sorted(by_line):
            while line < target:
                nl = data.find(b"\n", pos)
                if nl < 0:
                    raise ApplyError(f"line {target} is past the end of the file (it has {line})")
                pos, line = nl + 1, line + 1
            nl = data.find(b"\n", pos)
            end = nl if nl >= 0 else len(data)
            if end > pos and data[end - 1:end] == b"\r":
                end -= 1
            try:
                emit_unit(pos, end, by_line[target])
            except ApplyError as exc:
                raise ApplyError(exc.message, line=target, hint=exc.hint) from None
    pieces.append(view[cursor:])
    return _Rewrite(pieces, edits)


def _manifest_bytes(original_sha: str, original_size: int, pruned_sha: str, pruned_size: int,
                    entries: list[list]) -> bytes:
    return orjson.dumps({
        "ctxlake_restore": MANIFEST_VERSION,
        "original_sha256": original_sha, "original_size": original_size,
        "pruned_sha256": pruned_sha, "pruned_size": pruned_size,
        "edits": entries,
    }, option=orjson.OPT_SORT_KEYS) + b"\n"


def _store_edits(store: PayloadStore, rewrite: _Rewrite) -> list[list]:
    """Store every removed span (and every locator payload) BEFORE the output is written;
    the manifest entries ``[at, length, sha256, codec]``."""
    entries = []
    for at, length, original, value, loc_sha, loc_bytes in rewrite.edits:
        if loc_sha:
            got = store.put(loc_bytes)
            if got != loc_sha:  # pragma: no cover - _matching_forms guarantees it
                raise StoreError(f"locator payload hashed to {got}, expected {loc_sha}")
        codec = _codec_for(value, original)
        blob = value.encode("utf-8") if codec != "raw" else original
        entries.append([at, length, store.put(blob), codec])
    return entries


def _hash_pieces(pieces: list) -> tuple[str, int]:
    hasher = hashlib.sha256()
    size = 0
    for piece in pieces:
        hasher.update(piece)
        size += len(piece)
    return hasher.hexdigest(), size


def _same_file(path: Path, sha: str, size: int) -> bool:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if not path.is_file() or path.is_symlink() or st.st_size != size:
        return False
    return file_sha256(path) == sha


def _write_temp(path: Path, pieces: list, mode: int) -> Path:
    """Write the output's bytes to a temp file beside it (made durable by the batch barrier,
    then renamed into place by :func:`_commit`)."""
    private_dirs(path.parent)
    tmp = path.with_name(f".ctxlake-{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            half = len(pieces) // 2
            for index, piece in enumerate(pieces):
                if index == half:
                    crash_point()
                _write_all(fd, piece)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    crash_point()
    return tmp


def _commit(tmp: Path, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    crash_point()


# --------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ApplyProblem:
    """A file apply left unpruned or unwritten, or plan rows it could not place."""

    path: str | None               # the source file (None: evictions of a source not in the lake)
    output: str | None             # its output (None: none was claimed)
    sessions: list[str]
    kind: str                      # plan stale collision unsafe missing format store write
    error: str


@dataclasses.dataclass
class ApplySummary:
    policy: str
    out: str
    files: int = 0                 # files mirrored (outputs considered)
    files_pruned: int = 0          # outputs with at least one replaced payload
    files_copied: int = 0          # outputs identical to their source (nothing evicted there)
    files_written: int = 0         # outputs actually (re)written by this run
    files_up_to_date: int = 0      # outputs that already had the right bytes (no-op)
    files_failed: int = 0          # files left unpruned or unwritten (see problems)
    files_removed: int = 0         # outputs of files gone from the lake, deleted (nightly job)
    outputs_kept: list[str] = dataclasses.field(default_factory=list)   # of those, edited: kept, said
    evictions: int = 0             # eviction rows of the plan considered
    evictions_applied: int = 0     # of which applied to an output
    values_replaced: int = 0       # JSON values replaced (payloads, inputs and duplicates)
    bytes_before: int = 0          # sources of the mirrored files
    bytes_after: int = 0           # their outputs
    payloads_stored: int = 0       # store files created by this run
    payloads_reused: int = 0       # store writes that found identical bytes already there
    store_bytes_added: int = 0
    seconds: float = 0.0
    problems: list[ApplyProblem] = dataclasses.field(default_factory=list)
    # per source id handled: its output path and whether it failed (for the stage ledger)
    outputs: dict[str, dict] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "outputs"}


def _policy_name(policy: str) -> str:
    """The policy name as the plan stage records it (whitespace normalised)."""
    name = " ".join((policy or "").split())
    if not name:
        raise UsageError("a policy name is required", hint="e.g. --policy payload_prune")
    return name


def _load_inputs(lake: Lake, policy: str, session_id: str | None,
                 evictions: pa.Table | None) -> tuple[list[dict], list[dict]]:
    with lake.connect() as con:
        views = {row[0] for row in con.execute(
            "SELECT table_name FROM information_schema.tables").fetchall()}
        if evictions is not None:
            con.register("apply_evictions_input", evictions)
            source = sqlfiles.ident("apply_evictions_input")
        elif "evictions" in views:
            source = sqlfiles.ident("evictions")
        else:
            raise UsageError(f"no plan for policy '{policy}' yet",
                             hint=f"run `ctxlake plan --policy {policy}` first")
        params = {"policy": policy, "session_id": session_id}
        cur = con.execute(sqlfiles.render("select_apply_evictions", evictions=source), params)
        rows = sqlfiles.fetch_dicts(cur)
        if evictions is None and not rows:
            # a plan that evicts nothing still writes its (empty) evictions file
            planned = any((lake.derived_dir / "evictions").glob(f"{glob_escape(policy_key(policy))}*.parquet"))
            if not planned and "plans" in views:
                planned = con.execute(sqlfiles.load("select_plan_count"),
                                      {"policy": policy}).fetchone()[0] > 0
            if not planned:
                raise UsageError(f"no plan for policy '{policy}' yet",
                                 hint=f"run `ctxlake plan --policy {policy}` first")
        cur = con.execute(sqlfiles.load("select_apply_sources"), {"session_id": session_id})
        files = sqlfiles.fetch_dicts(cur)
    return rows, files


def _remove_output_temps(root: Path) -> None:
    if not root.is_dir():
        return
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if OUTPUT_TEMP.match(name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(dirpath, name))


def _fresh(data: bytes, data_sha: str, source: dict, layout: str) -> bool:
    """The file still holds what was ingested (or, for an append-only JSONL, only grew)."""
    if data_sha == source["sha256"]:
        return True
    mark = source.get("watermark")
    return (layout == "jsonl" and mark is not None and source.get("watermark_sha256")
            and len(data) >= mark and sha256_hex(memoryview(data)[:mark]) == source["watermark_sha256"])


def apply_policy(lake: Lake, *, policy: str, out: Path | str | None = None,
                 session_id: str | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 evictions: pa.Table | None = None,
                 source_ids: Iterable[str] | None = None, engine: Any = None) -> ApplySummary:
    """Write the pruned mirror of the archive for ``policy`` under ``<out>/<policy>/``.

    ``out`` defaults to ``<lake>/out``. ``evictions`` (a table with the columns of
    ``pipeline.core.schema.EVICTIONS``) replaces the lake's ``evictions`` view, for callers that
    planned in memory. ``source_ids`` (the nightly job's owed files): only these files.
    ``summary.outputs`` tells, per file handled, its output and whether it failed. See the
    module docstring for the guarantees.

    ``engine`` (:mod:`pipeline.stages.engine`; default: the activated one): with Ray, the
    files' work (read, store the removed bytes, write the temp output) runs as tasks over
    runs of files (:func:`_engine_outcomes`); the driver claims the outputs and commits them
    batch by batch exactly as here, so the outputs and the store are the same bytes. The
    local engine takes the same path over a forked pool of 2 once the files hold
    ``PARALLEL_MIN_BYTES`` (below that, in this process).
    """
    from pipeline.stages import engine as engines

    chosen = engines.resolve(engine)
    started = time.perf_counter()
    policy = _policy_name(policy)
    out_root = Path(out) if out is not None else lake.root / "out"
    target_root = out_root / policy_key(policy)
    summary = ApplySummary(policy=policy, out=str(target_root))
    arm_crash_points()
    with lake.lock():
        rows, files = _load_inputs(lake, policy, session_id, evictions)
        sources_real = _real_paths(f["path"] for f in files)
        # ctxlake's own folder: never a symlink, never the lake's, an archive's or the user's,
        # marked so that ingest never reads it back
        check_output_folder(lake.root, out_root, target_root, sources=sources_real)
        claim_folder(target_root, OUTPUT_MARKER, what="output")
        private_dirs(target_root)
        write_marker(target_root, OUTPUT_MARKER, "ctxlake apply outputs: never read as a transcript archive\n")
        if source_ids is not None:
            wanted = set(source_ids)
            files = [f for f in files if f["source_id"] in wanted]
            rows = [r for r in rows if r["source_id"] in wanted]
        summary.evictions = len(rows)
        by_source: dict[str, list[dict]] = {}
        for row in rows:
            by_source.setdefault(row["source_id"], []).append(row)
        known = {f["source_id"] for f in files}
        for source_id in sorted(set(by_source) - known):
            sessions = sorted({r["session_id"] or "" for r in by_source[source_id]})
            summary.problems.append(ApplyProblem(
                path=None, output=None, sessions=sessions, kind="plan",
                error=f"{len(by_source[source_id])} evictions refer to source {source_id}, "
                      "which is not in the lake's sources"))
        with PayloadStore.for_lake(lake.root, fsync_each=False) as store:
            try:
                store.remove_temps()
            except StoreError:
                pass  # reported by the first write that needs the store
            _remove_output_temps(target_root)
            taken: dict[Path, str] = {}
            total = sum(f["size_bytes"] or 0 for f in files)
            done = 0
            if progress:
                progress(0, total)
            pending: list[_Outcome] = []
            batch_bytes = 0

            def flush() -> None:
                # durability barrier: every payload, manifest and temp output of the batch is
                # on disk before any output of the batch is renamed into place
                sync_files(store.take_unsynced() + [str(o.tmp) for o in pending],
                           [store.root, Path(target_root)])
                for outcome in pending:
                    try:
                        _commit(outcome.tmp, outcome.output)
                    except OSError as exc:
                        outcome.fail("write", f"cannot write the output: {exc.strerror or exc}")
                        continue
                    summary.files_written += 1
                    outcome.count(summary)
                pending.clear()

            remote = {"stored": 0, "reused": 0, "bytes_added": 0}
            pool = chosen
            if engines.is_local(chosen):
                # a large apply takes the engine path over a forked pool: the same claims,
                # commits and bytes (the store's exclusive links count each new payload
                # once, whichever worker writes it first); a small one runs here
                workers = engines.default_workers()
                large = workers > 1 and len(files) > 1 and total >= PARALLEL_MIN_BYTES
                pool = engines.ForkedPool(workers) if large and engines.fork_safe() else None
            if pool is None:
                prepared = ((source, _prepare_one(source, by_source.get(source["source_id"], []),
                                                  store, target_root, taken, summary, sources_real))
                            for source in files)
            else:
                prepared = _engine_outcomes(pool, lake.root, files, by_source, target_root,
                                            taken, summary, sources_real, remote)
            for source, outcome in prepared:
                summary.outputs[source["source_id"]] = {
                    "output": None if outcome is None else str(outcome.output),
                    "path": source["path"]}
                if outcome is not None and outcome.tmp is not None:
                    pending.append(outcome)
                elif outcome is not None:
                    outcome.count(summary)
                batch_bytes += source["size_bytes"] or 0
                if batch_bytes >= BATCH_BYTES or len(pending) >= BATCH_FILES:
                    flush()
                    batch_bytes = 0
                done += source["size_bytes"] or 0
                if progress:
                    progress(done, total)
            flush()
            summary.payloads_stored = store.stored + remote["stored"]
            summary.payloads_reused = store.reused + remote["reused"]
            summary.store_bytes_added = store.bytes_added + remote["bytes_added"]
    summary.files_failed = len({(p.path, p.output) for p in summary.problems})
    failed_paths = {p.path for p in summary.problems}
    for entry in summary.outputs.values():
        entry["failed"] = entry["path"] in failed_paths or entry["output"] is None
    summary.problems.sort(key=lambda p: (p.path or "", p.kind, p.error))
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary


@dataclasses.dataclass
class _Outcome:
    """One file's prepared output, counted into the summary once it is in place."""

    path: str
    output: Path
    sessions: list[str]
    summary: ApplySummary
    tmp: Path | None = None        # temp file to rename; None when the output is up to date
    pruned: bool = False
    failed: bool = False
    replaced: int = 0
    evictions: int = 0
    bytes_after: int = 0

    def fail(self, kind: str, error: Exception | str) -> None:
        self.failed = True
        self.summary.problems.append(ApplyProblem(path=self.path, output=str(self.output),
                                                  sessions=self.sessions, kind=kind,
                                                  error=str(error)))

    def count(self, summary: ApplySummary) -> None:
        if self.tmp is None and not self.failed:
            summary.files_up_to_date += 1
        summary.bytes_after += self.bytes_after
        if self.pruned:
            summary.files_pruned += 1
            summary.values_replaced += self.replaced
            summary.evictions_applied += self.evictions
        elif not self.failed:
            summary.files_copied += 1


def _real_paths(paths: Iterable[str]) -> set[str]:
    """``os.path.realpath`` of each path, each folder resolved once: a file's real path is its
    folder's real path and its name, unless the file itself is a symlink (one lstat a file,
    not one per path component: the lake's every source is resolved each run)."""
    folders: dict[str, str] = {}
    out = set()
    for path in paths:
        folder, name = os.path.split(path)
        real_folder = folders.get(folder)
        if real_folder is None:
            real_folder = folders[folder] = os.path.realpath(folder)
        real = os.path.join(real_folder, name)
        if name in ("", ".", "..") or os.path.islink(real):
            real = os.path.realpath(path)
        out.add(real)
    return out


def _unsafe_output(target_root: Path, output: Path, sources_real: set[str]) -> str | None:
    """Why ``output`` must not be written: a symlink on its way from the output folder, or a
    path that resolves to a source file (the archive is never modified); else None."""
    current = target_root
    for part in output.relative_to(target_root).parts:
        current = current / part
        if os.path.islink(current):
            return f"refusing a symlink in the output folder ({current}): not followed"
    if os.path.realpath(output) in sources_real:
        return f"the output {output} is a source file of the archive: refused, sources are never modified"
    return None


def _prepare_one(source: dict, evictions: list[dict], store: PayloadStore, target_root: Path,
                 taken: dict[Path, str], summary: ApplySummary,
                 sources_real: set[str] = frozenset()) -> _Outcome | None:
    """Store what the file's plan removes, then write its output to a temp file (or find the
    output already up to date). None when the file has no output at all."""
    outcome = _claim_output(source, evictions, target_root, taken, summary, sources_real)
    return None if outcome is None else _write_one(source, evictions, store, outcome)


def _claim_output(source: dict, evictions: list[dict], target_root: Path,
                  taken: dict[Path, str], summary: ApplySummary,
                  sources_real: set[str] = frozenset()) -> _Outcome | None:
    """The file's output path, checked (inside the output folder, not taken by an earlier
    file, no symlink, not a source): its outcome, or None when it gets no output. Done on the
    driver, in file order (the first file claiming an output wins)."""
    path = source["path"]
    sessions = sorted({e["session_id"] for e in evictions if e.get("session_id")})
    rel = Path(source["rel_path"] or Path(path).name)
    if rel.is_absolute() or ".." in rel.parts:
        summary.problems.append(ApplyProblem(path=path, output=None, sessions=sessions,
                                             kind="collision",
                                             error=f"relative path {rel} leaves the output folder"))
        return None
    output = target_root / rel
    outcome = _Outcome(path, output, sessions, summary)
    if output in taken:
        outcome.fail("collision", f"output {output} is already written from {taken[output]}")
        return None
    taken[output] = path
    summary.files += 1
    unsafe = _unsafe_output(target_root, output, sources_real)
    if unsafe is not None:
        outcome.fail("unsafe", unsafe)
        return None
    return outcome


def _write_one(source: dict, evictions: list[dict], store: PayloadStore,
               outcome: _Outcome) -> _Outcome | None:
    """The claimed file's work: read it, store what its plan removes, write the output's temp
    file (or find the output up to date). Runs on the driver or in an engine's task."""
    path, output, summary = source["path"], outcome.output, outcome.summary
    try:
        with open(path, "rb") as handle:
            data = handle.read()
            mode = FILE_MODE   # outputs hold raw transcripts: private whatever the source's mode
    except OSError as exc:
        outcome.fail("missing", f"cannot read the source: {exc.strerror or exc}")
        return None
    summary.bytes_before += len(data)
    original_sha = sha256_hex(data)
    pieces: list = [data]
    entries: list[list] = []
    if evictions:
        try:
            fmt = format_of(source)
            if not _fresh(data, original_sha, source, fmt.layout):
                raise ApplyError("the source changed since it was ingested",
                                 hint="run `ctxlake ingest` and `ctxlake plan` again")
            rewrite = _rewrite_file(data, fmt, evictions)
            if rewrite.edits:
                entries = _store_edits(store, rewrite)
                pieces = rewrite.pieces
                outcome.replaced = len(rewrite.edits)
        except UnknownFormatError as exc:
            outcome.fail("format", f"{exc.message} (output left unpruned)")
            pieces, entries = [data], []
        except ApplyError as exc:
            outcome.fail("stale" if "changed since" in exc.message else "plan",
                         f"{exc} (output left unpruned)")
            pieces, entries = [data], []
        except StoreError as exc:
            outcome.fail("store", f"{exc} (output left unpruned)")
            pieces, entries = [data], []
    pruned_sha, pruned_size = _hash_pieces(pieces) if entries else (original_sha, len(data))
    try:
        store.put_manifest(pruned_sha, _manifest_bytes(original_sha, len(data), pruned_sha,
                                                       pruned_size, entries))
    except StoreError as exc:
        if entries:
            outcome.fail("store", f"{exc} (output left unpruned)")
            pieces, entries = [data], []
            pruned_sha, pruned_size = original_sha, len(data)
            with contextlib.suppress(StoreError):
                store.put_manifest(pruned_sha, _manifest_bytes(original_sha, len(data),
                                                               pruned_sha, pruned_size, []))
        elif not outcome.failed:   # a file that already failed is reported once
            outcome.fail("store", f"{exc} (restore manifest of the copy not written)")
    outcome.pruned = bool(entries)
    outcome.evictions = len(evictions) if entries else 0
    outcome.bytes_after = pruned_size
    try:
        if _same_file(output, pruned_sha, pruned_size):
            if output.stat().st_mode & 0o777 != mode:
                os.chmod(output, mode)
        else:
            outcome.tmp = _write_temp(output, pieces, mode)
    except OSError as exc:
        outcome.fail("write", f"cannot write the output: {exc.strerror or exc}")
        summary.bytes_before -= len(data)   # before and after: the files whose output is there
        return None
    return outcome


# --------------------------------------------------------------------------------------
# the files' work on an engine (Ray tasks)
# --------------------------------------------------------------------------------------
ENGINE_TASK_BYTES = 16 * 1024 * 1024   # source bytes per engine task
_TEMP_OF = re.compile(r"^\.ctxlake-(.*)\.[0-9a-f]{12}\.tmp$")


def _engine_outcomes(chosen: Any, lake_root: Path, files: list[dict],
                     by_source: dict[str, list[dict]], target_root: Path,
                     taken: dict[Path, str], summary: ApplySummary, sources_real: set[str],
                     counts: dict[str, int]) -> Iterator[tuple[dict, _Outcome | None]]:
    """``(source, outcome)`` in file order, as the local loop makes them, the files' work done
    by ``chosen.map`` over runs of about ``ENGINE_TASK_BYTES`` of sources.

    The driver claims every output first (file order decides collisions); each task writes
    the store entries and temp outputs of its files and makes them durable on its node
    (``syncfs``) before it returns; the caller commits them. The tasks' store counts are added
    to ``counts``. A killed task is run again by the engine: its store writes are found
    identical, and the temp outputs it left behind are removed here."""
    claimed = [(source, _claim_output(source, by_source.get(source["source_id"], []),
                                      target_root, taken, summary, sources_real))
               for source in files]
    work = [(source, outcome) for source, outcome in claimed if outcome is not None]
    runs = contiguous_runs(work, lambda item: item[0]["size_bytes"] or 0, ENGINE_TASK_BYTES)
    jobs = [[(source, by_source.get(source["source_id"], []), outcome.path, outcome.output,
              outcome.sessions) for source, outcome in run] for run in runs]
    parts = chosen.map(_engine_files, jobs, shared=(str(lake_root), str(target_root)))

    def done() -> Iterator[_Outcome | None]:
        for job, (outcomes, task) in zip(jobs, parts):
            summary.problems.extend(task.problems)
            summary.bytes_before += task.bytes_before
            for name in counts:
                counts[name] += task.store[name]
            _remove_stray_temps([entry[3] for entry in job],
                                {o.tmp for o in outcomes if o is not None and o.tmp is not None})
            for outcome in outcomes:
                if outcome is not None:
                    outcome.summary = summary
                yield outcome

    results = done()
    for source, outcome in claimed:
        yield source, (None if outcome is None else next(results))


@dataclasses.dataclass
class _TaskReport:
    problems: list[ApplyProblem]
    bytes_before: int
    store: dict[str, int]


def _engine_files(shared: tuple[str, str], job: list[tuple]) -> tuple[list, _TaskReport]:
    """Body of an engine task: :func:`_write_one` for each claimed file of ``job``, with a
    store of its own; the outcomes (temp outputs to commit) and what the task counted."""
    from pipeline.core.crash import crash_point as named_crash_point

    lake_root, target_root = shared
    local = ApplySummary(policy="", out=target_root)
    with PayloadStore.for_lake(lake_root, fsync_each=False) as store:
        outcomes = [_write_one(source, evictions, store, _Outcome(path, output, sessions, local))
                    for source, evictions, path, output, sessions in job]
        sync_files(store.take_unsynced() + [str(o.tmp) for o in outcomes
                                            if o is not None and o.tmp is not None],
                   [store.root, Path(target_root)])
        report = _TaskReport(local.problems, local.bytes_before,
                             {"stored": store.stored, "reused": store.reused,
                              "bytes_added": store.bytes_added})
    named_crash_point("engine:apply_files")   # files written, not reported yet (kill tests)
    for outcome in outcomes:
        if outcome is not None:
            outcome.summary = None     # the driver's summary is put back on arrival
    return outcomes, report


def _remove_stray_temps(outputs: list[Path], keep: set[Path]) -> None:
    """Temp outputs of ``outputs`` other than ``keep``: left by a killed attempt of the task
    (the lake lock is held, and each output belongs to one file, hence to one task)."""
    names: dict[Path, set[str]] = {}
    for output in outputs:
        names.setdefault(output.parent, set()).add(output.name)
    for folder, wanted in names.items():
        try:
            entries = os.listdir(folder)
        except FileNotFoundError:
            continue
        for name in entries:
            match = _TEMP_OF.match(name)
            if match and match.group(1) in wanted and folder / name not in keep:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(folder / name)
