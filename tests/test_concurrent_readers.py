"""A command that only reads the lake while a run changes it: DuckDB lists a table's parts,
then opens them; a run that deleted or replaced one in between makes the query fail (a file
gone, or "TProtocolException: Invalid data" for a derived part replaced between its footer
and its pages). The command then starts again (pipeline.cli.main.READING_COMMANDS), and only
when the lake's files did change since it began reading."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.lake import Lake
from pipeline.reports import query as query_module
from pipeline.stages import usage as usage_module
from tests.helpers.lake import copy_real, ingest_paths

SAMPLE = "claude_code/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
QUERY = "SELECT count(*) AS n FROM messages"


def _failing_once(original, lake: Lake, calls: list, *, change: bool):
    """``original``, whose first call meets a part gone under it: a run wrote a derived
    table meanwhile (``change``), or nothing changed (a part damaged for good)."""
    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            original(*args, **kwargs)          # it did read the lake (its layout noted)
            if change:
                lake.write_derived("policy_eval", "all", pa.table({"session_id": ["s"]}))
            raise duckdb.IOException(f'IO Error: Cannot open file "{lake.root}/tables/'
                                     'messages/x.parquet": No such file or directory')
        return original(*args, **kwargs)
    return wrapper


@pytest.fixture()
def lake(tmp_path):
    lake, _ = ingest_paths(tmp_path, copy_real(tmp_path, SAMPLE))
    return lake


def _sql(lake: Lake):
    return CliRunner().invoke(cli, ["--lake", str(lake.root), "sql", QUERY, "--json"],
                              catch_exceptions=False)


def test_a_query_that_fails_on_a_part_a_run_changed_meanwhile_is_run_again_and_answers(
        lake, monkeypatch):
    expected = json.loads(_sql(lake).output)
    calls: list = []
    monkeypatch.setattr(query_module, "run_query",
                        _failing_once(query_module.run_query, lake, calls, change=True))
    result = _sql(lake)
    assert (result.exit_code, json.loads(result.output), len(calls)) == (0, expected, 2)


def test_a_query_that_fails_on_a_part_while_nothing_changed_reports_the_error_once(
        lake, monkeypatch):
    calls: list = []
    monkeypatch.setattr(query_module, "run_query",
                        _failing_once(query_module.run_query, lake, calls, change=False))
    with pytest.raises(duckdb.IOException, match="Cannot open file"):
        _sql(lake)
    assert len(calls) == 1


def test_a_report_handed_the_lake_folder_is_run_again_too(lake, monkeypatch):
    args = ["--lake", str(lake.root), "report", "daily", "--json", "--tz", "UTC"]
    expected = json.loads(CliRunner().invoke(cli, args, catch_exceptions=False).output)
    calls: list = []
    monkeypatch.setattr(usage_module, "usage_report",
                        _failing_once(usage_module.usage_report, lake, calls, change=True))
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert (result.exit_code, json.loads(result.output), len(calls)) == (0, expected, 2)


def test_a_command_that_writes_the_lake_is_never_started_again(lake, monkeypatch):
    from pipeline.stages import correlate as correlate_module

    calls: list = []
    monkeypatch.setattr(correlate_module, "correlate",
                        _failing_once(correlate_module.correlate, lake, calls, change=True))
    with pytest.raises(duckdb.IOException):
        CliRunner().invoke(cli, ["--lake", str(lake.root), "correlate"], catch_exceptions=False)
    assert len(calls) == 1
