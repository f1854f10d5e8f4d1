"""Type fuzz of the real samples: every field swapped, one at a time, to each JSON type and to
extreme numbers. No run aborts, and every line is a record or a quarantined line with a reason.

Which swaps (deterministic, so the test runs in seconds):
- JSONL samples: every field (every member and array item, at every depth, of every line) is
  swapped to each of the values below; each swap is one line of a fuzz file. The fields of
  the first line are also swapped (three values each, rotating) at the head of a small file
  (that line and the next two), which is what format detection reads.
- Whole-JSON samples (one object per file): the document is first reduced to the items of
  its arrays that bring a field path not seen before (array indices read as ``*``), so each
  field path is kept at least once; every field of that reduced document is then swapped to
  three of the values in turn (rotating, so every path meets several types and every value
  many paths); each swap is one fuzz file.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import orjson
import pytest

from pipeline.stages.ingest import ingest
from pipeline.core import sqlfiles
from pipeline.core.lake import Lake
from pipeline.stages.nightly import run_nightly
from pipeline.stages.replay import replay
from pipeline.stages.usage import usage_report

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
SENTINEL = "\x00fuzz\x00"
# the JSON types and the extreme numbers (raw JSON text: 2^70 does not fit any integer type)
SWAPS = ["null", "true", "false", "0", "-1", "1.5", '""', '"fuzz"', "[]", "{}", '[1,"x",null]',
         '{"a":{}}', "9223372036854775807", "9223372036854775808", "-9223372036854775809",
         "1180591620717411303424", "1e308", "-0.0"]
DOCUMENT_SWAPS_PER_FIELD = 3


def field_paths(value, prefix=()):
    """Every member/item path of a parsed value (the value itself excluded), depth first."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, item in items:
        path = (*prefix, key)
        yield path
        yield from field_paths(item, path)


def generalised(path) -> tuple:
    return tuple("*" if isinstance(step, int) else step for step in path)


def swapped(obj, path, raw: str) -> bytes:
    """``obj`` as JSON with the value at ``path`` replaced by the raw JSON text ``raw``."""
    copy = orjson.loads(orjson.dumps(obj))
    node = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = SENTINEL
    text = orjson.dumps(copy)
    marker = orjson.dumps(SENTINEL)
    assert text.count(marker) == 1
    return text.replace(marker, raw.encode())


def reduced(value, seen: set, prefix=()):
    """``value`` keeping, in each array, the items that bring a generalised path not in
    ``seen`` (the first item always)."""
    if isinstance(value, dict):
        return {k: reduced(v, seen, (*prefix, k)) for k, v in value.items()}
    if isinstance(value, list):
        kept = []
        for index, item in enumerate(value):
            paths = {generalised((*prefix, "*", *p)) for p in field_paths(item)}
            paths.add(generalised((*prefix, "*")))
            if index == 0 or not paths <= seen:
                item = reduced(item, seen, (*prefix, "*"))
                seen |= {generalised((*prefix, "*", *p)) for p in field_paths(item)}
                seen.add(generalised((*prefix, "*")))
                kept.append(item)
        return kept
    return value


def build_fuzz_archive(root: Path) -> dict:
    """Write the fuzz archive under ``root``; returns counts (lines written per file kind,
    fields covered per sample)."""
    lines_total = 0
    files = 0
    covered: dict[str, int] = {}
    heads: dict[str, int] = {}   # head fuzz files -> lines (detection may not know them)
    for sample in sorted(p for p in REAL.rglob("*") if p.is_file() and p.suffix != ".md"):
        rel = sample.relative_to(REAL)
        data = sample.read_bytes()
        if sample.suffix == ".jsonl":
            objs = [orjson.loads(line) for line in data.splitlines() if line.strip()]
            out = []
            fields = 0
            for obj in objs:
                for path in field_paths(obj):
                    fields += 1
                    out.extend(swapped(obj, path, raw) for raw in SWAPS)
            target = root / rel.parent / f"fuzz-{rel.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            # the sample first, so that sessions exist; then one swap per line
            target.write_bytes(data + b"\n".join(out) + b"\n")
            lines_total += len(objs) + len(out)
            files += 1
            covered[str(rel)] = fields
            rotation = itertools.cycle(SWAPS)
            rest = b"".join(orjson.dumps(obj) + b"\n" for obj in objs[1:3])
            for n, path in enumerate(field_paths(objs[0])):
                for k in range(DOCUMENT_SWAPS_PER_FIELD):
                    head = root / rel.parent / f"head-{n:04d}-{k}-{rel.name}"
                    head.write_bytes(swapped(objs[0], path, next(rotation)) + b"\n" + rest)
                    heads[str(head)] = 1 + len(objs[1:3])
        else:
            doc = orjson.loads(data)
            small = reduced(doc, set())
            rotation = itertools.cycle(SWAPS)
            paths = list(field_paths(small))
            for n, path in enumerate(paths):
                for k in range(DOCUMENT_SWAPS_PER_FIELD):
                    target = root / rel.parent / f"fuzz-{n:04d}-{k}-{rel.name}"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(swapped(small, path, next(rotation)))
                    lines_total += 1
                    files += 1
            assert {generalised(p) for p in paths} == {generalised(p) for p in field_paths(doc)}
            covered[str(rel)] = len(paths)
    return {"lines": lines_total, "files": files, "covered": covered, "heads": heads}


def test_every_field_of_every_real_sample_swapped_to_each_type_aborts_no_run(tmp_path):
    archive = tmp_path / "fuzz"
    built = build_fuzz_archive(archive)
    assert set(built["covered"]) == {str(p.relative_to(REAL)) for p in REAL.rglob("*")
                                     if p.is_file() and p.suffix != ".md"}
    lake = Lake(tmp_path / "lake")

    summary = ingest([archive], lake=lake, workers=1)

    # a head fuzz file whose first line no longer looks like its format is reported as not
    # recognised; every other one is read, line by line
    heads = built["heads"]
    assert set(summary.unrecognized) <= set(heads)
    read_heads = set(heads) - set(summary.unrecognized)
    assert summary.files == built["files"] + len(read_heads)
    assert summary.lines == built["lines"] + sum(heads[h] for h in read_heads)
    assert summary.records + summary.quarantined == summary.lines
    assert summary.held_back == 0
    con = lake.connect()
    try:
        reasons = [r for (r,) in con.execute(
            "SELECT DISTINCT reason FROM quarantine ORDER BY 1").fetchall()]
        # each file's lines are its records and its quarantined lines; its count of quarantined
        # rows also holds the elements of a document quarantined on their own (line 0)
        mismatches = con.execute(sqlfiles.load("checks/select_source_accounting_mismatches")).fetchall()
    finally:
        con.close()
    assert mismatches == []
    # every reason is a sentence about the data, never an unexpected error of a reader
    assert [r for r in reasons if r.startswith("reader failed")] == []
    assert all(r for r in reasons)

    # the later stages and reports run over every surviving record of the fuzz
    result = run_nightly([archive], lake=lake, workers=1, tz="UTC")
    assert result.ingest.files_unchanged == built["files"] + len(read_heads)
    assert result.ingest.lines == 0
    for period in ("day", "session"):
        assert usage_report(lake, period=period, tz="UTC").rows
    assert replay(lake, policies=["microcompact"]).sessions > 0


# ---------------------------------------------------------------------------------------
# The variants the samples do not have (built by the format tests): Codex tool search and
# replacement_history lines and the TypeScript CLI's JSON rollout, Claude Code server/MCP tool
# blocks and a first line past the sniffed head, the Anthropic Messages server tools, a
# SWE-agent RetryAgent file and its attempt copy, a mini-SWE-agent Responses-API trajectory.
# JSONL: every field of the variant's lines swapped to each value (one line each) after the
# file's own lines; documents (reduced as above) and the long first line: every field swapped
# to one value, rotating, one file each.
# ---------------------------------------------------------------------------------------
def _variant_files() -> tuple[dict, dict]:
    """({relative path: (lines, indices of the lines to fuzz)}, {relative path: document})."""
    from tests import (test_format_claude_code as claude, test_format_codex as codex,
                       test_format_mini_swe_agent as mini, test_format_openai_anthropic as anthropic,
                       test_format_swe_agent as swe)

    big = "".join(f"line {i}: a tool output over payload_prune's limit\n" for i in range(400))
    history = [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n</environment_context>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "ghost_snapshot", "ghost_commit": {"id": "abc", "parent": None}},
        {"type": "compaction", "encrypted_content": "gAAAAABpZ"}]
    rollout = [orjson.loads(line) for line in codex._tool_search_lines()]
    rollout += [orjson.loads(line) for line in codex._compacting_rollout(
        {"message": codex.SUMMARY, "replacement_history": history})[2:]]
    blocks = [
        claude._server_call("srvtoolu_01", "web_search", {"query": "q"}),
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
            {"type": "web_search_result", "url": "https://e.com/", "title": "t",
             "encrypted_content": "Eq", "page_age": None}]},
        claude._server_call("srvtoolu_02", "web_fetch", {"url": "https://e.com/"}),
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_02",
         "content": {"type": "web_fetch_tool_result_error", "error_code": "url_not_accessible"}},
        claude._server_call("mcptoolu_03", "echo", {"text": "hi"}, kind="mcp_tool_use"),
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_03", "is_error": False,
         "content": [{"type": "text", "text": big}]}]
    server = claude._response_lines(blocks)
    for line in server:     # the content blocks only: the rest of the line is a real sample's
        line["message"] = {"id": line["message"]["id"], "content": line["message"]["content"]}
    head = claude._lines("claude_session.jsonl")[:2]
    with tempfile.TemporaryDirectory() as tmp:
        _, log = anthropic._server_tool_log(Path(tmp))
    jsonl = {
        f"codex/{codex.ROLLOUT}": (rollout, [i for i, o in enumerate(rollout)
                                             if o["type"] == "compacted" or o["type"] == "response_item"
                                             and o["payload"]["type"].startswith("tool_search")]),
        "claude_code/server-tools.jsonl": (head + server, list(range(2, 2 + len(server)))),
        "anthropic/anthropic-log.jsonl": (log, [3]),
    }
    retry = swe._retry_doc()
    mini_doc = mini._as_responses(mini._raw(mini.V2))
    documents = {
        f"codex/{codex.TS_NAME}": codex.TS_DOC,
        "swe_agent/run/inst/inst.traj": reduced(retry, set()),
        "swe_agent/run/inst/attempt_0/inst.traj": reduced(retry["attempts"][0], set()),
        "mini_swe_agent/r.traj.json": reduced(mini_doc, set()),
    }
    return jsonl, documents


def test_every_field_of_the_variants_the_samples_lack_swapped_to_each_type_aborts_no_run(tmp_path):
    archive = tmp_path / "fuzz"
    jsonl, documents = _variant_files()
    rotation = itertools.cycle(SWAPS)
    files = lines_total = 0
    heads: dict[str, int] = {}   # files whose format detection may not know them -> lines
    for rel, (objs, fuzzed) in jsonl.items():
        out = [orjson.dumps(obj) for obj in objs]
        out += [swapped(objs[i], path, raw) for i in fuzzed for path in field_paths(objs[i])
                for raw in SWAPS]
        target = archive / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"\n".join(out) + b"\n")
        files, lines_total = files + 1, lines_total + len(out)
    for rel, doc in documents.items():
        for n, path in enumerate(field_paths(doc)):
            target = archive / f"{rel.rsplit('/', 1)[0]}/f{n:04d}" / rel.rsplit("/", 1)[1]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(swapped(doc, path, next(rotation)))
            if path == ("session",):    # what tells a Codex JSON rollout: may be unrecognised
                heads[str(target)] = 1
            else:
                files, lines_total = files + 1, lines_total + 1
    # a Claude Code first line past the sniffed head: its members swapped (one file each)
    first = next(o for o in map(orjson.loads, (REAL / "claude_code" / "claude_session.jsonl")
                                .read_bytes().splitlines()) if o.get("type") == "user")
    first["message"]["content"] = "p" * 70_000
    for n, path in enumerate(field_paths(first)):
        if path[:2] == ("message", "content"):
            continue
        head = archive / "claude_long" / f"head-{n:04d}.jsonl"
        head.parent.mkdir(parents=True, exist_ok=True)
        head.write_bytes(swapped(first, path, next(rotation)) + b"\n")
        heads[str(head)] = 1
    lake = Lake(tmp_path / "lake")

    summary = ingest([archive], lake=lake, workers=1)

    assert set(summary.unrecognized) <= set(heads)
    read_heads = set(heads) - set(summary.unrecognized)
    assert read_heads
    assert summary.files == files + len(read_heads)
    assert summary.lines == lines_total + sum(heads[h] for h in read_heads)
    assert summary.records + summary.quarantined == summary.lines
    reasons = [p.reason for p in summary.problems]
    assert [r for r in reasons if r.startswith("reader failed")] == []
    assert all(reasons)
    result = run_nightly([archive], lake=lake, workers=1, tz="UTC")
    assert [(s.stage, s.status) for s in result.stages if s.status != "ok"] == []
    assert [p for a in result.applied.values() for p in a.problems] == []
    assert result.status == "ok" and result.ingest.lines == 0
