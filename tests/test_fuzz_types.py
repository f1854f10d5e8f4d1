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
from pathlib import Path

import orjson
import pytest

from pipeline.stages.ingest import ingest
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
        per_source = con.execute(
            "SELECT count(*) FROM sources WHERE lines <> records + quarantined").fetchone()[0]
    finally:
        con.close()
    assert per_source == 0
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
