"""Bad input never stops a run: each bad line becomes a quarantine row with a clear reason."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from click.testing import CliRunner

from pipeline.cli import cli
from tests.helpers.lake import ingest_paths, rows, scalar

SESSION = "11111111-2222-3333-4444-555555555555"


def claude_line(n: int, text: str = "hello", **extra) -> bytes:
    obj = {"type": "user", "sessionId": SESSION, "uuid": f"u{n}", "parentUuid": None,
           "timestamp": f"2026-11-01T10:{n % 60:02d}:00.000Z", "cwd": "/work/p",
           "message": {"role": "user", "content": text}}
    obj.update(extra)
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def quarantine(lake):
    return rows(lake, "SELECT line_no, severity, reason FROM quarantine ORDER BY path, line_no")


def test_invalid_json_is_quarantined_with_file_line_offset_and_reason(tmp_path):
    good = claude_line(1)
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", good + b'{"type": "user", oops}\n' + claude_line(3))
    lake, summary = ingest_paths(tmp_path, path.parent)
    assert (summary.lines, summary.records, summary.quarantined) == (3, 2, 1)
    got = rows(lake, "SELECT path, line_no, byte_offset, reason FROM quarantine")
    assert got[0][:3] == (str(path), 2, len(good))
    assert got[0][3].startswith("invalid JSON:")


BAD_UTF8_AT = len(b'{"type": "user", "x": "')


def test_invalid_utf8_nul_bytes_and_non_objects_each_get_a_reason(tmp_path):
    data = (claude_line(1) + b'{"type": "user", "x": "\xff\xfe"}\n' + b'{"a": "b\x00"}\n'
            + b"[1, 2, 3]\n" + b"42\n" + b"null\n" + claude_line(7))
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", data)
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (2, 5)
    assert quarantine(lake) == [
        (2, "error", f"invalid UTF-8 at byte {BAD_UTF8_AT} of the line"),
        (3, "error", "line contains NUL bytes (first at byte 8): binary data, not JSON"),
        (4, "error", "JSON value is list, expected an object"),
        (5, "error", "JSON value is int, expected an object"),
        (6, "error", "JSON value is null, expected an object"),
    ]


def test_a_bom_and_crlf_endings_are_read_normally(tmp_path):
    data = b"\xef\xbb\xbf" + claude_line(1).replace(b"\n", b"\r\n") + claude_line(2).replace(b"\n", b"\r\n")
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", data)
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (2, 0)
    assert rows(lake, "SELECT line_no, byte_offset, text FROM messages ORDER BY seq") == [
        (1, 0, "hello"), (2, len(claude_line(1)) + 4, "hello")]


def test_blank_lines_are_counted_as_notices_not_errors(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + b"\n   \n" + claude_line(4))
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.lines, summary.records, summary.quarantined, summary.quarantined_errors) == (4, 2, 2, 0)
    assert quarantine(lake) == [(2, "notice", "blank line (nothing to read)"),
                                (3, "notice", "blank line (nothing to read)")]


def test_a_recursion_bomb_is_refused_without_a_traceback(tmp_path):
    bomb = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + bomb + claude_line(3))
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.records, summary.quarantined) == (2, 1)
    assert quarantine(lake) == [
        (2, "error", "JSON nested too deeply (over 254 levels, the nesting limit): refused as a recursion bomb")]


def test_a_20_mb_line_is_ingested_and_an_over_limit_line_is_quarantined(tmp_path):
    big = claude_line(2, "x" * (20 * 1024 * 1024))
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + big)
    lake, summary = ingest_paths(tmp_path / "l1", path)
    assert (summary.records, summary.quarantined) == (2, 0)
    assert scalar(lake, "SELECT max(char_len) FROM messages") == 20 * 1024 * 1024
    lake2, summary2 = ingest_paths(tmp_path / "l2", path, max_line_bytes=1_000_000)
    assert (summary2.records, summary2.quarantined) == (1, 1)
    assert quarantine(lake2)[0][2].endswith("over the 1,000,000-byte limit (--max-line-bytes)")


def test_an_empty_file_is_a_source_with_no_lines(tmp_path):
    path = write(tmp_path / ".claude" / "projects" / "p" / f"{SESSION}.jsonl", b"")
    lake, summary = ingest_paths(tmp_path, path)
    assert (summary.files, summary.lines, summary.records, summary.quarantined) == (1, 0, 0, 0)
    assert rows(lake, "SELECT lines, records, watermark FROM sources") == [(0, 0, 0)]


def test_an_unreadable_file_is_reported_and_the_rest_of_the_run_finishes(tmp_path, monkeypatch):
    folder = tmp_path / "a"
    good = write(folder / f"{SESSION}.jsonl", claude_line(1))
    bad = write(folder / "22222222-2222-3333-4444-555555555555.jsonl", claude_line(1))
    real_open = os.open

    def guarded_open(file, *args, **kwargs):
        if str(file) == str(bad):
            raise PermissionError(13, "Permission denied")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    lake, summary = ingest_paths(tmp_path, folder)
    assert (summary.records, summary.quarantined, summary.files_problem, summary.quarantined_errors) == \
        (1, 0, 1, 1)
    assert rows(lake, "SELECT path, line_no, reason FROM quarantine") == [
        (str(bad), 0, "cannot read file: Permission denied")]
    assert good.exists()


def test_an_unknown_record_type_is_kept_with_kind_other(tmp_path):
    line = json.dumps({"type": "brand-new-thing", "sessionId": SESSION, "uuid": "z",
                       "timestamp": "2026-11-01T10:00:00Z", "payload": {"k": 1}}).encode() + b"\n"
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + line)
    lake, summary = ingest_paths(tmp_path, path)
    assert summary.quarantined == 0
    assert rows(lake, "SELECT role, kind, subtype FROM messages WHERE line_no = 2") == [
        ("system", "other", "brand-new-thing")]
    assert scalar(lake, "SELECT raw FROM records WHERE line_no = 2") == line.decode().rstrip("\n")


def test_a_symlink_leading_out_of_the_archive_is_not_followed_and_is_reported(tmp_path):
    outside = write(tmp_path / "outside" / f"{SESSION}.jsonl", claude_line(1))
    archive = tmp_path / "archive"
    write(archive / "p" / "33333333-2222-3333-4444-555555555555.jsonl", claude_line(1))
    os.symlink(outside, archive / "p" / "escape.jsonl")
    lake, summary = ingest_paths(tmp_path, archive)
    assert (summary.records, summary.quarantined, summary.files_problem) == (1, 0, 1)
    (path, line_no, reason), = rows(lake, "SELECT path, line_no, reason FROM quarantine")
    assert (path, line_no) == (str(archive / "p" / "escape.jsonl"), 0)
    assert reason == f"symlink leads outside the archive root (to {outside}): not followed"


def test_a_reader_error_on_a_malformed_record_is_quarantined(tmp_path):
    line = json.dumps({"type": "assistant", "sessionId": SESSION, "message": {"content": 7}}).encode() + b"\n"
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + line)
    lake, summary = ingest_paths(tmp_path, path)
    assert quarantine(lake) == [
        (2, "error", "message.content must be a string or a list of blocks, found int")]
    assert scalar(lake, "SELECT count(*) FROM messages") == 1


def test_usage_of_the_wrong_type_is_quarantined_not_counted_as_zero(tmp_path):
    # ccusage leaves such a line out; it was read with 0 tokens, and nothing said so
    def reply(n: int, usage) -> bytes:
        return json.dumps({"type": "assistant", "sessionId": SESSION, "uuid": f"u{n}",
                           "requestId": f"req_{n}", "timestamp": f"2026-01-01T00:00:0{n}Z",
                           "message": {"id": f"msg_{n}", "role": "assistant", "model": "claude-sonnet-4-5",
                                       "content": [{"type": "text", "text": "ok"}],
                                       "usage": usage}}).encode() + b"\n"

    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + b"".join([
        reply(2, {"input_tokens": 10, "output_tokens": "5"}),
        reply(3, {"input_tokens": 10, "output_tokens": 7.5}),
        reply(4, "lots"),
        reply(5, {"input_tokens": 10, "output_tokens": 4,
                  "cache_creation": {"ephemeral_1h_input_tokens": [1]}}),
        reply(6, {"input_tokens": 10, "output_tokens": 6.0})]))
    lake, summary = ingest_paths(tmp_path, path)
    assert quarantine(lake) == [
        (2, "error", 'message.usage.output_tokens is a string ("5"), expected an integer token count: '
                     "the line is quarantined so that it stays out of the usage sums"),
        (3, "error", "message.usage.output_tokens is a number (7.5), expected an integer token count: "
                     "the line is quarantined so that it stays out of the usage sums"),
        (4, "error", 'message.usage is a string ("lots"), expected an object: the line is quarantined '
                     "so that it stays out of the usage sums"),
        (5, "error", "message.usage.cache_creation.ephemeral_1h_input_tokens is an array ([1]), expected "
                     "an integer token count: the line is quarantined so that it stays out of the "
                     "usage sums"),
        # written with a fraction, as ccusage reads no count
        (6, "error", "message.usage.output_tokens is a number (6.0), expected an integer token count: "
                     "the line is quarantined so that it stays out of the usage sums")]
    assert rows(lake, "SELECT line_no, output_tokens FROM messages WHERE usage_scope = 'call'") == []


def test_transcripts_compressed_or_named_otherwise_are_said_not_skipped_silently(tmp_path):
    archive = tmp_path / "archive"
    line = claude_line(1)
    write(archive / "p" / f"{SESSION}.jsonl", line)
    write(archive / "old" / "a.jsonl.gz", gzip.compress(line))
    write(archive / "old" / "b.JSONL", line)
    write(archive / "logs" / "c.ndjson", line)
    write(archive / "logs" / "d.json.zst", b"(\xb5/\xfd")
    write(archive / "README.md", b"# my archive")
    lake, summary = ingest_paths(tmp_path, archive)
    assert summary.files == 1
    unread = [Path(p).relative_to(archive).as_posix() for p in summary.unread]
    assert unread == ["logs/c.ndjson", "logs/d.json.zst", "old/a.jsonl.gz", "old/b.JSONL"]
    assert summary.warnings == [
        "4 files look like transcripts in a form ctxlake does not read (compressed, or not named "
        ".jsonl, .json or .traj): not read; decompress or rename them to read them: "
        + ", ".join(summary.unread)]
    assert summary.unrecognized == [] and summary.skipped == []


def test_companion_files_and_files_with_nothing_yet_are_skipped_without_a_warning(tmp_path):
    archive = tmp_path / "archive"
    session = archive / "p" / f"{SESSION}.jsonl"
    write(session, claude_line(1))
    write(archive / "p" / SESSION / "subagents" / "agent-a1b2c3d.meta.json",
          b'{"agentType": "general-purpose", "description": "look around"}')
    write(archive / "tmp" / "abc123" / "logs.json", b'[{"sessionId": "s", "type": "user", "message": "hi"}]')
    write(archive / "tmp" / "abc123" / "checkpoint-mytag.json", b'[{"role": "user", "parts": [{"text": "hi"}]}]')
    empty = write(archive / "p" / "22222222-2222-3333-4444-555555555555.jsonl", b"")
    write(archive / "p" / "33333333-2222-3333-4444-555555555555.jsonl", b"\xef\xbb\xbf\n \r\n")
    write(archive / "notes.json", b'{"todo": ["a", "b"]}')
    lake, summary = ingest_paths(tmp_path, archive)
    assert summary.unrecognized == [str(archive / "notes.json")]
    assert [Path(p).relative_to(archive).as_posix() for p in summary.skipped] == [
        f"p/{SESSION}/subagents/agent-a1b2c3d.meta.json",
        "p/22222222-2222-3333-4444-555555555555.jsonl", "p/33333333-2222-3333-4444-555555555555.jsonl",
        "tmp/abc123/checkpoint-mytag.json", "tmp/abc123/logs.json"]
    assert summary.files == 1 and summary.quarantined == 0
    # named on the command line, an empty file is still said
    _, named = ingest_paths(tmp_path, empty)
    assert named.unrecognized == [str(empty)] and named.unrecognized_named == [str(empty)]
    # a session file that was empty is read once it holds a line
    empty.write_bytes(claude_line(2).replace(SESSION.encode(), empty.stem.encode()))
    _, later = ingest_paths(tmp_path, archive)
    assert (later.files_new, later.records) == (1, 1) and len(later.skipped) == 4


def test_a_lone_surrogate_escape_is_read_as_u_fffd_and_the_file_still_prunes_and_restores(tmp_path):
    # "\ud83d" is valid JSON (JavaScript writes it for a string cut inside an emoji): it
    # quarantined the line, and a Gemini session document whole
    from pipeline.core.lake import Lake
    from pipeline.stages.nightly import run_nightly
    from pipeline.stages.restore import restore, verify
    from tests.helpers.lake import REAL

    archive = tmp_path / "archive"
    gemini = (REAL / "gemini" / "gemini_session.json").read_text(encoding="utf-8")
    cut = gemini.replace('"content": "add myapp directory', '"content": "\\ud83d add myapp directory', 1)
    assert cut != gemini
    write(archive / "gemini" / "gemini_session.json", cut.encode("utf-8"))
    result = "\\ud83d " + "line of output\\n" * 400 + "\\ud83d\\ude00 \\ude00"
    claude = [
        claude_line(1),
        json.dumps({"type": "assistant", "sessionId": SESSION, "uuid": "u2", "parentUuid": "u1",
                    "timestamp": "2026-11-01T10:01:00.000Z", "requestId": "req_1",
                    "message": {"id": "msg_1", "role": "assistant", "model": "claude-sonnet-4-5",
                                "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                             "input": {"command": "cat log"}}]}}).encode() + b"\n",
        ('{"type":"user","sessionId":"%s","uuid":"u3","parentUuid":"u2","timestamp":'
         '"2026-11-01T10:02:00.000Z","message":{"role":"user","content":[{"type":"tool_result",'
         '"tool_use_id":"t1","content":"%s"}]}}\n' % (SESSION, result)).encode()]
    path = write(archive / "claude" / f"{SESSION}.jsonl", b"".join(claude))
    lake = Lake(tmp_path / "lake")
    summary = run_nightly([archive], lake=lake, tz="UTC", workers=1,
                          policies=("payload_prune(max_bytes=1000)",))
    assert summary.exit_code == 0 and summary.ingest.quarantined == 0
    assert rows(lake, "SELECT format, count(*) FROM session_info GROUP BY 1 ORDER BY 1") == [
        ("claude_code", 1), ("gemini_cli", 1)]
    texts = [t for (t,) in rows(lake, "SELECT text FROM messages WHERE text LIKE '%\ufffd%' ORDER BY text")]
    assert len(texts) == 2 and texts[0].startswith("\ufffd add myapp directory")
    assert texts[1].startswith("\ufffd line of output\nline of output")
    assert texts[1].endswith("\U0001f600 \ufffd")        # a valid pair stays one emoji
    (applied,) = summary.applied.values()
    assert applied.evictions_applied == 1 and applied.problems == []
    pruned = Path(applied.out) / "claude" / path.name
    assert "compaction://" in pruned.read_text(encoding="utf-8")
    assert pruned.stat().st_size < path.stat().st_size - 2000
    assert restore(pruned, store=lake.store_dir).data == path.read_bytes()
    assert verify(lake).problems == []


def test_strict_exits_1_when_anything_was_quarantined_and_json_counts_every_line(tmp_path):
    path = write(tmp_path / "a" / f"{SESSION}.jsonl", claude_line(1) + b"not json\n" + b'{"partial')
    runner = CliRunner()
    result = runner.invoke(cli, ["--lake", str(tmp_path / "lake"), "ingest", str(path), "--json",
                                 "--strict", "--workers", "1"], catch_exceptions=False)
    assert result.exit_code == 1
    summary = json.loads(result.output)
    assert {k: summary[k] for k in ("files", "lines", "records", "quarantined", "held_back")} == \
        {"files": 1, "lines": 3, "records": 1, "quarantined": 1, "held_back": 1}
    relaxed = runner.invoke(cli, ["--lake", str(tmp_path / "lake2"), "ingest", str(path),
                                  "--workers", "1"], catch_exceptions=False)
    assert relaxed.exit_code == 0
    assert f"warning: {path}:2: invalid JSON" in relaxed.output


def test_a_reader_failing_at_the_end_of_a_file_undoes_its_rows_and_reports_the_file(tmp_path, monkeypatch):
    from pipeline.formats.gemini_cli import GeminiCliJsonlReader

    def broken_finish(self, out):
        out.message(role="user", kind="text", text="half", seq=1, block_no=0)
        raise RuntimeError("boom")

    monkeypatch.setattr(GeminiCliJsonlReader, "finish", broken_finish)
    line = json.dumps({"sessionId": "g1", "projectHash": "h", "startTime": "2026-11-01T10:00:00Z",
                       "lastUpdated": "2026-11-01T10:00:00Z", "kind": "main"}).encode() + b"\n"
    path = write(tmp_path / "chats" / "session-2026-11-01T10-00-abcdef12.jsonl", line)
    lake, summary = ingest_paths(tmp_path, path, format="gemini_cli_jsonl")
    assert (summary.lines, summary.records, summary.quarantined, summary.quarantined_errors) == (1, 1, 0, 1)
    assert quarantine(lake) == [(0, "error", "could not finish the file: reader failed: RuntimeError: boom")]
    assert scalar(lake, "SELECT count(*) FROM messages") == 0


def test_a_legacy_gemini_json_beside_its_migrated_jsonl_is_read_once(tmp_path):
    from tests.helpers.lake import REAL

    chats = tmp_path / "chats"
    legacy = chats / "session-2025-12-09T19-47-aaaa1111.json"
    write(legacy, (REAL / "gemini" / "gemini_session.json").read_bytes())
    lake, summary = ingest_paths(tmp_path / "l1", chats)
    assert summary.files == 1
    write(chats / (legacy.name + "l"), b"")
    lake2, summary2 = ingest_paths(tmp_path / "l2", chats, format=None)
    assert summary2.superseded == [str(legacy)]


def test_no_path_and_no_standard_location_is_a_usage_error_with_a_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))
    result = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake"), "ingest"])
    assert result.exit_code == 2
    assert "none of ~/.claude/projects, ~/.gemini/tmp, ~/.codex/sessions exists here" in result.output
    assert "hint: pass the folders or files to read" in result.output
