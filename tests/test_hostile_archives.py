"""Hostile archives (issue 13): one bad input never stops the night, and nothing outside the
lake changes. Each test builds its archive in ``tmp_path`` next to a real sample, runs the
nightly job (or the stage the case is about), and checks that the run completes, the real
sample is ingested exactly, the bad input is accounted for with a reason, and every file
outside the lake is as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.config import policy_key
from pipeline.demo.archive import MARKER, write_demo_archive
from pipeline.core.errors import LakeLockedError, UnsafePathError, UsageError
from pipeline.stages.apply import apply_policy
from pipeline.stages.ingest import ingest
from pipeline.core.lake import Lake, new_connection
from pipeline.stages.nightly import run_nightly
from pipeline.reports.query import run_query
from pipeline.stages.recover import recover
from pipeline.stages.replay import replay
from pipeline.core.store import PayloadStore
from pipeline.stages.summarize import summarize
from pipeline.stages.usage import usage_report
from tests.helpers.lake import REAL, rows, scalar

GOOD = REAL / "claude_code" / "claude_session.jsonl"       # 26 lines, one session
GOOD_SESSION = "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9"
GOOD_LINES, GOOD_MESSAGES = 26, 22


def claude(**fields) -> str:
    obj = {"type": "user", "sessionId": "s-bad", "uuid": "u1", "parentUuid": None,
           "timestamp": "2025-12-09T19:47:42.987Z", "message": {"role": "user", "content": "hello"}}
    obj.update(fields)
    return json.dumps(obj)


def assistant(usage: dict, uuid: str, session: str = "s-usage") -> str:
    """An assistant line with raw usage numbers (written as text: 2^70 is no JSON int64)."""
    line = json.dumps({"type": "assistant", "sessionId": session, "uuid": uuid, "parentUuid": None,
                       "timestamp": "2025-12-09T19:48:00.000Z", "requestId": f"r-{uuid}",
                       "message": {"id": f"m-{uuid}", "role": "assistant",
                                   "model": "claude-sonnet-4-20250514",
                                   "content": [{"type": "text", "text": "hi"}], "usage": "USAGE"}})
    return line.replace('"USAGE"', "{" + ",".join(f'"{k}":{v}' for k, v in usage.items()) + "}")


def archive_with(tmp_path: Path, files: dict[str, bytes | str] | None = None) -> Path:
    """``tmp_path/arch``: the real sample as ``claude/ok.jsonl`` plus ``files``."""
    root = tmp_path / "arch"
    (root / "claude").mkdir(parents=True)
    shutil.copy(GOOD, root / "claude" / "ok.jsonl")
    for rel, data in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def snapshot(root: Path, skip: Path) -> dict[str, tuple]:
    """Every entry under ``root`` except ``skip``: (kind, mode, sha256 or link target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path == skip:
                continue
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[str(path)] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                out[str(path)] = ("file", stat.S_IMODE(st.st_mode),
                                  hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                out[str(path)] = ("other", stat.S_IFMT(st.st_mode))
    return out


def good_is_intact(lake: Lake) -> None:
    """The real sample went in exactly: all its lines are records, its session has all its
    messages."""
    assert rows(lake, "SELECT lines, records, quarantined FROM sources WHERE path LIKE '%/ok.jsonl'") == \
        [(GOOD_LINES, GOOD_LINES, 0)]
    assert scalar(lake, "SELECT n_messages FROM sessions WHERE session_id = ?", [GOOD_SESSION]) == GOOD_MESSAGES


def reasons(lake: Lake) -> list[tuple]:
    return rows(lake, "SELECT regexp_replace(path, '.*/', ''), line_no, reason FROM quarantine "
                      "ORDER BY path, line_no")


def night(tmp_path: Path, archive: Path, **options):
    lake = Lake(tmp_path / "lake")
    before = snapshot(tmp_path, lake.root)
    summary = run_nightly([archive], lake=lake, tz="UTC", workers=1, **options)
    assert snapshot(tmp_path, lake.root) == before     # nothing outside the lake changed
    return lake, summary


# ---------------------------------------------------------------------------------------
# Must keep working
# ---------------------------------------------------------------------------------------
def test_lines_with_fields_of_the_wrong_json_type_cost_one_line_each(tmp_path):
    bad = "\n".join([
        '{"type":[]}',
        claude(timestamp=12345, uuid="u2"),
        claude(parentUuid=7, uuid="u3"),
        json.dumps({"type": "assistant", "sessionId": "s-bad", "uuid": "u4",
                    "timestamp": "2025-12-09T19:47:43Z",
                    "message": {"role": "assistant", "content": [{"type": "thinking", "thinking": 5}]}}),
        assistant({"input_tokens": 2**63, "output_tokens": 1}, "u5"),
        claude(uuid="u6"),
    ]) + "\n"
    archive = archive_with(tmp_path, {"claude/bad.jsonl": bad})
    lake, summary = night(tmp_path, archive)
    assert (summary.ingest.lines, summary.ingest.records, summary.ingest.quarantined) == \
        (GOOD_LINES + 6, GOOD_LINES + 2, 4)
    good_is_intact(lake)
    prefix = "a value of the wrong type or range: "
    assert reasons(lake) == [
        ("bad.jsonl", 2, prefix + "timestamp_raw is a number (12345), expected a string"),
        ("bad.jsonl", 3, prefix + "parent_uuid is a number (7), expected a string"),
        ("bad.jsonl", 4, prefix + "text is a number (5), expected a string"),
        ("bad.jsonl", 5, prefix + "usage input_tokens is 9223372036854775808, over the largest "
                              "count kept (9,007,199,254,740,991 = 2^53-1; a 64-bit count ends at "
                              "9,223,372,036,854,775,807): the line is quarantined so that it "
                              "stays out of the usage sums"),
    ]
    # {"type":[]} is kept as a record of an unknown type; the session the quarantined line 2
    # would have opened is opened by line 6
    assert rows(lake, "SELECT line_no, record_type FROM records r JOIN sources s USING (source_id) "
                      "WHERE s.path LIKE '%/bad.jsonl' ORDER BY line_no") == [(1, "unknown"), (6, "user")]
    assert rows(lake, "SELECT session_id, n_messages FROM sessions WHERE session_id = 's-bad'") == \
        [("s-bad", 1)]


# the last: a lone surrogate (read by the standard library's parser) nested past Python's
# recursion limit
BOMB = b'{"type":"user","t":"\\ud800","x":' + b"[" * 5000 + b"]" * 5000 + b"}"


@pytest.mark.parametrize("first", [b"\x00" * 64, b'{"type":"user","n":NaN}', b"\xff\xfe not json",
                                   BOMB])
def test_a_damaged_first_line_costs_that_line_and_the_file_is_still_read(tmp_path, first):
    archive = archive_with(tmp_path, {"claude/bad.jsonl": first + b"\n" + claude(uuid="u2").encode()
                                      + b"\n" + claude(uuid="u3").encode() + b"\n"})
    lake, summary = night(tmp_path, archive)
    assert (summary.ingest.lines, summary.ingest.records, summary.ingest.quarantined) == \
        (GOOD_LINES + 3, GOOD_LINES + 2, 1)
    good_is_intact(lake)
    assert [(name, line) for name, line, _ in reasons(lake)] == [("bad.jsonl", 1)]
    assert rows(lake, "SELECT session_id, n_messages FROM sessions WHERE session_id = 's-bad'") == \
        [("s-bad", 2)]


def test_a_file_name_that_is_not_utf8_is_reported_and_the_rest_is_read(tmp_path):
    archive = archive_with(tmp_path)
    folder = os.fsencode(archive) + b"/d\xff"
    os.mkdir(folder)
    shutil.copy(GOOD, folder + b"/x\xfe.jsonl")
    lake, summary = night(tmp_path, archive)
    good_is_intact(lake)
    assert (summary.ingest.files, summary.ingest.files_problem) == (2, 1)
    assert rows(lake, "SELECT path, line_no, reason FROM quarantine") == [
        (f"{archive}/d\\xff/x\\xfe.jsonl", 0,
         "file name is not valid UTF-8 (shown with \\x escapes): not read; rename it to read it")]
    again = run_nightly([archive], lake=lake, tz="UTC", workers=1)
    assert (again.ingest.files_unchanged, again.ingest.lines) == (2, 0)


ODD_TIMES = ["294247-01-10T04:00:54Z", "0044-03-15T12:00:00 BC", "infinity",
             "0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00"]


def test_timestamps_python_cannot_hold_are_reported_and_every_later_stage_copes(tmp_path):
    lines = [claude(sessionId="s-odd", uuid=f"t{i}", timestamp=t) for i, t in enumerate(ODD_TIMES)]
    lines.append(claude(sessionId="s-odd", uuid="t-ok", timestamp="2025-12-10T08:00:00Z"))
    archive = archive_with(tmp_path, {"claude/ts.jsonl": "\n".join(lines) + "\n"})
    lake, summary = night(tmp_path, archive)
    good_is_intact(lake)
    tail = ", the years every report and time zone can hold: the line is quarantined so that " \
           "no later stage meets it"
    prefix = "a value of the wrong type or range: timestamp "
    assert reasons(lake) == [
        ("ts.jsonl", 1, prefix + '"294247-01-10T04:00:54Z" has a year outside 0002-9998' + tail),
        ("ts.jsonl", 2, prefix + '"0044-03-15T12:00:00 BC" is a BC date' + tail),
        ("ts.jsonl", 3, prefix + '"infinity" is infinite' + tail),
        ("ts.jsonl", 4, prefix + '"0001-01-01T00:30:00+01:00" has a year outside 0002-9998' + tail),
        ("ts.jsonl", 5, prefix + '"9999-12-31T23:30:00-01:00" has a year outside 0002-9998' + tail),
    ]
    assert summary.summaries.days_written == 2
    for zone in ("UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago"):
        assert [r.period for r in usage_report(lake, period="day", tz=zone).rows]
        summarize(lake, tz=zone)
    assert recover(lake, "s-odd").session_id == "s-odd"
    assert replay(lake, policies=["microcompact"]).sessions == 2


def test_the_part_sql_never_stores_a_time_python_cannot_hold():
    con = new_connection()   # the macro is on every connection the lake opens
    got = [con.execute("SELECT safe_timestamp(?) IS NULL", [t]).fetchone()[0]
           for t in [*ODD_TIMES, "2025-12-10T08:00:00Z", "0002-01-01T00:00:00Z"]]
    assert got == [True, True, True, True, True, False, False]


def test_a_session_id_longer_than_a_file_name_still_gets_its_summaries(tmp_path):
    long_id = "x" * 400
    archive = archive_with(tmp_path, {"claude/long.jsonl": claude(sessionId=long_id) + "\n"})
    lake, summary = night(tmp_path, archive)
    good_is_intact(lake)
    names = sorted(p.name for p in (lake.summaries_dir / "recovery").iterdir())
    digest = hashlib.sha256(long_id.encode()).hexdigest()[:8]
    assert names == [f"{GOOD_SESSION}.md", f"{'x' * 200}-{digest}.md"]
    assert summary.summaries.recovery_written == 2


def test_a_huge_sparse_line_is_quarantined_with_memory_bounded_by_the_line_limit(tmp_path):
    archive = archive_with(tmp_path)
    big = archive / "claude" / "big.jsonl"
    with open(big, "wb") as handle:
        handle.write(claude(sessionId="s-big").encode() + b"\n")
        handle.truncate(256 * 1024 * 1024)           # a sparse run of NUL bytes, no newline
    with open(big, "ab") as handle:
        handle.write(b"\n" + claude(sessionId="s-big", uuid="after").encode() + b"\n")
    lake = Lake(tmp_path / "lake")
    tracemalloc.start()
    try:
        summary = ingest([archive], lake=lake, workers=1, max_line_bytes=4 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 48 * 1024 * 1024                    # the file is 256 MiB
    good_is_intact(lake)
    assert (summary.lines, summary.records, summary.quarantined) == (GOOD_LINES + 3, GOOD_LINES + 2, 1)
    size = big.stat().st_size
    first = len(claude(sessionId="s-big")) + 1
    last = len(claude(sessionId="s-big", uuid="after")) + 1
    assert rows(lake, "SELECT line_no, byte_offset, byte_len, reason FROM quarantine") == [
        (2, first, size - first - last,
         f"line is {size - first - last:,} bytes, over the 4,194,304-byte limit (--max-line-bytes)")]
    assert rows(lake, "SELECT uuid FROM messages WHERE session_id = 's-big' ORDER BY seq") == \
        [("u1",), ("after",)]


def test_a_fifo_named_jsonl_in_the_archive_is_skipped_without_hanging(tmp_path):
    archive = archive_with(tmp_path)
    os.mkfifo(archive / "claude" / "pipe.jsonl")
    lake, summary = night(tmp_path, archive)
    good_is_intact(lake)
    assert reasons(lake) == [
        ("pipe.jsonl", 0, "a FIFO (named pipe), not a regular file: skipped, never opened")]


def test_a_fifo_in_the_store_is_refused_without_hanging(tmp_path):
    store = PayloadStore.for_lake(tmp_path / "lake")
    with store:
        digest = store.put(b"payload")
    path = store.payload_path(digest)
    path.unlink()
    os.mkfifo(path)
    with PayloadStore.for_lake(tmp_path / "lake") as again:
        with pytest.raises(Exception) as info:
            again.get(digest)
    assert "not a regular file" in str(info.value)


def test_an_unreadable_sub_folder_is_reported(tmp_path, monkeypatch):
    archive = archive_with(tmp_path)
    locked = archive / "locked"
    locked.mkdir()
    shutil.copy(GOOD, locked / "x.jsonl")
    os.chmod(locked, 0)
    if os.geteuid() == 0:   # root reads any folder: make this one fail as it would for a user
        real_scandir = os.scandir

        def scandir(path="."):
            if os.fspath(path) == str(locked):
                raise PermissionError(13, "Permission denied", str(locked))
            return real_scandir(path)
        monkeypatch.setattr(os, "scandir", scandir)
    try:
        lake, summary = night(tmp_path, archive)
    finally:
        os.chmod(locked, 0o755)
    good_is_intact(lake)
    assert reasons(lake) == [("locked", 0, "cannot read folder: Permission denied: its files are not read")]


def test_usage_counts_beyond_int64_or_negative_are_reported_and_kept_out_of_sums(tmp_path):
    bad = "\n".join([assistant({"input_tokens": 2**70, "output_tokens": 3}, "a1"),
                     assistant({"input_tokens": -50, "output_tokens": 3}, "a2"),
                     assistant({"input_tokens": 2**63 - 1, "output_tokens": 3}, "a3"),
                     assistant({"input_tokens": 40, "output_tokens": 3}, "a4")]) + "\n"
    archive = archive_with(tmp_path, {"claude/usage.jsonl": bad})
    lake, summary = night(tmp_path, archive)
    good_is_intact(lake)
    over = (" over the largest count kept (9,007,199,254,740,991 = 2^53-1; a 64-bit count ends at "
            "9,223,372,036,854,775,807): the line is quarantined so that it stays out of the usage sums")
    prefix = "a value of the wrong type or range: usage input_tokens is "
    assert reasons(lake) == [
        ("usage.jsonl", 1, prefix + "1.181e+21," + over),
        ("usage.jsonl", 2, prefix + "-50: a token count cannot be negative (the line is "
                                    "quarantined so that it stays out of the usage sums)"),
        ("usage.jsonl", 3, prefix + "9223372036854775807," + over),
    ]
    assert scalar(lake, "SELECT sum(input_tokens) FROM messages WHERE session_id = 's-usage'") == 40
    report = usage_report(lake, period="day", tz="UTC")
    assert report.totals.input_tokens == 40 + scalar(
        lake, "SELECT sum(input_tokens) FROM usage_calls WHERE session_id = ?", [GOOD_SESSION])
    result = CliRunner().invoke(cli, ["--lake", str(lake.root), "report", "daily", "--tz", "UTC"],
                                catch_exceptions=False)
    assert result.exit_code == 0


def test_nesting_deeper_than_the_limit_says_so_and_the_limit_itself_is_read(tmp_path):
    def nested(depth: int) -> object:
        value: object = []
        for _ in range(depth - 1):
            value = [value]
        return value
    # the line object is level 1, toolUseResult level 2: 254 levels in all is the limit
    ok = claude(uuid="ok", toolUseResult=nested(253))
    deep = claude(uuid="deep", toolUseResult=nested(254))
    archive = archive_with(tmp_path, {"claude/deep.jsonl": ok + "\n" + deep + "\n"
                                      + BOMB.decode() + "\n"})
    lake, summary = night(tmp_path, archive)
    good_is_intact(lake)
    reason = "JSON nested too deeply (over 254 levels, the nesting limit): refused as a recursion bomb"
    assert reasons(lake) == [("deep.jsonl", 2, reason), ("deep.jsonl", 3, reason)]


# ---------------------------------------------------------------------------------------
# Must never touch what is not its own
# ---------------------------------------------------------------------------------------
def test_an_output_path_that_resolves_into_the_archive_is_refused(tmp_path):
    policy = "observation_masking(window=1)"
    root = tmp_path / "arch" / policy_key(policy)       # the archive root named like the output
    (root / "claude").mkdir(parents=True)
    shutil.copy(REAL / "claude_code" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
                root / "claude" / "s.jsonl")
    before = snapshot(tmp_path, tmp_path / "lake")
    lake = Lake(tmp_path / "lake")
    # refused before the night starts: before, the output marker was written into the
    # archive, and the next night skipped (then overwrote) the transcripts of that folder
    with pytest.raises(UsageError, match="the output folder overlaps the archive being read"):
        run_nightly([root], lake=lake, tz="UTC", workers=1, policies=(policy,), out=tmp_path / "arch")
    assert snapshot(tmp_path, tmp_path / "lake") == before
    # apply alone (no archive named) refuses an output folder holding a source of the lake
    lake_summary = run_nightly([root], lake=lake, tz="UTC", workers=1, policies=(policy,))
    assert lake_summary.exit_code == 0
    with pytest.raises(UsageError, match="the output folder holds a source transcript of the lake"):
        apply_policy(lake, policy=policy, out=tmp_path / "arch")
    assert {k: v for k, v in snapshot(tmp_path, tmp_path / "lake").items() if k in before} == before


def test_a_symlink_under_the_output_folder_is_refused(tmp_path):
    policy = "observation_masking(window=1)"
    archive = tmp_path / "arch"
    (archive / "claude").mkdir(parents=True)
    shutil.copy(REAL / "claude_code" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
                archive / "claude" / "s.jsonl")
    out = tmp_path / "out"
    (out / policy_key(policy)).mkdir(parents=True)
    (out / policy_key(policy) / ".ctxlake-output").write_text("")     # ctxlake's own folder
    (out / policy_key(policy) / "claude").symlink_to(archive / "claude")
    lake = Lake(tmp_path / "lake")
    before = snapshot(archive, lake.root)
    summary = run_nightly([archive], lake=lake, tz="UTC", workers=1, policies=(policy,), out=out)
    assert [p.kind for p in summary.applied[policy].problems] == ["unsafe"]
    assert "refusing a symlink in the output folder" in summary.applied[policy].problems[0].error
    assert snapshot(archive, lake.root) == before
    # the policy's output folder itself a symlink under the user's --out: refused before the
    # night starts (a link planted in <lake>/out fails the apply stage only: test_output_folders)
    shutil.rmtree(out)
    out.mkdir()
    (out / policy_key(policy)).symlink_to(archive)
    with pytest.raises(UnsafePathError, match="refusing a symlink in the output folder"):
        run_nightly([archive], lake=lake, tz="UTC", workers=1, policies=(policy,), out=out)
    assert snapshot(archive, lake.root) == before


def test_the_lock_never_follows_a_symlink(tmp_path):
    archive = archive_with(tmp_path)
    lake = Lake(tmp_path / "lake")
    lake.root.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (lake.root / ".lock").symlink_to(victim)
    with pytest.raises(LakeLockedError, match="symlink"):
        ingest([archive], lake=lake, workers=1)
    assert victim.read_text() == "keep me"


def test_summaries_never_follow_a_symlink_nor_delete_what_they_did_not_write(tmp_path):
    archive = archive_with(tmp_path)
    lake, _ = night(tmp_path, archive)
    recovery = lake.summaries_dir / "recovery"
    (recovery / "notes.md").write_text("my own notes\n")
    (lake.summaries_dir / "sessions" / "2020-01-01.md").write_text("# not a log\n")
    summarize(lake, tz="UTC")
    assert (recovery / "notes.md").read_text() == "my own notes\n"
    assert (lake.summaries_dir / "sessions" / "2020-01-01.md").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(recovery)
    recovery.symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="refusing a symlink in the summaries folder"):
        summarize(lake, tz="UTC")
    assert list(elsewhere.iterdir()) == []


def test_a_planted_demo_marker_deletes_nothing_outside_the_demo_folder(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "demo"
    out.mkdir()
    inside = out / "mine.txt"
    inside.write_text("not a demo file of this size")
    (out / MARKER).write_text(json.dumps({"files": [
        {"path": str(victim), "bytes": 7}, {"path": "../victim.txt", "bytes": 7},
        {"path": "mine.txt", "bytes": 3}]}))
    write_demo_archive(out, size_bytes=2_000_000, seed=1)
    assert victim.read_text() == "keep me"
    assert inside.read_text() == "not a demo file of this size"
    assert (out / MARKER).exists()


def test_a_lake_inside_the_archive_is_never_read_back(tmp_path, monkeypatch):
    archive = archive_with(tmp_path)
    monkeypatch.chdir(archive)
    monkeypatch.delenv("CTXLAKE_HOME", raising=False)
    totals = []
    for _ in range(3):
        # the lake (and its outputs) inside the archive that is read: `make demo`'s layout
        result = CliRunner().invoke(cli, ["--lake", "data/lake", "run", ".", "--tz", "UTC"],
                                    catch_exceptions=False)
        assert result.exit_code == 0
        assert "skipped: " in result.output and "(a ctxlake lake folder: not read)" in result.output
        lake = Lake(archive / "data" / "lake")
        totals.append(rows(lake, "SELECT count(*), sum(n_messages) FROM sessions"))
    assert totals == [[(1, GOOD_MESSAGES)]] * 3
    good_is_intact(lake)


def test_a_lake_path_with_glob_characters_reads_its_own_files(tmp_path):
    other = Lake(tmp_path / "lakeA")
    ingest([archive_with(tmp_path)], lake=other, workers=1)
    agent = tmp_path / "archB" / "claude" / "agent.jsonl"
    agent.parent.mkdir(parents=True)
    shutil.copy(REAL / "claude_code" / "claude_agent.jsonl", agent)
    for name in ("lake[A]", "lake*", "lake?"):
        globby = Lake(tmp_path / name)
        ingest([agent.parent.parent], lake=globby, workers=1)
        assert rows(globby, "SELECT count(*), count(DISTINCT session_id) FROM messages") == [(2, 1)]
        assert run_query(globby, "SELECT count(*) FROM sources")[1] == [(1,)]


def test_a_file_replaced_with_the_same_size_and_mtime_is_read_again(tmp_path):
    archive = archive_with(tmp_path)
    lake = Lake(tmp_path / "lake")
    ingest([archive], lake=lake, workers=1)
    path = archive / "claude" / "ok.jsonl"
    st = path.stat()
    data = path.read_bytes()
    replaced = tmp_path / "replacement.jsonl"
    replaced.write_bytes(data.replace(b"hoge", b"HOGE"))
    os.replace(replaced, path)                           # a new inode, same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime
    summary = ingest([archive], lake=lake, workers=1)
    assert (summary.files_reingested, summary.records) == (1, GOOD_LINES)
    assert scalar(lake, "SELECT count(*) FROM messages WHERE text LIKE '%HOGE%'") > 0


def test_the_lake_is_private_whatever_the_umask(tmp_path):
    archive = archive_with(tmp_path)
    old = os.umask(0o022)
    try:
        lake, _ = night(tmp_path, archive)
    finally:
        os.umask(old)
    loose = [f"{oct(stat.S_IMODE(p.lstat().st_mode))} {p.relative_to(lake.root)}"
             for p in [lake.root, *lake.root.rglob("*")]
             if stat.S_IMODE(p.lstat().st_mode) & 0o077]
    assert loose == []


@pytest.mark.parametrize("query, refused", [
    ("COPY (SELECT 1) TO '{tmp}/pwned.csv'", "COPY statements are refused (only SELECT and EXPLAIN)"),
    ("ATTACH '{tmp}/x.db' AS x", "ATTACH statements are refused (only SELECT and EXPLAIN)"),
    ("SELECT * FROM read_text('/etc/hostname')", "the table function read_text() may read files: refused"),
    ("SELECT * FROM '{tmp}/arch/claude/ok.jsonl'", "reading the file '{tmp}/arch/claude/ok.jsonl' as a table is refused"),
    ("INSTALL httpfs", "LOAD statements are refused (only SELECT and EXPLAIN)"),
])
def test_sql_is_read_only_over_the_views_unless_unsafe(tmp_path, query, refused):
    archive = archive_with(tmp_path)
    lake = Lake(tmp_path / "lake")
    ingest([archive], lake=lake, workers=1)
    args = ["--lake", str(lake.root), "sql", query.format(tmp=tmp_path)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"Error: query refused: {refused.format(tmp=tmp_path)}",
        "hint: ctxlake sql is read-only over the lake's views; add --unsafe to lift this"]
    assert not (tmp_path / "pwned.csv").exists() and not (tmp_path / "x.db").exists()
    assert run_query(lake, "SELECT count(*) FROM records")[1] == [(GOOD_LINES,)]


def test_sql_unsafe_lifts_the_read_only_rule(tmp_path):
    lake = Lake(tmp_path / "lake")
    ingest([archive_with(tmp_path)], lake=lake, workers=1)
    with pytest.raises(UsageError):
        run_query(lake, f"COPY (SELECT 1 AS x) TO '{tmp_path}/ok.csv'")
    run_query(lake, f"COPY (SELECT 1 AS x) TO '{tmp_path}/ok.csv'", unsafe=True)
    assert (tmp_path / "ok.csv").read_text() == "x\n1\n"
