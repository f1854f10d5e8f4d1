"""The CLI a person uses every day (issue #17): where the lake lives, nothing hidden, one
session resolver, machine-friendly output, a config file that holds the defaults."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.config import load_config
from pipeline.core.lake import Lake, default_lake, notebook_lake
from tests.helpers.lake import REAL, REPO, copy_real

CLAUDE = "claude_code/claude_session.jsonl"        # session 7f2abd2d-... and its sub-agent
CODEX = "codex/codex_session.jsonl"


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, input=input)


@pytest.fixture(scope="module")
def real_lake(tmp_path_factory) -> Path:
    """The nightly job over every real sample, once for this module."""
    lake = tmp_path_factory.mktemp("daily") / "lake"
    result = CliRunner().invoke(cli, ["--lake", str(lake), "run", str(REAL), "--tz", "UTC"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return lake


# -- 1. where the lake lives ----------------------------------------------------------------
def test_the_default_lake_is_the_per_user_data_folder_whatever_the_current_folder(
        tmp_path, monkeypatch, private_home):
    monkeypatch.chdir(tmp_path)
    assert default_lake() == private_home / ".local" / "share" / "ctxlake"
    monkeypatch.setenv("CTXLAKE_HOME", "relative/lake")
    assert default_lake() == tmp_path / "relative" / "lake"
    monkeypatch.delenv("CTXLAKE_HOME")
    assert default_lake("~/lakes/agents") == private_home / "lakes" / "agents"


def test_a_run_in_one_folder_is_reported_from_another(tmp_path, monkeypatch, private_home):
    archive = copy_real(tmp_path, CODEX)
    monkeypatch.chdir(private_home)
    assert invoke("run", str(archive), "--tz", "UTC").exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = invoke("status")
    lake = private_home / ".local" / "share" / "ctxlake"
    assert f"lake:     {lake} (" in result.output
    assert "config:   (none: built-in defaults)" in result.output
    assert invoke("sql", "SELECT count(*) AS n FROM sessions", "--csv").output == "n\n1\n"


def test_the_config_file_can_name_the_lake_and_ctxlake_home_wins_over_it(tmp_path, monkeypatch):
    (tmp_path / "ctxlake.toml").write_text(f'lake = "{tmp_path / "from-config"}"\n')
    monkeypatch.chdir(tmp_path)
    result = invoke("config", "show", "--json")
    assert json.loads(result.output)["lake_in_effect"] == str(tmp_path / "from-config")
    monkeypatch.setenv("CTXLAKE_HOME", str(tmp_path / "from-env"))
    result = invoke("config", "show", "--json")
    assert json.loads(result.output)["lake_in_effect"] == str(tmp_path / "from-env")


def test_the_persisted_views_open_from_any_folder_when_the_lake_was_given_relative(
        tmp_path, monkeypatch):
    archive = copy_real(tmp_path, CODEX)
    monkeypatch.chdir(tmp_path)
    assert invoke("--lake", "rel-lake", "ingest", str(archive)).exit_code == 0
    monkeypatch.chdir("/")
    con = duckdb.connect(str(tmp_path / "rel-lake" / "ctxlake.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
    finally:
        con.close()
    assert Lake("rel-lake").root.is_absolute()


def test_a_notebook_started_in_notebooks_finds_the_make_demo_lake(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (checkout / "notebooks").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    (checkout / "data" / "lake").mkdir(parents=True)
    (checkout / "data" / "lake" / "sources.parquet").write_bytes(b"")
    assert notebook_lake(checkout / "notebooks") == checkout / "data" / "lake"
    monkeypatch.setenv("CTXLAKE_HOME", str(tmp_path / "chosen"))
    assert notebook_lake(checkout / "notebooks") == tmp_path / "chosen"


# -- 2. nothing hidden ----------------------------------------------------------------------
def test_an_unrecognised_file_named_on_the_command_line_is_said_and_fails_strict(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a transcript\n")
    other = tmp_path / "other.json"
    other.write_text('{"hello": "world"}\n')
    lake = str(tmp_path / "lake")
    result = invoke("--lake", lake, "ingest", str(notes), str(other))
    assert result.exit_code == 0
    assert (f"2 files not recognised as a transcript (skipped; force a reader with --format): "
            f"{notes}, {other}") in result.output
    assert invoke("--lake", lake, "ingest", str(notes), "--strict").exit_code == 1
    summary = json.loads(invoke("--lake", lake, "ingest", str(notes), "--json").output)
    assert summary["unrecognized_named"] == [str(notes)]


def test_an_unrecognised_file_found_in_a_folder_does_not_fail_strict(tmp_path):
    archive = copy_real(tmp_path, CODEX)
    (archive / "readme.json").write_text('{"hello": "world"}\n')
    result = invoke("--lake", str(tmp_path / "lake"), "ingest", str(archive), "--strict")
    assert result.exit_code == 0
    assert f"1 files not recognised as a transcript" in result.output


def test_the_nightly_run_lists_the_files_it_did_not_recognise(tmp_path):
    archive = copy_real(tmp_path, CODEX)
    (archive / "readme.json").write_text('{"hello": "world"}\n')
    result = invoke("--lake", str(tmp_path / "lake"), "run", str(archive), "--tz", "UTC")
    assert (f"1 files not recognised as a transcript (skipped; force a reader with ctxlake "
            f"ingest --format): {archive / 'readme.json'}") in result.output
    named = invoke("--lake", str(tmp_path / "lake"), "run", str(archive / "readme.json"),
                   "--tz", "UTC", "--strict")
    assert named.exit_code == 1


def test_forcing_a_wrong_format_warns_when_no_message_came_out(tmp_path):
    archive = copy_real(tmp_path, CODEX)
    result = invoke("--lake", str(tmp_path / "lake"), "ingest", str(archive / CODEX),
                    "--format", "claude_code")
    path = archive / CODEX
    assert re.search(rf"warning: {re.escape(str(path))}: read as --format claude_code: "
                     r"\d+ records but no message \(it looks like codex_cli; drop "
                     r"--format to auto-detect\)", result.output), result.output


def test_verify_on_a_lake_that_does_not_exist_is_an_error_not_ok(tmp_path):
    result = invoke("--lake", str(tmp_path / "nowhere"), "verify")
    assert result.exit_code == 1
    assert "no lake here yet: nothing to verify" in result.output
    assert "ok" not in result.output.split()


# -- 3. session ids the same everywhere -----------------------------------------------------
def test_every_command_taking_a_session_accepts_a_unique_prefix(real_lake):
    lake = ["--lake", str(real_lake)]
    suggest = json.loads(invoke(*lake, "suggest", "7f2a", "--json").output)
    assert suggest["session_id"] == "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9"
    plan = json.loads(invoke(*lake, "plan", "--policy", "microcompact", "--session", "019b",
                             "--json").output)
    assert plan[0]["sessions"] == 1
    replay = json.loads(invoke(*lake, "replay", "--policy", "microcompact", "--session",
                               "pvlib", "--json").output)
    assert replay["sessions"] == 1
    shown = json.loads(invoke(*lake, "show", "7f2a", "--json").output)
    assert shown["session_id"] == "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9"


def test_an_unknown_session_is_a_usage_error_listing_candidates_for_apply_and_summarize(real_lake):
    for args in (["apply", "--policy", "payload_prune+microcompact", "--session", "7f2abd2dx"],
                 ["summarize", "--session", "7f2abd2dx"], ["recover", "7f2abd2dx"]):
        result = invoke("--lake", str(real_lake), *args)
        assert result.exit_code == 2, args
        assert ("no session '7f2abd2dx' in the lake; candidates: "
                "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9, "
                "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9/agent-0c4c3cf8\n") in result.output


def test_an_ambiguous_prefix_is_a_usage_error_listing_the_matches(real_lake):
    result = invoke("--lake", str(real_lake), "suggest", "5c0375b4-57a5-4f26-b12d-d022ee4e51b7/")
    assert result.exit_code == 2
    assert ("'5c0375b4-57a5-4f26-b12d-d022ee4e51b7/' matches 2 sessions: "
            "5c0375b4-57a5-4f26-b12d-d022ee4e51b7/sidechain-6340ddef, "
            "5c0375b4-57a5-4f26-b12d-d022ee4e51b7/sidechain-83e2917c") in result.output


def test_an_unknown_session_offers_the_closest_ids(real_lake):
    result = invoke("--lake", str(real_lake), "show", "pvlib_python")
    assert result.exit_code == 2
    assert "no session 'pvlib_python' in the lake; candidates: pvlib__pvlib-python-1606@mini_swe_agent\n" \
        in result.output


def test_a_prefix_of_a_session_and_its_sub_agents_means_the_session(real_lake):
    result = invoke("--lake", str(real_lake), "show", "5c03", "--json")
    assert json.loads(result.output)["session_id"] == "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"


# -- 5. machine-friendly --------------------------------------------------------------------
def test_the_lake_can_be_given_after_the_subcommand(real_lake):
    result = invoke("sql", "SELECT count(*) AS n FROM sessions", "--csv", "--lake", str(real_lake))
    assert result.output == "n\n12\n"


def test_quiet_prints_nothing_on_success_and_json_still_prints(tmp_path):
    archive = copy_real(tmp_path, CODEX)
    lake = str(tmp_path / "lake")
    assert invoke("--quiet", "--lake", lake, "run", str(archive), "--tz", "UTC").output == ""
    assert invoke("--lake", lake, "verify", "-q").output == ""
    assert json.loads(invoke("--lake", lake, "ingest", str(archive), "-q", "--json").output)[
        "files_unchanged"] == 1


def test_errors_are_json_on_stderr_under_json(tmp_path):
    result = invoke("--lake", str(tmp_path / "nowhere"), "status", "--json")
    assert result.exit_code == 1
    assert result.stdout == ""
    error = json.loads(result.stderr)["error"]
    assert error == {"kind": "LakeNotFoundError", "message": "no lake here yet",
                     "path": str(tmp_path / "nowhere"), "line": None, "exit_code": 1,
                     "hint": "run `ctxlake run PATH` (or `ctxlake demo`) first, or pass --lake "
                             "/ set CTXLAKE_HOME"}
    bad = invoke("--lake", str(tmp_path), "report", "daily", "--json", "--bogus")
    assert bad.exit_code == 2
    assert json.loads(bad.stderr)["error"]["message"] == "No such option '--bogus'."
    # an option of the group itself, refused before the command is known: JSON too
    afile = tmp_path / "afile"
    afile.write_text("x")
    wrong = invoke("--lake", str(afile), "status", "--json")
    assert (wrong.exit_code, wrong.stdout) == (2, "")
    assert json.loads(wrong.stderr)["error"]["message"] == \
        f"Invalid value for '--lake': Directory '{afile}' is a file."


def test_sql_takes_one_output_format_and_a_query_file(real_lake, tmp_path):
    both = invoke("--lake", str(real_lake), "sql", "SELECT 1", "--json", "--csv")
    assert both.exit_code == 2
    assert "choose one output format, not --json and --csv" in both.output
    query = tmp_path / "q.sql"
    query.write_text("SELECT format, count(*) AS n FROM sessions WHERE format LIKE 'c%' "
                     "GROUP BY ALL ORDER BY 1")
    lake = ["--lake", str(real_lake)]
    assert invoke(*lake, "sql", "-f", str(query), "--ndjson").output == \
        '{"format":"claude_code","n":6}\n{"format":"codex_cli","n":1}\n'
    assert invoke(*lake, "sql", "-f", str(query), "--markdown").output == \
        "| format | n |\n|---|---|\n| claude_code | 6 |\n| codex_cli | 1 |\n"
    assert invoke(*lake, "sql", "-f", "-", "--csv", input="SELECT 'a|b' AS x").output == "x\na|b\n"
    assert invoke(*lake, "sql", "SELECT 'a|b' AS x", "--markdown").output == \
        "| x |\n|---|\n| a\\|b |\n"
    neither = invoke(*lake, "sql")
    assert neither.exit_code == 2
    assert "give the query as QUERY or with -f FILE" in neither.output


def test_sessions_date_all_shows_the_whole_log(real_lake):
    days = json.loads(invoke("--lake", str(real_lake), "sessions", "--json").output)
    day = days["days"][0]["date"]
    log = (real_lake / "summaries" / "sessions" / f"{day}.md").read_text().splitlines()
    result = invoke("--lake", str(real_lake), "sessions", day, "--all")
    assert result.output.splitlines() == log


# -- 6. a config file that holds the defaults -----------------------------------------------
def test_the_example_config_loads_and_its_masking_sweep_is_built_in():
    config = load_config(REPO / "ctxlake.example.toml")
    assert config.sweeps["masking"] == ("observation_masking(window=5)",
                                        "observation_masking(window=10)",
                                        "observation_masking(window=20)")
    assert load_config(None).sweeps["masking"] == config.sweeps["masking"]


def test_the_replay_help_sweep_example_works_on_a_fresh_install(real_lake):
    result = invoke("--lake", str(real_lake), "replay", "--sweep", "masking", "--session",
                    "pvlib", "--json")
    policies = [row["policy"] for row in json.loads(result.output)["summary"]]
    assert policies == ["none", "observation_masking(window=5)",
                        "observation_masking(window=10)", "observation_masking(window=20)"]


def test_the_config_holds_time_zone_archives_and_default_policies(tmp_path, monkeypatch):
    archive = copy_real(tmp_path, CODEX)
    (tmp_path / "ctxlake.toml").write_text(
        f'time_zone = "Asia/Tokyo"\narchives = ["{archive}"]\n'
        f'default_policies = ["microcompact"]\nlake = "{tmp_path / "lake"}"\n')
    monkeypatch.chdir(tmp_path)
    summary = json.loads(invoke("run", "--json").output)
    assert summary["ingest"]["files_new"] == 1
    assert [p["policy"] for p in summary["plans"]] == ["microcompact"]
    status = json.loads(invoke("status", "--json").output)
    assert status["settings"]["time_zone"] == "Asia/Tokyo"
    report = json.loads(invoke("report", "daily", "--json").output)
    assert report["tz"] == "Asia/Tokyo"


def test_config_show_prints_every_setting_and_where_it_came_from(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('time_zone = "Europe/Paris"\n[sweeps]\nmine = ["microcompact"]\n')
    result = invoke("--lake", str(tmp_path / "lake"), "config", "show", "--config", str(config))
    lines = result.output.splitlines()
    assert lines[0] == f"config: {config}"
    assert lines[1] == f"lake in effect: {tmp_path / 'lake'}"
    assert '  time_zone         "Europe/Paris"' in lines
    assert ('  sweeps            {"masking":["observation_masking(window=5)",'
            '"observation_masking(window=10)","observation_masking(window=20)"],'
            '"mine":["microcompact"]}') in lines


def test_a_bad_config_value_names_the_key_and_the_file(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('time_zone = "Mars/Olympus"\n')
    result = invoke("config", "show", "--config", str(config))
    assert result.exit_code == 2
    assert f"{config}: time_zone: unknown time zone 'Mars/Olympus'" in result.output


def test_policies_lists_every_policy_with_its_parameters_and_defaults(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[policies.microcompact]\nkeep_recent = 2\n'
                      '[policies.quick]\npolicy = "observation_masking"\nwindow = 3\n')
    catalog = json.loads(invoke("policies", "--config", str(config), "--json").output)
    from pipeline.policies import REGISTRY
    assert [p["policy"] for p in catalog["builtins"]] == sorted(REGISTRY)
    micro = next(p for p in catalog["builtins"] if p["policy"] == "microcompact")
    keep = next(p for p in micro["params"] if p["name"] == "keep_recent")
    assert keep == {"name": "keep_recent", "type": "integer", "default": 5, "value": 2,
                    "overridden": True}
    assert catalog["named"] == [{"policy": "quick", "kind": "variant", "steps": [
        {"policy": "observation_masking", "params": {"tools": [], "window": 3}}]}]
    text = invoke("policies", "--config", str(config)).output
    assert "keep_recent" in text and "set to 2" in text
    assert "variant quick: observation_masking(window=3, tools=[])" in text


# -- 4. replays do not mix ------------------------------------------------------------------
def test_a_replay_priced_as_another_model_keeps_its_own_labelled_rows(real_lake):
    lake = ["--lake", str(real_lake)]
    first = json.loads(invoke(*lake, "replay", "--policy", "observation_masking(window=4)",
                              "--json").output)
    second = json.loads(invoke(*lake, "replay", "--policy", "observation_masking(window=4)",
                               "--price-as", "qwen/qwen3-coder", "--json").output)
    assert first["settings"] == "price_as=recorded cache_ttl=5"
    assert second["settings"] == "price_as=qwen/qwen3-coder cache_ttl=5"
    assert first["replay_id"] != second["replay_id"]
    rows = invoke(*lake, "sql", "SELECT replay_id, replay_settings, price_as, count(*) AS n "
                  "FROM policy_eval WHERE policy = 'observation_masking(window=4)' "
                  "GROUP BY ALL ORDER BY 2", "--csv").output
    assert rows == (f"replay_id,replay_settings,price_as,n\n"
                    f"{second['replay_id']},price_as=qwen/qwen3-coder cache_ttl=5,qwen/qwen3-coder,12\n"
                    f"{first['replay_id']},price_as=recorded cache_ttl=5,,12\n")
    # the same replay again: the same id, its rows replaced (latest per key), not added
    again = json.loads(invoke(*lake, "replay", "--policy", "observation_masking(window=4)",
                              "--json").output)
    assert again["replay_id"] == first["replay_id"]
    count = invoke(*lake, "sql", "SELECT count(*) AS n FROM policy_eval WHERE policy = "
                   "'observation_masking(window=4)'", "--csv").output
    assert count == "n\n24\n"
    text = invoke(*lake, "replay", "--policy", "observation_masking(window=4)", "--price-as",
                  "qwen/qwen3-coder", "--session", "pvlib").output
    assert "1 sessions replayed (cache TTL 5 min, priced as qwen/qwen3-coder; replay " in text


@pytest.mark.parametrize("ttl", ["inf", "nan", "1e999", "-1", "soon"])
def test_a_cache_ttl_that_is_not_a_number_of_minutes_is_a_usage_error(real_lake, ttl):
    result = CliRunner().invoke(cli, ["--lake", str(real_lake), "replay", "--policy", "payload_prune",
                                      "--cache-ttl", ttl], catch_exceptions=False)
    assert result.exit_code == 2
    assert "Invalid value for --cache-ttl" in result.output


@pytest.mark.parametrize("command", [["ingest"], ["plan", "--policy", "payload_prune"],
                                     ["replay", "--policy", "payload_prune"]])
@pytest.mark.parametrize("workers", ["0", "-3"])
def test_workers_below_one_is_a_usage_error(real_lake, command, workers):
    result = CliRunner().invoke(cli, ["--lake", str(real_lake), *command, "--workers", workers],
                                catch_exceptions=False)
    assert result.exit_code == 2
    assert "Invalid value for '--workers'" in result.output


def test_an_unknown_chart_session_is_a_usage_error_and_report_folders_are_private(real_lake, tmp_path):
    result = CliRunner().invoke(cli, ["--lake", str(real_lake), "replay", "--policy", "payload_prune",
                                      "--report", str(tmp_path / "r"), "--chart-session", "no-such-session"],
                                catch_exceptions=False)
    assert result.exit_code == 2
    assert "no-such-session" in result.output
    assert not (tmp_path / "r").exists()
    old = os.umask(0o022)
    try:
        assert invoke("--lake", str(real_lake), "replay", "--policy", "payload_prune", "--quiet",
                      "--report", str(tmp_path / "a" / "replay")).exit_code == 0
        assert invoke("--lake", str(real_lake), "report", "html", "--quiet",
                      "--out", str(tmp_path / "b" / "html")).exit_code == 0
    finally:
        os.umask(old)
    modes = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777)
             for p in (tmp_path / "a", tmp_path / "a" / "replay", tmp_path / "b", tmp_path / "b" / "html")}
    assert modes == {"a": "0o700", "a/replay": "0o700", "b": "0o700", "b/html": "0o700"}


def test_replay_report_without_the_charts_extra_still_writes_the_report(real_lake, tmp_path,
                                                                         monkeypatch):
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(__import__("sys").modules, module, None)
    out = tmp_path / "replay"
    result = invoke("--lake", str(real_lake), "replay", "--policy", "microcompact",
                    "--session", "pvlib", "--report", str(out))
    assert result.exit_code == 0
    assert ("charts skipped: matplotlib is not installed (pip install 'ctxlake[reports]')"
            in result.output)
    report = (out / "report.md").read_text()
    assert "Charts skipped: matplotlib is not installed (pip install 'ctxlake[reports]')." in report
    assert "- Replay id: `" in report
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]


# -- 7. daily logs a person can follow up on ------------------------------------------------
def test_log_details_adds_a_follow_up_line_with_session_project_cost_and_recovery(tmp_path):
    archive = copy_real(tmp_path, CLAUDE)
    lake = tmp_path / "lake"
    config = tmp_path / "c.toml"
    assert invoke("--lake", str(lake), "run", str(archive), "--tz", "UTC").exit_code == 0
    plain = (lake / "summaries" / "sessions" / "2025-12-09.md").read_text()
    assert "**Session:**" not in plain
    config.write_text("log_details = true\n")
    assert invoke("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--config",
                  str(config)).exit_code == 0
    lines = (lake / "summaries" / "sessions" / "2025-12-09.md").read_text().splitlines()
    recovery = lake / "summaries" / "recovery" / "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9.md"
    assert lines[2:7] == [
        "### 19:48",
        "- **Topic:** add myapp directory and create myapp/hoge.py which shows result of print(1+1).",
        "- **Messages:** 2 user / 6 assistant",
        "- **Est. tokens:** ~122",
        f"- **Session:** `7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9` · /Users/test_user/agent-sample"
        f" · $0.0603 · recovery: {recovery}"]
    assert recovery.is_file()


# -- 8. show SESSION ------------------------------------------------------------------------
def test_show_prints_the_transcript_with_tool_calls_folded_and_evictions_marked(tmp_path):
    archive = copy_real(tmp_path, CLAUDE)
    lake = ["--lake", str(tmp_path / "lake")]
    assert invoke(*lake, "ingest", str(archive)).exit_code == 0
    assert invoke(*lake, "plan", "--policy", "observation_masking(window=2)").exit_code == 0
    lines = invoke(*lake, "show", "7f2abd2d").output.splitlines()
    assert lines[0] == ("session 7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9 (claude_code, "
                        "/Users/test_user/agent-sample, branch claude)")
    assert lines[1].endswith("2 user / 13 assistant messages, 4 tool calls, ~842 tokens; "
                             "1 blocks evicted by a plan")
    assert "[19:47:42] user: add myapp directory and create myapp/hoge.py which shows result " \
           "of print(1+1)." in lines
    assert '[19:47:55] ▸ Bash: {"command":"mkdir -p myapp","description":"Create myapp directory"}' \
        in lines
    assert "[19:48:27] ◂ result error (35 bytes): error: target shim binary not found" in lines
    write_result = lines.index("[19:48:08] ◂ result ok (73 bytes): File created successfully at: "
                               "/Users/test_user/agent-sample/myapp/hoge.py")
    assert lines[write_result + 1] == (
        "    ✂ clear by observation_masking(window=2) (step observation_masking): window: older "
        "than the last 2 turns (turn 5), ~8 tokens")
    data = json.loads(invoke(*lake, "show", "7f2abd2d", "--json").output)
    evicted = [b for b in data["blocks"] if b["evictions"]]
    assert data["evicted"] == 1 and evicted[0]["call_id"] == "toolu_0154S2y9CNPch89dTHGJpmnx"
    assert evicted[0]["evictions"][0]["policy"] == "observation_masking(window=2)"
    assert evicted[0]["source"].endswith("claude_code/claude_session.jsonl:" +
                                         str(evicted[0]["source"].rsplit(":", 1)[1]))
    other = invoke(*lake, "show", "7f2abd2d", "--policy", "microcompact").output
    assert "✂" not in other and "0 blocks evicted by a plan" in other


def test_show_folds_long_tool_calls_unless_full(tmp_path):
    archive = copy_real(tmp_path, CLAUDE)
    lake = ["--lake", str(tmp_path / "lake")]
    assert invoke(*lake, "ingest", str(archive)).exit_code == 0
    folded = invoke(*lake, "show", "7f2abd2d").output
    full = invoke(*lake, "show", "7f2abd2d", "--full").output
    assert ('▸ Bash: {"command":"cd myapp && python3 hoge.py","description":"Change to myapp '
            'directory and run hoge.py w…') in folded
    assert ('▸ Bash: {"command":"cd myapp && python3 hoge.py","description":"Change to myapp '
            'directory and run hoge.py with python3"}') in full


def test_the_html_policies_page_shows_one_replay_settings_not_a_mix(tmp_path):
    from pipeline.reports.html.build import render_html

    archive = copy_real(tmp_path, CLAUDE, CODEX)
    lake = ["--lake", str(tmp_path / "lake")]
    assert invoke(*lake, "ingest", str(archive)).exit_code == 0
    default = json.loads(invoke(*lake, "replay", "--policy", "microcompact", "--json").output)
    invoke(*lake, "replay", "--policy", "microcompact", "--price-as", "qwen/qwen3-coder")
    out = tmp_path / "html"
    render_html(Lake(tmp_path / "lake"), out)
    page = (out / "policies.html").read_text()
    assert "settings <code>price_as=recorded cache_ttl=5</code>" in page
    cost = next(r["cost_usd"] for r in default["summary"] if r["policy"] == "none")
    assert f"{cost:,.4f}" in page
