"""A damaged lake is said, never read as a new one; a lake this user cannot write is said.

sources.parquet is the lake's commit point: without it a run read every file again beside
the rows already there (every count doubled), and "no lake here yet" sent the user to ingest.
A truncated sources.parquet or table part gave a traceback in every command, or nothing at all.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.lake import Lake
from tests.helpers.lake import copy_real, rows

SAMPLE = "claude_code/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("damage")
    archive = copy_real(root, SAMPLE)
    result = CliRunner().invoke(cli, ["--lake", str(root / "lake"), "run", str(archive), "--tz",
                                      "UTC", "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return root / "lake", archive


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _damage_sources_deleted(lake: Path) -> str:
    (lake / "sources.parquet").unlink()
    return "sources.parquet is missing, but tables/ holds parts of ingested files"


def _damage_sources_cut(lake: Path) -> str:
    _cut(lake / "sources.parquet")
    return "sources.parquet is not a whole Parquet file (cut short or overwritten)"


def _damage_messages_part_cut(lake: Path) -> str:
    part = sorted((lake / "tables" / "messages").glob("2*.parquet"))[0]
    _cut(part)
    return f"tables/messages/{part.name} is not a whole Parquet file (cut short or overwritten)"


@pytest.mark.parametrize("damage", [_damage_sources_deleted, _damage_sources_cut,
                                    _damage_messages_part_cut],
                         ids=["sources deleted", "sources cut short", "messages part cut short"])
def test_every_command_says_a_damaged_lake_is_damaged_and_run_adds_nothing_to_it(tmp_path, built, damage):
    lake = tmp_path / "lake"
    shutil.copytree(built[0], lake)
    said = damage(lake)
    before = sorted(p.relative_to(lake) for p in lake.rglob("*") if p.is_file())
    runner = CliRunner()
    for command in (["run", str(built[1]), "--tz", "UTC", "--json"], ["status", "--json"],
                    ["sql", "SELECT count(*) FROM messages", "--json"], ["show", "x", "--json"]):
        result = runner.invoke(cli, ["--lake", str(lake), *command], catch_exceptions=False)
        assert result.exit_code == 1, (command, result.output)
        error = json.loads(result.stderr or result.output)["error"]
        assert (error["kind"], error["message"]) == ("LakeDamagedError", f"the lake is damaged: {said}")
        assert "move the folder aside and run `ctxlake run` again" in error["hint"]
    # nothing was added to it (before: a run read every file again beside its rows)
    assert sorted(p.relative_to(lake) for p in lake.rglob("*") if p.is_file()
                  if p.name != ".lock") == [p for p in before if p.name != ".lock"]
    verified = runner.invoke(cli, ["--lake", str(lake), "verify", "--json"], catch_exceptions=False)
    assert verified.exit_code == 1
    answer = json.loads(verified.stdout or verified.stderr)
    # the problems it lists, or (no sources.parquet: no lake to read) the error
    assert said in json.dumps(answer.get("problems") or answer["error"])


def test_an_intact_lake_passes_the_check(built):
    assert Lake(built[0]).damage() == []


def test_a_lake_this_user_cannot_write_is_an_error_that_says_so(tmp_path, built, monkeypatch):
    # as root no folder mode refuses a write: the lock file's open is made to fail as it
    # does for another user (EACCES)
    real_open = os.open

    def refused(path, *args, **kwargs):
        if str(path).endswith("/.lock"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    lake = tmp_path / "lake"
    shutil.copytree(built[0], lake)
    monkeypatch.setattr(os, "open", refused)
    result = CliRunner().invoke(cli, ["--lake", str(lake), "run", str(built[1]), "--tz", "UTC",
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 1
    error = json.loads(result.stderr or result.output)["error"]
    assert (error["kind"], error["message"], error["path"]) == (
        "LakeAccessError", "the lake cannot be written by this user: Permission denied", str(lake))
    assert error["hint"].startswith("run as the user who owns it")


def test_status_shows_a_run_killed_without_a_record_as_interrupted_once_the_lock_is_free(tmp_path, built):
    lake = tmp_path / "lake"
    shutil.copytree(built[0], lake)
    Lake(lake).record_run({"run_id": "29991231T000000000000", "command": "run", "status": "running",
                           "started_at": datetime(2999, 12, 31, tzinfo=timezone.utc), "pid": 1})
    result = CliRunner().invoke(cli, ["--lake", str(lake), "status", "--json"], catch_exceptions=False)
    latest = json.loads(result.output)["runs"][0]
    assert (latest["run_id"], latest["status"]) == ("29991231T000000000000", "interrupted")
    assert latest["warnings"] == ["ended without a record (killed?): the next run finishes its work"]


TWO = (SAMPLE, "codex/codex_session.jsonl")
COUNTS = ("SELECT 'messages' AS t, session_id, count(*) AS n FROM messages GROUP BY ALL UNION ALL "
          "SELECT 'tool_calls', session_id, count(*) FROM tool_calls GROUP BY ALL UNION ALL "
          "SELECT 'tool_results', session_id, count(*) FROM tool_results GROUP BY ALL UNION ALL "
          "SELECT 'records', NULL, count(*) FROM records ORDER BY ALL")


def _run_json(lake: Path, archive: Path) -> dict:
    result = CliRunner().invoke(cli, ["--lake", str(lake), "run", str(archive), "--tz", "UTC",
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_part_deleted_by_hand_is_noticed_and_the_files_it_held_are_read_again_whole(tmp_path):
    archive = copy_real(tmp_path, *TWO)
    lake = tmp_path / "lake"
    _run_json(lake, archive)
    before = rows(Lake(lake), COUNTS)
    part = sorted((lake / "tables" / "messages").glob("2*.parquet"))[0]
    part.unlink()
    assert rows(Lake(lake), COUNTS) != before        # the rows it held are gone from the views
    verify = CliRunner().invoke(cli, ["--lake", str(lake), "verify", "--json"],
                                catch_exceptions=False)
    assert verify.exit_code == 1
    assert json.loads(verify.output)["problems"] == [{
        "kind": "lake", "path": str(part), "detail": "missing: its rows are not in the tables; "
        "the next `ctxlake run` (or ingest) reads again the files whose rows it held"}]
    status = CliRunner().invoke(cli, ["--lake", str(lake), "status", "--json"], catch_exceptions=False)
    assert json.loads(status.output)["lost_parts"] == [f"messages/{part.stem}"]
    status = CliRunner().invoke(cli, ["--lake", str(lake), "status"], catch_exceptions=False)
    assert f"missing: 1 table part(s) deleted from tables/ (messages/{part.stem}): their rows" \
        in " ".join(status.output.split())
    # a command that reads the lake says so first, on stderr (its answer stays on stdout)
    query = CliRunner().invoke(cli, ["--lake", str(lake), "sql", "SELECT count(*) AS n FROM messages",
                                     "--json"], catch_exceptions=False)
    assert query.exit_code == 0
    assert json.loads(query.stdout) == [{"n": rows(Lake(lake), "SELECT count(*) FROM messages")[0][0]}]
    assert query.stderr == (f"warning: 1 table part(s) missing from tables/ (messages/{part.stem}): "
                            "their rows are not in what this command reads until the next "
                            "`ctxlake run` reads their files again\n")

    night = _run_json(lake, archive)

    assert night["ingest"]["warnings"] == [
        f"a part file of the lake's tables is missing (messages/{part.stem}): the 2 files "
        "whose rows it held are read again whole"]
    assert night["ingest"]["files_reingested"] == 2
    assert rows(Lake(lake), COUNTS) == before
    named = {p for parts in Lake(lake).read_sources(("parts",)).column(0).to_pylist() for p in parts}
    on_disk = {f"{p.parent.name}/{p.stem}" for p in (lake / "tables").glob("*/2*.parquet")}
    assert named and named <= on_disk
    again = _run_json(lake, archive)
    assert again["ingest"]["warnings"] == [] and again["ingest"]["files_unchanged"] == 2
    status = CliRunner().invoke(cli, ["--lake", str(lake), "status", "--json"], catch_exceptions=False)
    assert json.loads(status.output)["lost_parts"] == []
    assert CliRunner().invoke(cli, ["--lake", str(lake), "sql", "SELECT 1 AS one"],
                              catch_exceptions=False).stderr == ""
    assert CliRunner().invoke(cli, ["--lake", str(lake), "verify"],
                              catch_exceptions=False).exit_code == 0


def test_a_lake_whose_sources_do_not_list_their_parts_still_scopes_and_reads_on(tmp_path):
    """A lake made before ``sources.parts`` was kept: the scoped cursors find the files by
    reading the tables, and a file read on from its watermark keeps an unknown list."""
    import pyarrow.parquet as pq

    archive = copy_real(tmp_path, *TWO)
    lake = tmp_path / "lake"
    _run_json(lake, archive)
    sources = pq.read_table(lake / "sources.parquet")
    pq.write_table(sources.drop_columns(["parts"]), lake / "sources.parquet")
    with (archive / SAMPLE).open("ab") as handle:
        handle.write((archive / SAMPLE).read_bytes().splitlines(keepends=True)[-1])

    night = _run_json(lake, archive)

    assert night["ingest"]["files_appended"] == 1 and night["exit_code"] == 0
    parts = dict(zip(*[c.to_pylist() for c in Lake(lake).read_sources(("path", "parts")).columns]))
    assert parts == {str(archive / SAMPLE): None, str(archive / TWO[1]): None}


def test_a_lost_part_whose_files_are_not_below_the_paths_read_says_their_rows_stay_missing(tmp_path):
    from pipeline.stages.ingest import ingest

    first = copy_real(tmp_path / "a", SAMPLE)
    second = copy_real(tmp_path / "b", TWO[1])
    lake = Lake(tmp_path / "lake")
    ingest([first, second], lake=lake, workers=1)
    part = next((lake.root / "tables" / "messages").glob("2*.parquet"))
    part.unlink()

    read = ingest([first], lake=lake, workers=1)

    assert read.warnings == [
        f"a part file of the lake's tables is missing (messages/{part.stem}): the 1 files whose "
        "rows it held are read again whole; the rows of these files, not below the paths read "
        f"now, stay missing until a run reads them: {second / TWO[1]}"]
    assert read.files_reingested == 1
    again = ingest([first, second], lake=lake, workers=1)
    assert again.warnings == [f"a part file of the lake's tables is missing (messages/{part.stem}): "
                              "the 1 files whose rows it held are read again whole"]
    assert again.files_reingested == 1
    last = ingest([first, second], lake=lake, workers=1)
    assert last.warnings == [] and last.files_unchanged == 2


def test_a_file_read_again_whole_does_not_report_its_old_quarantined_lines_as_news(tmp_path):
    """Reading a file again whole (here: its part deleted; a merge of small parts alike) is
    housekeeping: a line the lake already holds quarantined is not reported again, and
    ``--strict`` does not fail the night for it; a bad line that is new that night is."""
    archive = copy_real(tmp_path, *TWO)
    lake = tmp_path / "lake"
    session = archive / TWO[0]
    with open(session, "a", encoding="utf-8") as handle:
        handle.write('{"type": "user", "message": \n')
    first = CliRunner().invoke(cli, ["--lake", str(lake), "run", str(archive), "--tz", "UTC",
                                     "--json", "--strict"], catch_exceptions=False)
    assert first.exit_code == 1
    [problem] = json.loads(first.stdout)["ingest"]["problems"]
    assert problem["path"] == str(session)

    def lose_a_part() -> None:
        sorted((lake / "tables" / "messages").glob("2*.parquet"))[0].unlink()

    lose_a_part()
    again = CliRunner().invoke(cli, ["--lake", str(lake), "run", str(archive), "--tz", "UTC",
                                     "--json", "--strict"], catch_exceptions=False)
    night = json.loads(again.stdout)["ingest"]
    assert again.exit_code == 0
    assert (night["files_reingested"], night["quarantined"], night["quarantined_errors"],
            night["problems"]) == (2, 1, 0, [])
    assert rows(Lake(lake), "SELECT count(*) FROM quarantine") == [(1,)]
    with open(session, "a", encoding="utf-8") as handle:   # a new bad line, the same night
        handle.write('{"type": "assistant", \n')
    lose_a_part()
    third = CliRunner().invoke(cli, ["--lake", str(lake), "run", str(archive), "--tz", "UTC",
                                     "--json", "--strict"], catch_exceptions=False)
    night = json.loads(third.stdout)["ingest"]
    assert third.exit_code == 1
    assert (night["quarantined"], night["quarantined_errors"]) == (2, 1)
    assert [p["line_no"] for p in night["problems"]] == [problem["line_no"] + 1]
