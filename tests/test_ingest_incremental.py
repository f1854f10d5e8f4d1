"""Incremental ingest: unchanged files are skipped, appends read only new lines, rewrites replace."""

from __future__ import annotations

import fcntl
import os
import shutil

import pytest

from pipeline.core.errors import LakeLockedError
from pipeline.stages.ingest import ingest
from pipeline.core.lake import Lake
from tests.helpers.lake import REAL, rows, scalar
from tests.test_ingest_bad_input import SESSION, claude_line, write


def run(lake: Lake, *paths):
    return ingest(list(paths), lake=lake, workers=1)


def test_rerunning_on_an_unchanged_archive_adds_nothing(tmp_path):
    archive = tmp_path / "archive"
    shutil.copytree(REAL / "claude_code", archive)
    lake = Lake(tmp_path / "lake")
    first = run(lake, archive)
    before = scalar(lake, "SELECT count(*) FROM records")
    second = run(lake, archive)
    assert (second.files_unchanged, second.lines, second.records, second.bytes_read) == (4, 0, 0, 0)
    assert scalar(lake, "SELECT count(*) FROM records") == before == first.records


def test_appending_lines_ingests_exactly_those_lines(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + claude_line(2))
    lake = Lake(tmp_path / "lake")
    run(lake, path)
    with open(path, "ab") as handle:
        handle.write(claude_line(3, "third") + claude_line(4, "fourth"))
    summary = run(lake, path)
    assert (summary.files_appended, summary.lines, summary.records) == (1, 2, 2)
    assert rows(lake, "SELECT line_no, text FROM messages ORDER BY seq") == [
        (1, "hello"), (2, "hello"), (3, "third"), (4, "fourth")]
    assert rows(lake, "SELECT lines, records, generation FROM sources") == [(4, 4, 1)]


def test_an_unterminated_last_line_is_held_back_until_it_is_complete(tmp_path):
    full = claude_line(2, "second")
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + full[:20])
    lake = Lake(tmp_path / "lake")
    first = run(lake, path)
    assert (first.lines, first.records, first.quarantined, first.held_back) == (2, 1, 0, 1)
    with open(path, "ab") as handle:
        handle.write(full[20:])
    second = run(lake, path)
    assert (second.lines, second.records, second.held_back) == (1, 1, 0)
    assert rows(lake, "SELECT line_no, text FROM messages ORDER BY seq") == [(1, "hello"), (2, "second")]


def test_a_rewritten_file_is_read_again_under_a_new_generation(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1, "old") + claude_line(2, "old"))
    lake = Lake(tmp_path / "lake")
    run(lake, path)
    write(path, claude_line(1, "new text that is longer"))
    summary = run(lake, path)
    assert summary.files_reingested == 1
    assert rows(lake, "SELECT text FROM messages") == [("new text that is longer",)]
    assert rows(lake, "SELECT generation, lines FROM sources") == [(2, 1)]


def test_a_second_run_on_a_locked_lake_gets_a_clear_error(tmp_path):
    (tmp_path / "lake").mkdir()
    with open(tmp_path / "lake" / ".lock", "a+") as other_process:  # as another process would
        fcntl.flock(other_process, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(LakeLockedError) as info:
            run(Lake(tmp_path / "lake"), write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1)))
    assert "another ctxlake run is using this lake" in str(info.value)


def test_parts_of_a_run_that_never_committed_are_removed_by_the_next_run(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1))
    lake = Lake(tmp_path / "lake")
    run(lake, path)
    orphan = lake.table_dir("messages") / "29990101T000000000000-00000-000.parquet"
    shutil.copy(next(p for p in lake.table_dir("messages").glob("2*.parquet")), orphan)
    # a part of a run that never committed is invisible at once, and removed by the next run
    assert scalar(lake, "SELECT count(*) FROM messages") == 1
    run(lake, path)
    assert not orphan.exists()
    assert scalar(lake, "SELECT count(*) FROM messages") == 1


def test_rows_appended_by_a_run_killed_before_its_commit_stay_invisible(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1))
    lake = Lake(tmp_path / "lake")
    run(lake, path)
    committed = Lake(tmp_path / "copy")
    # the appended line is read by a run whose parts are written but whose commit never happens
    with open(path, "ab") as handle:
        handle.write(claude_line(2))
    shutil.copytree(lake.root, committed.root)
    run(lake, path)
    new_parts = set(p.name for p in lake.table_dir("messages").glob("2*.parquet")) - \
        set(p.name for p in committed.table_dir("messages").glob("2*.parquet"))
    assert len(new_parts) == 1
    for part in new_parts:   # same generation as the committed rows: only the run id tells
        shutil.copy(lake.table_dir("messages") / part, committed.table_dir("messages") / part)
    assert scalar(lake, "SELECT count(*) FROM messages") == 2
    assert scalar(committed, "SELECT count(*) FROM messages") == 1


def test_parallel_workers_give_the_same_tables_as_one_worker(tmp_path):
    one, two = Lake(tmp_path / "one"), Lake(tmp_path / "two")
    ingest([REAL / "claude_code"], lake=one, workers=1)
    ingest([REAL / "claude_code"], lake=two, workers=2, chunk_bytes=1)
    query = "SELECT session_id, seq, role, kind, est_tokens, input_tokens FROM messages ORDER BY ALL"
    assert rows(one, query) == rows(two, query)
    assert len(rows(one, query)) > 50


def test_touching_a_file_without_changing_it_reads_nothing(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1))
    lake = Lake(tmp_path / "lake")
    run(lake, path)
    os.utime(path, ns=(1, 10**18))
    summary = run(lake, path)
    assert (summary.records, summary.files_unchanged) == (0, 1)
    assert scalar(lake, "SELECT count(*) FROM messages") == 1


def test_the_lake_lock_is_reentrant_within_one_process(tmp_path):
    lake = Lake(tmp_path / "lake")
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1))
    with lake.lock():
        summary = run(Lake(tmp_path / "lake"), path)
    assert summary.records == 1


def test_a_run_killed_after_its_commit_point_but_before_its_log_keeps_its_rows_once(tmp_path):
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipeline.core.lake import write_parquet_atomic

    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1))
    lake = Lake(tmp_path / "lake")
    run(lake, path)
    with open(path, "ab") as handle:
        handle.write(claude_line(2, "second"))
    second = run(lake, path)
    # as if the process died after writing sources.parquet but before runs.parquet
    runs = pq.read_table(lake.runs_path)
    keep = pc.not_equal(runs.column("run_id"), second.run_id)
    write_parquet_atomic(runs.filter(keep), lake.runs_path)
    third = run(lake, path)
    assert (third.files_unchanged, third.records) == (1, 0)
    assert rows(lake, "SELECT line_no, text FROM messages ORDER BY seq") == [(1, "hello"), (2, "second")]
    assert rows(lake, "SELECT started_at < finished_at FROM runs") == [(True,), (True,)]


def test_lines_crossing_read_blocks_keep_their_bytes_offsets_and_hashes(tmp_path, monkeypatch):
    import hashlib

    import pipeline.stages.ingest as engine

    monkeypatch.setattr(engine, "READ_BLOCK", 64)  # every line spans several blocks
    texts = ["a" * 10, "b" * 150, "c", "d" * 300]
    body = b"".join(claude_line(i + 1, text) for i, text in enumerate(texts))
    tail = claude_line(5, "still being written")[:40]
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", body + tail)
    lake = Lake(tmp_path / "lake")
    summary = run(lake, path)
    assert (summary.lines, summary.records, summary.held_back) == (5, 4, 1)
    assert rows(lake, "SELECT line_no, text FROM messages ORDER BY seq") == [
        (i + 1, text) for i, text in enumerate(texts)]
    offsets, start = [], 0
    for line in body.splitlines(keepends=True):
        offsets.append((start, len(line), line.rstrip(b"\n").decode()))
        start += len(line)
    assert rows(lake, "SELECT byte_offset, byte_len, raw FROM records ORDER BY line_no") == offsets
    assert rows(lake, "SELECT watermark, watermark_sha256, sha256 FROM sources") == [
        (len(body), hashlib.sha256(body).hexdigest(), hashlib.sha256(body + tail).hexdigest())]


def _age(path, minutes: float) -> None:
    import time
    when = time.time() - minutes * 60
    os.utime(path, (when, when))


def test_a_settled_files_complete_last_line_without_a_newline_is_read(tmp_path):
    import hashlib

    body = claude_line(1) + claude_line(2, "last words").rstrip(b"\n")
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", body)
    _age(path, 3 * 24 * 60)                                  # untouched for three days
    lake = Lake(tmp_path / "lake")
    summary = run(lake, path)
    assert (summary.lines, summary.records, summary.quarantined, summary.held_back) == (2, 2, 0, 0)
    assert rows(lake, "SELECT line_no, text FROM messages ORDER BY seq") == [
        (1, "hello"), (2, "last words")]
    digest = hashlib.sha256(body).hexdigest()
    assert rows(lake, "SELECT lines, held_back, watermark, watermark_sha256, sha256 FROM sources") \
        == [(2, 0, len(body), digest, digest)]
    again = run(lake, path)
    assert (again.files_unchanged, again.lines) == (1, 0)


def test_a_fresh_file_or_an_incomplete_last_line_is_still_held_back(tmp_path):
    fresh = write(tmp_path / "a" / f"{SESSION}.jsonl",
                  claude_line(1) + claude_line(2, "x").rstrip(b"\n"))
    _age(fresh, 59)                                          # inside the quiet period
    lake = Lake(tmp_path / "lake")
    assert run(lake, fresh).held_back == 1
    broken = write(tmp_path / "b" / "other.jsonl", claude_line(1) + claude_line(2, "x")[:30])
    _age(broken, 3 * 24 * 60)                                # settled, but not complete JSON
    summary = run(lake, broken)
    assert (summary.lines, summary.records, summary.quarantined, summary.held_back) == (2, 1, 0, 1)
    # the quiet period is configurable (a negative one always holds the line back)
    other = Lake(tmp_path / "lake2")
    assert ingest([fresh], lake=other, workers=1, quiet_minutes=30).held_back == 0
    third = Lake(tmp_path / "lake3")
    _age(fresh, 3 * 24 * 60)
    assert ingest([fresh], lake=third, workers=1, quiet_minutes=-1).held_back == 1


def test_a_settled_files_incomplete_last_line_is_not_read_again_every_night(tmp_path):
    broken = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + claude_line(2, "x")[:30])
    _age(broken, 3 * 24 * 60)                                # settled, but not complete JSON
    lake = Lake(tmp_path / "lake")
    assert run(lake, broken).held_back == 1
    sources = (tmp_path / "lake" / "sources.parquet").read_bytes()
    again = run(lake, broken)
    # judged settled when it was read: the same file gives the same answer, nothing is read
    # and the commit point is not rewritten
    assert (again.files_unchanged, again.files_appended, again.lines) == (1, 0, 0)
    assert (tmp_path / "lake" / "sources.parquet").read_bytes() == sources
    with open(broken, "ab") as handle:                       # the writer comes back
        handle.write(claude_line(2, "x")[30:])
    grown = run(lake, broken)
    assert (grown.files_appended, grown.records, grown.held_back) == (1, 1, 0)


def test_a_line_held_back_earlier_is_read_once_the_file_has_settled(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl",
                 claude_line(1) + claude_line(2, "big payload").rstrip(b"\n"))
    lake = Lake(tmp_path / "lake")
    first = run(lake, path)                                  # just written: held back
    assert (first.records, first.held_back) == (1, 1)
    _age(path, 2 * 60)                                       # two quiet hours later
    second = run(lake, path)
    assert (second.files_appended, second.lines, second.records, second.held_back) == (1, 1, 1, 0)
    assert rows(lake, "SELECT line_no, text FROM messages ORDER BY seq") == [
        (1, "hello"), (2, "big payload")]
    assert rows(lake, "SELECT lines, records, held_back FROM sources") == [(2, 2, 0)]


def test_the_nightly_run_reads_the_quiet_period_from_the_config(tmp_path):
    from pipeline.core.config import config_from_dict
    from pipeline.stages.nightly import run_nightly

    path = write(tmp_path / "a" / f"{SESSION}.jsonl",
                 claude_line(1) + claude_line(2, "x").rstrip(b"\n"))
    _age(path, 20)
    config = tmp_path / "ctxlake.toml"
    config.write_text("quiet_minutes = 10\n", encoding="utf-8")
    summary = run_nightly([tmp_path / "a"], lake=Lake(tmp_path / "lake"), config_path=config,
                          tz="UTC", workers=1)
    assert (summary.ingest.records, summary.ingest.held_back) == (2, 0)
    assert config_from_dict({}).quiet_minutes == 60.0


def test_a_settled_files_oversized_last_payload_is_pruned_and_restored_byte_exact(tmp_path):
    import json as _json

    from pipeline.stages.nightly import run_nightly
    from pipeline.stages.restore import restore

    use = {"type": "assistant", "sessionId": SESSION, "uuid": "a1", "parentUuid": "u1",
           "timestamp": "2026-11-01T10:01:00.000Z", "cwd": "/work/p", "requestId": "r1",
           "message": {"id": "m1", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
                       "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                    "input": {"command": "cat big.log"}}]}}
    result = {"type": "user", "sessionId": SESSION, "uuid": "u2", "parentUuid": "a1",
              "timestamp": "2026-11-01T10:02:00.000Z", "cwd": "/work/p",
              "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                       "content": "log line\n" * 3000}]}}
    body = claude_line(1, "show me the log") + _json.dumps(use).encode() + b"\n" \
        + _json.dumps(result).encode()                       # no final newline
    path = write(tmp_path / "archive" / f"{SESSION}.jsonl", body)
    _age(path, 3 * 24 * 60)
    lake = Lake(tmp_path / "lake")
    summary = run_nightly([tmp_path / "archive"], lake=lake, tz="UTC", workers=1,
                          policies=("payload_prune",), out=tmp_path / "out")
    assert summary.ingest.held_back == 0
    [pruned] = list((tmp_path / "out").rglob("*.jsonl"))
    data = pruned.read_bytes()
    assert b"[ctxlake compaction]" in data and not data.endswith(b"\n")
    assert len(data) < len(body)
    restored = tmp_path / "restored.jsonl"
    restore(pruned, store=lake.store_dir, out=restored)
    assert restored.read_bytes() == body


def test_a_lake_path_that_looks_like_a_hive_partition_adds_no_column(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1))
    plain, hive = Lake(tmp_path / "plain"), Lake(tmp_path / "window=10" / "lake")
    run(plain, path)
    run(hive, path)
    columns = lambda lake: [r[0] for r in rows(lake, "DESCRIBE messages")]
    assert columns(hive) == columns(plain) and "window" not in columns(hive)
