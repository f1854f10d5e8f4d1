"""The ``--json`` of ``run`` and ``status`` is a user contract: the library returns typed
results (read by attribute in the CLI) whose ``to_dict()`` keeps every key at every level."""

from __future__ import annotations

import json

from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.ledger import Pending
from pipeline.reports.status import RunRecord
from pipeline.stages.results import RunSettings, StageRun
from tests.helpers.lake import copy_real

CLAUDE = "claude_code/claude_session.jsonl"
CODEX = "codex/codex_session.jsonl"

RUN_KEYS = {"applied", "calibration_rows", "correlate", "exit_code", "html", "ingest",
            "interrupted_runs", "lake", "out_dir", "plans", "run_id", "seconds",
            "sessions_ignored", "settings", "stages", "status", "summaries", "touched_sessions",
            "warnings"}
INGEST_KEYS = {"bytes_read", "files", "files_appended", "files_new", "files_problem",
               "files_compacted", "files_reingested", "files_unchanged", "files_unrecognized", "held_back", "lake",
               "lines", "own_folders", "parts_merged", "problems", "quarantined", "quarantined_errors", "records",
               "removed", "run_id", "seconds", "skipped", "superseded", "unread", "unrecognized",
               "unrecognized_named", "warnings"}
STAGE_KEYS = {"done", "failed", "removed", "seconds", "skipped", "stage", "status"}
CORRELATE_KEYS = {"by_class", "calls", "calls_parsed", "calls_with_paths", "paths", "protected",
                  "seconds", "statuses"}
PLAN_KEYS = {"bytes_saved", "cleared", "config_hash", "evictions", "inputs_cleared", "key",
             "plans", "policy", "preserved", "pruned", "sessions", "sessions_ignored", "steps",
             "suggestions", "tokens_saved"}
APPLY_KEYS = {"bytes_after", "bytes_before", "evictions", "evictions_applied", "files",
              "files_copied", "files_failed", "files_pruned", "files_removed", "files_up_to_date",
              "files_written", "out", "outputs_kept", "payloads_reused", "payloads_stored", "policy", "problems",
              "seconds", "store_bytes_added", "values_replaced"}
SUMMARIZE_KEYS = {"days_removed", "days_unchanged", "days_written", "ignored_session_ids", "lake",
                  "log_dir", "prices_written", "recovery_dir", "recovery_removed",
                  "recovery_unchanged", "recovery_written", "seconds", "sessions_considered",
                  "sessions_ignored", "sessions_listed", "sessions_undated", "tz"}
HTML_KEYS = {"out", "pages_removed", "pages_unchanged", "pages_written", "payload_pages",
             "seconds", "sessions", "sessions_rendered"}
SETTINGS_KEYS = {"ignore_patterns", "out", "policies", "time_zone", "version"}
STATUS_KEYS = {"busy", "files", "lake", "last_settings", "locations", "lost_parts", "mirror",
               "pending", "runs", "sessions", "settings", "size_bytes", "table_parts"}
RUN_RECORD_KEYS = {"command", "exit_code", "run_id", "seconds", "sessions_done",
                   "sessions_failed", "stages", "started_at", "status", "warnings"}
STAGES = ["flags", "correlate", "calibrate", "plan:payload_prune+microcompact",
          "apply:payload_prune+microcompact", "summarize", "usage", "html"]


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _lake_with_html(tmp_path):
    archive = copy_real(tmp_path, CLAUDE, CODEX)
    config = tmp_path / "ctxlake.toml"
    config.write_text("[report]\nhtml = true\n")
    lake = tmp_path / "lake"
    return archive, config, lake


def test_run_json_keeps_every_key_of_every_stage_summary(tmp_path):
    archive, config, lake = _lake_with_html(tmp_path)
    result = _invoke("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--config",
                     str(config), "--json")
    assert result.exit_code == 0, result.output
    run = json.loads(result.output)
    assert set(run) == RUN_KEYS
    assert set(run["ingest"]) == INGEST_KEYS
    assert [stage["stage"] for stage in run["stages"]] == STAGES
    assert all(set(stage) == STAGE_KEYS for stage in run["stages"])
    assert set(run["correlate"]) == CORRELATE_KEYS
    [plan] = run["plans"]
    assert set(plan) == PLAN_KEYS
    assert [set(step) for step in plan["steps"]] == [{"params", "policy"}] * 2
    assert list(run["applied"]) == ["payload_prune+microcompact"]
    assert set(run["applied"]["payload_prune+microcompact"]) == APPLY_KEYS
    assert set(run["summaries"]) == SUMMARIZE_KEYS
    assert set(run["html"]) == HTML_KEYS
    assert run["settings"] == {"ignore_patterns": [], "out": str(lake / "out"),
                               "policies": ["payload_prune+microcompact"], "time_zone": "UTC",
                               "version": run["settings"]["version"]}
    assert (run["status"], run["exit_code"], run["touched_sessions"]) == ("ok", 0, 2)


def test_a_run_with_nothing_owed_prints_empty_stage_summaries_in_its_json(tmp_path):
    archive, config, lake = _lake_with_html(tmp_path)
    _invoke("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--config", str(config))
    again = json.loads(_invoke("--lake", str(lake), "run", str(archive), "--tz", "UTC",
                               "--config", str(config), "--json").output)
    assert set(again) == RUN_KEYS
    assert (again["correlate"], again["plans"], again["applied"], again["summaries"],
            again["html"]) == ({}, [], {}, {}, {})
    assert [(s["stage"], s["done"], s["status"]) for s in again["stages"]] == [
        (name, 0, "ok") for name in STAGES]


def test_status_json_keeps_its_keys_and_the_runs_stage_table_as_recorded(tmp_path):
    archive, config, lake = _lake_with_html(tmp_path)
    run = json.loads(_invoke("--lake", str(lake), "run", str(archive), "--tz", "UTC",
                             "--config", str(config), "--json").output)
    status = json.loads(_invoke("--lake", str(lake), "status", "--tz", "UTC",
                                "--policy", "microcompact", "--json").output)
    assert set(status) == STATUS_KEYS
    assert (status["lake"], status["mirror"], status["lost_parts"]) == (str(lake.resolve()), None, [])
    [record] = status["runs"]
    assert set(record) == RUN_RECORD_KEYS
    assert (record["run_id"], record["command"], record["status"], record["exit_code"]) == (
        run["run_id"], "run", "ok", 0)
    assert record["stages"] == run["stages"]
    assert set(status["settings"]) == SETTINGS_KEYS == set(status["last_settings"])
    assert status["last_settings"] == run["settings"]
    assert status["settings"]["policies"] == ["microcompact"]
    assert status["pending"]["plan:microcompact"] == {"todo": 2, "removed": 0, "full": True}
    assert status["pending"]["flags"] == {"todo": 0, "removed": 0, "full": False}
    assert all(set(location) == {"found", "kind", "origin", "path"}
               for location in status["locations"])


def test_status_text_names_the_settings_that_differ_from_the_last_run(tmp_path):
    archive, config, lake = _lake_with_html(tmp_path)
    _invoke("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--config", str(config))
    same = _invoke("--lake", str(lake), "status", "--tz", "UTC").output
    assert "differs from the last run" not in same
    # a local lake: its folder, and no mirror line
    assert [line.split(":")[0] for line in same.splitlines()[:3]] == ["lake", "config", "settings"]
    assert same.startswith(f"lake:     {lake.resolve()} (")
    changed = _invoke("--lake", str(lake), "status", "--tz", "Asia/Tokyo",
                      "--policy", "microcompact").output
    assert ("          differs from the last run: time_zone 'UTC', policies "
            "['payload_prune+microcompact']") in changed.splitlines()


def test_run_settings_tell_what_changed_since_a_recorded_run():
    settings = RunSettings("UTC", ("microcompact",), "/lake/out", ("^warmup",), "1.0")
    recorded = settings.to_dict()
    assert recorded == {"time_zone": "UTC", "policies": ["microcompact"], "out": "/lake/out",
                        "ignore_patterns": ["^warmup"], "version": "1.0"}
    assert settings.changed_from(None) is None
    assert settings.changed_from(recorded) is None
    assert settings.changed_from({**recorded, "time_zone": "Asia/Tokyo"}) == {
        "time_zone": "Asia/Tokyo"}
    # a setting an older version recorded and this one no longer has: different, nothing named
    assert settings.changed_from({**recorded, "gone": 1}) == {}


def test_typed_results_give_the_json_rows_they_replace():
    assert StageRun("usage", 0.5, 3, 1, 0, 0, "ok").to_dict() == {
        "stage": "usage", "seconds": 0.5, "done": 3, "skipped": 1, "failed": 0, "removed": 0,
        "status": "ok"}
    assert StageRun("html", 0.1, 0, 0, 0, 0, "failed", "OSError: disk full").to_dict()["error"] \
        == "OSError: disk full"
    assert Pending().to_dict() == {"todo": 0, "removed": 0, "full": False}
    from datetime import datetime, timezone

    started = datetime(2026, 12, 1, 3, 0, tzinfo=timezone.utc)
    record = RunRecord.of({"run_id": "r1", "command": "run", "status": "running",
                           "started_at": started, "finished_at": None, "exit_code": None,
                           "sessions_done": None, "sessions_failed": None, "warnings": None,
                           "stages_json": None})
    assert record.to_dict() == {"run_id": "r1", "command": "run", "status": "running",
                                "started_at": "2026-12-01T03:00:00+00:00", "seconds": None,
                                "exit_code": None, "sessions_done": None,
                                "sessions_failed": None, "warnings": [], "stages": []}


def test_a_quarantined_line_is_named_by_file_and_line_in_the_json_and_the_text(tmp_path):
    archive = copy_real(tmp_path, CODEX)
    transcript = archive / CODEX
    n_lines = len(transcript.read_bytes().splitlines())
    with transcript.open("ab") as handle:
        handle.write(b"{not json\n")
    lake = tmp_path / "lake"
    run = json.loads(_invoke("--lake", str(lake), "run", str(archive), "--tz", "UTC",
                             "--json").output)
    [problem] = run["ingest"]["problems"]
    assert set(problem) == {"byte_offset", "line_no", "path", "reason", "severity"}
    assert (problem["path"], problem["line_no"], problem["severity"]) == (
        str(transcript), n_lines + 1, "error")
    text = _invoke("--lake", str(tmp_path / "lake2"), "run", str(archive), "--tz", "UTC").output
    assert f"  warning: {transcript}:{n_lines + 1}: {problem['reason']}" in text.splitlines()
