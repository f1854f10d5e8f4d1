"""The nightly job runs every stage, is incremental, and a re-run changes no output byte."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.lake import Lake
from pipeline.stages.nightly import run_nightly
from tests.helpers.lake import REAL, copy_real, rows, scalar


def _tree_digest(root) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")
            and p.suffix != ".duckdb"}


def test_the_nightly_job_runs_every_stage_on_the_real_samples(tmp_path):
    lake = Lake(tmp_path / "lake")
    summary = run_nightly([REAL], lake=lake, workers=1, tz="UTC")
    files = sorted(p for p in REAL.rglob("*") if p.is_file() and p.name != "SOURCES.md")
    assert summary.ingest.files == len(files) == 10
    assert summary.ingest.quarantined == 0
    # 10 files: 10 sessions, plus the two inline sidechain threads of the 1.0.108 file
    assert summary.touched_sessions == scalar(lake, "SELECT count(*) FROM sessions") == 12
    assert summary.correlate.calls == scalar(lake, "SELECT count(*) FROM tool_calls")
    assert [p.policy for p in summary.plans] == ["payload_prune+microcompact"]
    applied, = summary.applied.values()
    assert applied.files == 10 and applied.problems == []
    out_files = list((tmp_path / "lake" / "out").rglob("*.json*")) + \
        list((tmp_path / "lake" / "out").rglob("*.traj"))
    assert len(out_files) == 10
    assert summary.summaries.days_written >= 1
    assert (tmp_path / "lake" / "summaries" / "sessions").is_dir()


def test_a_second_nightly_run_touches_nothing_and_changes_no_output(tmp_path):
    archive = copy_real(tmp_path, "claude_code/claude_session.jsonl", "codex/codex_session.jsonl")
    lake = Lake(tmp_path / "lake")
    run_nightly([archive], lake=lake, workers=1, tz="UTC")
    before = _tree_digest(tmp_path / "lake" / "summaries") | _tree_digest(tmp_path / "lake" / "out")
    second = run_nightly([archive], lake=lake, workers=1, tz="UTC")
    assert (second.ingest.files_unchanged, second.touched_sessions) == (2, 0)
    after = _tree_digest(tmp_path / "lake" / "summaries") | _tree_digest(tmp_path / "lake" / "out")
    assert after == before and len(before) > 4


def test_a_moved_archive_replaces_its_old_sources_and_its_outputs_stay_the_same(tmp_path):
    archive = copy_real(tmp_path, "claude_code/claude_session.jsonl", "codex/codex_session.jsonl",
                        "gemini/gemini_session.json")
    other = copy_real(tmp_path / "elsewhere", "mini_swe_agent/django__django-14155.traj.json")
    lake = Lake(tmp_path / "lake")
    run_nightly([archive], lake=lake, workers=1, tz="UTC")
    run_nightly([other], lake=lake, workers=1, tz="UTC")
    outputs = _tree_digest(tmp_path / "lake" / "out")
    sessions = scalar(lake, "SELECT list(session_id ORDER BY session_id) FROM sessions")
    moved = archive.rename(tmp_path / "renamed")
    (other / "mini_swe_agent" / "django__django-14155.traj.json").unlink()   # gone, not moved
    night = run_nightly([moved], lake=lake, workers=1, tz="UTC")
    assert (night.ingest.files_new, len(night.ingest.removed)) == (3, 3)
    assert night.ingest.removed == sorted(str(archive / rel) for rel in (
        "claude_code/claude_session.jsonl", "codex/codex_session.jsonl", "gemini/gemini_session.json"))
    applied, = night.applied.values()
    assert applied.problems == [] and night.exit_code == 0
    # the trajectory whose file went without arriving anywhere is kept (not this run's root)
    assert scalar(lake, "SELECT list(session_id ORDER BY session_id) FROM sessions") == sessions
    assert scalar(lake, "SELECT count(*) FROM sources WHERE path LIKE '%/renamed/%'") == 3
    assert scalar(lake, "SELECT count(*) FROM sources") == 4
    assert _tree_digest(tmp_path / "lake" / "out") == outputs


def test_run_prints_a_json_summary(tmp_path):
    archive = copy_real(tmp_path, "claude_code/claude_session.jsonl")
    result = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake"), "run", str(archive),
                                      "--json", "--tz", "UTC"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["ingest"]["records"], summary["touched_sessions"]) == (26, 1)


def test_sessions_matching_ignore_patterns_are_ingested_flagged_and_not_summarised(tmp_path):
    archive = copy_real(tmp_path, "claude_code/claude_session.jsonl", "codex/codex_session.jsonl")
    config = tmp_path / "ctxlake.toml"
    config.write_text('ignore_patterns = ["^ADD MYAPP"]\n', encoding="utf-8")
    lake = Lake(tmp_path / "lake")
    summary = run_nightly([archive], lake=lake, workers=1, tz="UTC", config_path=config)
    # both sessions start with "add myapp directory ..." (case-insensitive match)
    assert summary.sessions_ignored == 2
    assert scalar(lake, "SELECT count(*) FROM sessions WHERE ignored AND ignored_by = '^ADD MYAPP'") == 2
    assert summary.summaries.sessions_ignored == 2
    assert summary.plans[0].sessions_ignored == 2


def test_after_a_manual_summarize_the_next_night_rewrites_the_summaries_under_its_own_settings(tmp_path):
    archive = copy_real(tmp_path, "claude_code/claude_session.jsonl", "codex/codex_session.jsonl",
                        "claude_code/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl")
    config = tmp_path / "ctxlake.toml"
    config.write_text('ignore_patterns = ["^ADD MYAPP"]\n', encoding="utf-8")
    lake = Lake(tmp_path / "lake")
    run_nightly([archive], lake=lake, workers=1, tz="UTC", config_path=config)
    nightly = _tree_digest(lake.summaries_dir)
    assert len(list((lake.summaries_dir / "recovery").iterdir())) == 1    # two ignored
    # by hand, without the config: the two ignored sessions get summaries
    result = CliRunner().invoke(cli, ["--lake", str(lake.root), "summarize", "--tz", "UTC", "--quiet"],
                                catch_exceptions=False)
    assert result.exit_code == 0
    assert len(list((lake.summaries_dir / "recovery").iterdir())) == 3
    # the next night does not take them as its own: it redoes summarize under its settings
    summary = run_nightly([archive], lake=lake, workers=1, tz="UTC", config_path=config)
    assert [s.done for s in summary.stages if s.stage == "summarize"] == [3]
    assert _tree_digest(lake.summaries_dir) == nightly
    summary = run_nightly([archive], lake=lake, workers=1, tz="UTC", config_path=config)
    assert [s.done for s in summary.stages if s.stage == "summarize"] == [0]


def test_an_output_edited_after_apply_is_kept_when_its_source_goes_and_said(tmp_path):
    archive = copy_real(tmp_path, "codex/codex_session.jsonl", "claude_code/claude_session.jsonl")
    lake = Lake(tmp_path / "lake")
    first = run_nightly([archive], lake=lake, workers=1, tz="UTC", policies=("payload_prune",))
    out = Path(first.applied["payload_prune"].out)
    edited, plain = out / "codex" / "codex_session.jsonl", out / "claude_code" / "claude_session.jsonl"
    with edited.open("ab") as handle:
        handle.write(b'{"note":"appended to the mirror"}\n')
    kept = edited.read_bytes()
    (archive / "codex" / "codex_session.jsonl").unlink()
    (archive / "claude_code" / "claude_session.jsonl").unlink()
    night = run_nightly([archive], lake=lake, workers=1, tz="UTC", policies=("payload_prune",))
    assert not plain.exists()                       # ctxlake's own bytes: removed with the source
    assert edited.read_bytes() == kept              # edited: kept, and said once
    assert night.applied["payload_prune"].files_removed == 1
    assert night.warnings == [f"apply:payload_prune: kept {edited}: edited after apply, its source is "
                              "gone (delete it by hand if it is not wanted)"]
    assert run_nightly([archive], lake=lake, workers=1, tz="UTC", policies=("payload_prune",)).warnings == []


def test_a_night_after_every_file_of_the_archive_is_gone_empties_the_reports_without_a_failure(tmp_path):
    archive = copy_real(tmp_path, "codex/codex_session.jsonl")
    lake = Lake(tmp_path / "lake")
    run_nightly([archive], lake=lake, workers=1, tz="UTC")
    (archive / "codex" / "codex_session.jsonl").unlink()
    night = run_nightly([archive], lake=lake, workers=1, tz="UTC")
    # before: "usage: ArrowTypeError: Array type doesn't match type of values set: string vs null"
    assert (night.exit_code, night.warnings) == (0, [])
    assert [s.status for s in night.stages if s.status != "ok"] == []
    assert scalar(lake, "SELECT count(*) FROM sessions") == 0


def test_a_night_with_nothing_new_imports_no_stage_module_no_duckdb_and_no_pyarrow_compute(tmp_path):
    import subprocess
    import sys

    lake = Lake(tmp_path / "lake")
    run_nightly([REAL], lake=lake, workers=1, tz="UTC")
    probe = ("import sys, json\n"
             "from pipeline.cli import cli\n"
             "try:\n"
             f"    cli(['--lake', {str(lake.root)!r}, 'run', {str(REAL)!r}, '--tz', 'UTC',"
             " '--json'], prog_name='ctxlake')\n"
             "except SystemExit as done:\n"
             "    assert not done.code, done.code\n"
             "stages = ('correlate', 'calibrate', 'plan', 'apply', 'summarize', 'recover')\n"
             "heavy = ('duckdb', 'rich', 'pyarrow.compute', 'pyarrow.dataset')\n"
             "print(json.dumps(sorted(m for m in sys.modules if m in heavy\n"
             "      or m.rsplit('.', 1)[-1] in stages)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    answer, modules = done.stdout.strip().rsplit("\n", 1)
    assert all(stage["done"] == 0 for stage in json.loads(answer)["stages"])
    assert json.loads(modules) == []


def test_parts_whose_rows_a_later_night_superseded_are_deleted_and_the_tables_keep_their_rows(tmp_path):
    """A file read again under a new generation (here: rewritten shorter) leaves its old
    parts holding only rows no view shows; the next night deletes them, and only them: the
    tables' rows are the same before and after, and a part holding a current row that
    ``sources.parts`` does not name is kept."""
    import shutil

    archive = copy_real(tmp_path, "claude_code/claude_session.jsonl")
    lake = Lake(tmp_path / "lake")
    tables = ("records", "messages", "tool_calls", "tool_results", "session_info")

    def parts() -> list[str]:
        return sorted(f"{p.parent.name}/{p.name}" for p in (lake.root / "tables").rglob("*.parquet")
                      if not p.name.startswith(("_", ".")))

    def contents() -> dict[str, list]:
        return {t: sorted(map(repr, rows(lake, f"SELECT * EXCLUDE (source_id) FROM "
                                               f"{'_messages_current' if t == 'messages' else t}")))
                for t in tables}

    run_nightly([archive], lake=lake, workers=1, tz="UTC")
    first = parts()                            # (a part holds the rows of a chunk of files)
    session = archive / "claude_code" / "claude_session.jsonl"
    lines = session.read_text(encoding="utf-8").splitlines(keepends=True)
    session.write_text("".join(lines[:-2]), encoding="utf-8")   # rewritten: a new generation
    run_nightly([archive], lake=lake, workers=1, tz="UTC")
    second = parts()
    assert set(first) < set(second)            # the old parts are still there
    kept_rows = contents()
    # a copy of a live part that no source names: it holds current rows, so it stays
    live = sorted(set(second) - set(first))[0]
    table, name = live.split("/")
    stray = lake.root / "tables" / table / name.replace(".parquet", "-copy.parquet")
    stray_name = f"{table}/{stray.name}"
    shutil.copy2(lake.root / "tables" / table / name, stray)
    with lake.lock():
        removed = lake.collect_dead_parts()
    left = parts()
    gone = set(second) - set(left)
    assert removed == len(gone) > 0
    assert gone == set(first)                  # every part of the first night, nothing else
    assert stray_name in left
    stray.unlink()
    assert contents() == kept_rows
    again = run_nightly([archive], lake=lake, workers=1, tz="UTC")
    assert again.status == "ok" and all(stage.done == 0 for stage in again.stages)
    assert parts() == sorted(set(left) - {stray_name})
    # the nightly job does it by itself: the parts a night supersedes go the next night
    session.write_text("".join(lines[:-4]), encoding="utf-8")
    run_nightly([archive], lake=lake, workers=1, tz="UTC")
    third = parts()
    run_nightly([archive], lake=lake, workers=1, tz="UTC")
    assert parts() == sorted(set(third) - set(left)) != []


def _assert_reads_as(merged: Lake, plain: Lake) -> None:
    """A lake whose small parts were merged holds the rows (but their generation), outputs
    and summaries of one that never merged."""
    for table in ("records", "messages", "tool_calls", "tool_results", "session_info"):
        query = f"SELECT * EXCLUDE (generation) FROM {table} ORDER BY ALL"
        assert rows(merged, query) == rows(plain, query), table
    for folder in ("out", "summaries"):
        assert _tree_digest(merged.root / folder) == _tree_digest(plain.root / folder), folder


def test_small_parts_that_pile_up_are_merged_and_the_lake_reads_as_one_that_never_merged(
        tmp_path, monkeypatch):
    """Each night that appends to a session leaves one small part set (a part per table)
    that every later query opens. Past ``max_small`` of them, a night reads the files holding
    their rows again whole: the old parts go, the tables hold the same rows (only their
    generation is new) and every output and summary is the same bytes as in a lake that never
    merged anything."""
    import shutil
    import uuid

    import pipeline.stages.ingest as ingest_module
    from pipeline.reports.status import lake_status
    from pipeline.stages.ingest import KnownSources, PartCompaction

    samples = ("claude_code/claude_session.jsonl", "codex/codex_session.jsonl")
    archive = copy_real(tmp_path, *samples)
    session = archive / "claude_code" / "claude_session.jsonl"
    codex = archive / "codex" / "codex_session.jsonl"
    merged, plain = Lake(tmp_path / "merged"), Lake(tmp_path / "plain")

    def part_sets(lake: Lake) -> list[str]:
        return sorted(lake.part_set_bytes())

    def night(lake: Lake):
        summary = run_nightly([archive], lake=lake, workers=1, tz="UTC")
        assert summary.status == "ok"
        return summary

    def append_line(n: int) -> None:
        last = json.loads(session.read_text(encoding="utf-8").splitlines()[-1])
        last.update(uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"line {n}")), type="user",
                    message={"role": "user", "content": f"one more thing, number {n}"})
        with open(session, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(last) + "\n")

    monkeypatch.setattr(ingest_module, "PART_COMPACTION", PartCompaction(max_small=10**6))
    for lake in (merged, plain):
        night(lake)
    for n in range(3):              # three appending nights: four small sets
        append_line(n)
        for lake in (merged, plain):
            assert night(lake).ingest.files_compacted == 0
    piled = part_sets(merged)
    assert len(piled) == len(part_sets(plain)) == 4
    piled_files = [name for name in merged.part_files() if name.partition("/")[2] in piled]
    assert lake_status(merged).table_parts == {"files": len(piled_files), "small_sets": 4,
                                               "merged_past": 10**6}
    known = KnownSources(merged)
    assert known.piled_up(PartCompaction(max_small=4)) == set()       # not too many yet
    assert known.piled_up(PartCompaction(max_small=1)) == {str(session), str(codex)}
    # the cheapest sets first, down to half the limit: the three the session alone holds
    assert known.piled_up(PartCompaction(max_small=3)) == {str(session)}
    # a set whose files are too big to read again is left alone (the first, held by both
    # files: three sets are left, not too many); a night reads no more than its budget
    assert known.piled_up(PartCompaction(max_small=3, set_bytes=codex.stat().st_size)) == set()
    assert known.piled_up(PartCompaction(max_small=1, night_bytes=session.stat().st_size)) \
        == {str(session)}
    # a set held by a file this run does not read (another folder's) stays as it is
    assert known.piled_up(PartCompaction(max_small=1), lambda path: path != str(codex)) \
        == {str(session)}
    append_line(3)
    night(plain)
    monkeypatch.setattr(ingest_module, "PART_COMPACTION", PartCompaction(max_small=1))
    summary = night(merged)
    # both files held rows in the first night's set: both are read again, every old set goes
    assert (summary.ingest.files_compacted, summary.ingest.files_reingested) == (2, 2)
    assert summary.ingest.parts_merged == len(piled_files) > 4
    left = part_sets(merged)
    assert len(left) == 1 and not set(left) & set(piled)
    assert summary.ingest.to_dict()["parts_merged"] == len(piled_files)
    assert summary.ingest.compaction_note() == (f"small table parts merged: 2 files read again "
                                                f"whole, {len(piled_files)} part files deleted")
    assert rows(merged, "SELECT DISTINCT generation FROM sources") == [(2,)]
    _assert_reads_as(merged, plain)
    # the next night has nothing to merge and nothing to do
    again = night(merged)
    assert again.ingest.files_compacted == 0 and all(stage.done == 0 for stage in again.stages)
    assert part_sets(merged) == left
    shutil.rmtree(plain.root)


def _merging_night(lake_root: str, archive: str, crash_at: str) -> None:
    """A night that merges every small part set, killed at ``crash_at`` (a child process:
    tests/helpers/processes.py)."""
    import os

    import pipeline.stages.ingest as ingest_module
    from pipeline.stages.ingest import PartCompaction

    ingest_module.PART_COMPACTION = PartCompaction(max_small=1)
    os.environ["CTXLAKE_CRASH_AT"] = crash_at
    try:
        run_nightly([Path(archive)], lake=Lake(Path(lake_root)), workers=1, tz="UTC")
    finally:
        os._exit(0)


@pytest.mark.parametrize("crash_at", ["ingest:chunk", "ingest:committed"])
def test_a_merge_killed_midway_is_finished_by_the_next_night(tmp_path, monkeypatch, crash_at):
    """A merge night killed before its commit (its parts written) or right after it (before
    the old parts go): the next night ends with the merged lake, its old parts gone, and the
    tables (but the generation) and outputs of a lake that never merged."""
    import signal

    import pipeline.stages.ingest as ingest_module
    from pipeline.stages.ingest import PartCompaction
    from tests.helpers.processes import start_child

    archive = copy_real(tmp_path, "claude_code/claude_session.jsonl", "codex/codex_session.jsonl")
    session = archive / "claude_code" / "claude_session.jsonl"
    merged, plain = Lake(tmp_path / "merged"), Lake(tmp_path / "plain")
    monkeypatch.setattr(ingest_module, "PART_COMPACTION", PartCompaction(max_small=10**6))
    for lake in (merged, plain):
        run_nightly([archive], lake=lake, workers=1, tz="UTC")
    lines = session.read_text(encoding="utf-8").splitlines(keepends=True)
    session.write_text("".join(lines) + lines[-1].replace('"type"', '"extra": 1, "type"', 1),
                       encoding="utf-8")
    for lake in (merged, plain):
        run_nightly([archive], lake=lake, workers=1, tz="UTC")
    piled = sorted(merged.part_set_bytes())
    assert len(piled) == 2
    child = start_child(_merging_night, str(merged.root), str(archive), crash_at)
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    monkeypatch.setattr(ingest_module, "PART_COMPACTION", PartCompaction(max_small=1))
    night = run_nightly([archive], lake=merged, workers=1, tz="UTC")
    assert night.status == "ok" and night.interrupted_runs
    left = sorted(merged.part_set_bytes())
    assert len(left) == 1 and not set(left) & set(piled)
    named = {part for parts in merged.read_sources(("parts",)).column(0).to_pylist() for part in parts}
    assert named == set(merged.part_files())         # no dead part, no stray part
    run_nightly([archive], lake=plain, workers=1, tz="UTC")
    _assert_reads_as(merged, plain)
