"""The public Python API (pipeline.api, docs/api.md): polars frames over the lake's views."""

from __future__ import annotations

import os

import polars as pl
import pytest

from pipeline import open_lake
from pipeline.core.errors import LakeNotFoundError, UsageError
from tests.helpers.lake import copy_real, ingest_paths, rows

SAMPLES = ("claude_code/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl", "codex/codex_session.jsonl")


@pytest.fixture
def lake(tmp_path):
    archive = copy_real(tmp_path, *SAMPLES)
    lake, _ = ingest_paths(tmp_path, archive)
    return lake


def test_scan_messages_is_a_lazy_frame_with_the_rows_of_the_messages_view(lake):
    frame = open_lake(lake.root).scan("messages")
    assert isinstance(frame, pl.LazyFrame)
    users = (frame.filter(pl.col("role") == "user").group_by("session_id").agg(pl.len().alias("n"))
             .sort("session_id").collect())
    expected = rows(lake, "SELECT session_id, count(*) FROM messages WHERE role = 'user' "
                          "GROUP BY ALL ORDER BY 1")
    assert [tuple(r) for r in users.iter_rows()] == expected
    assert len(expected) >= 2


def test_two_scans_collect_in_any_order_and_join(lake):
    api = open_lake(lake.root)
    messages, sessions = api.scan("messages"), api.scan("sessions")
    per_format = (messages.join(sessions.select("session_id", "format"), on="session_id")
                  .group_by("format").agg(pl.len().alias("n")).sort("format").collect())
    assert sessions.select(pl.len()).collect().item() == rows(lake, "SELECT count(*) FROM sessions")[0][0]
    assert [tuple(r) for r in per_format.iter_rows()] == rows(
        lake, "SELECT s.format, count(*) FROM messages m JOIN sessions s USING (session_id) GROUP BY ALL ORDER BY 1")


def test_read_helpers_are_eager_data_frames_equal_to_the_views(lake):
    api = open_lake(lake.root)
    sessions = api.read_sessions()
    assert isinstance(sessions, pl.DataFrame)
    assert sorted(sessions["session_id"].to_list()) == [r[0] for r in rows(lake, "SELECT session_id FROM sessions ORDER BY 1")]
    assert api.read_tool_calls().height == rows(lake, "SELECT count(*) FROM tool_calls")[0][0]
    assert api.read_messages().height == rows(lake, "SELECT count(*) FROM messages")[0][0]


def test_sql_binds_values_as_parameters(lake):
    api = open_lake(lake.root)
    out = api.sql("SELECT count(*) AS n FROM messages WHERE role = $role", role="assistant")
    assert out["n"].item() == rows(lake, "SELECT count(*) FROM messages WHERE role = 'assistant'")[0][0]


def test_a_scan_never_sees_the_parts_of_an_uncommitted_run(lake):
    before = open_lake(lake.root).scan("messages").select(pl.len()).collect().item()
    part = sorted(lake.table_dir("messages").glob("2*.parquet"))[0]
    # a run that wrote its parts and was killed before committing: same rows, another run id
    ghost = part.with_name("29991231T000000000000" + part.name[len(part.name.split("-")[0]):])
    ghost.write_bytes(part.read_bytes())
    assert open_lake(lake.root).scan("messages").select(pl.len()).collect().item() == before
    os.unlink(ghost)


def test_an_unknown_table_is_a_usage_error_naming_the_tables(lake):
    with pytest.raises(UsageError) as caught:
        open_lake(lake.root).scan("mesages")
    assert "mesages" in caught.value.message and "messages" in caught.value.hint


def test_open_lake_where_there_is_none_says_so(tmp_path):
    with pytest.raises(LakeNotFoundError):
        open_lake(tmp_path / "nothing")


def test_tables_lists_the_views_a_scan_accepts(lake):
    names = open_lake(lake.root).tables()
    assert {"messages", "sessions", "tool_calls", "tool_results", "sources", "runs"} <= set(names)
    assert not [n for n in names if n.startswith("_")]
