"""The lake's views are made once per process and extended, not made again, when a stage
adds a derived table (pipeline.core.lake.Lake.connect)."""

from __future__ import annotations

import pyarrow as pa

from pipeline.core import lake as lake_module
from tests.helpers.lake import copy_real, ingest_paths

SAMPLE = "claude_code/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"


def _lake_counting_rebuilds(tmp_path, monkeypatch):
    lake, _ = ingest_paths(tmp_path, copy_real(tmp_path, SAMPLE))
    built = []
    original = lake_module.Lake.create_views

    def create_views(self, con):
        built.append(1)
        original(self, con)

    monkeypatch.setattr(lake_module.Lake, "create_views", create_views)
    with lake.connect() as con:   # the views of this process, made once
        sessions = con.execute("SELECT count(*) FROM sessions").fetchone()[0]
    assert built == [1]
    return lake, built, sessions


def test_a_new_derived_table_is_added_to_the_views_without_making_them_all_again(
        tmp_path, monkeypatch):
    lake, built, sessions = _lake_counting_rebuilds(tmp_path, monkeypatch)
    lake.write_derived("policy_eval", "all", pa.table({"session_id": ["s1", "s2"]}))
    with lake.connect() as con:
        assert con.execute("SELECT count(*) FROM policy_eval").fetchone() == (2,)
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (sessions,)
    assert built == [1]


def test_a_derived_table_replacing_a_placeholder_of_the_same_columns_is_read_by_the_views_above(
        tmp_path, monkeypatch):
    lake, built, sessions = _lake_counting_rebuilds(tmp_path, monkeypatch)
    with lake.connect() as con:
        schema = con.sql("SELECT * FROM session_flags").to_arrow_table().schema
        session_id = con.execute("SELECT min(session_id) FROM sessions").fetchone()[0]
    row = {name: None for name in schema.names} | {"session_id": session_id, "ignored": True}
    lake.write_derived("session_flags", "all", pa.Table.from_pylist([row], schema=schema))
    with lake.connect() as con:
        assert con.execute("SELECT session_id, ignored FROM session_flags").fetchall() == [
            (session_id, True)]
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (sessions,)
    assert built == [1]


def test_a_derived_table_whose_columns_differ_from_its_placeholder_makes_every_view_again(
        tmp_path, monkeypatch):
    lake, built, sessions = _lake_counting_rebuilds(tmp_path, monkeypatch)
    with lake.connect() as con:
        schema = con.sql("SELECT * FROM session_flags").to_arrow_table().schema
    schema = schema.append(pa.field("reason", pa.string()))   # a column the placeholder lacks
    row = {name: None for name in schema.names} | {"session_id": "s1", "reason": "test"}
    lake.write_derived("session_flags", "all", pa.Table.from_pylist([row], schema=schema))
    with lake.connect() as con:
        assert con.execute("SELECT session_id, reason FROM session_flags").fetchall() == [
            ("s1", "test")]
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (sessions,)
    assert built == [1, 1]
