"""The lake's views (pipeline.core.lake.Lake.connect): the persisted ``ctxlake.duckdb``
attached read-only when its stamp says it is current, else made once per process in memory and
extended, not made again, when a stage adds a derived table."""

from __future__ import annotations

import pyarrow as pa

from pipeline.core import lake as lake_module
from tests.helpers.lake import copy_real, ingest_paths

SAMPLE = "claude_code/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"


def _lake_counting_rebuilds(tmp_path, monkeypatch, *, persisted: bool = False):
    """A lake of one real session and a record of each in-memory build of its views; without
    ``persisted``, the stamp of its ``ctxlake.duckdb`` is removed (the views are made in
    memory)."""
    lake, _ = ingest_paths(tmp_path, copy_real(tmp_path, SAMPLE))
    if not persisted:
        (lake.root / lake_module.VIEWS_STAMP).unlink()
    built = []
    original = lake_module.Lake.create_views

    def create_views(self, con):
        built.append(1)
        original(self, con)

    monkeypatch.setattr(lake_module.Lake, "create_views", create_views)
    with lake.connect() as con:   # the views of this process, made once (or attached)
        sessions = con.execute("SELECT count(*) FROM sessions").fetchone()[0]
    assert built == ([] if persisted else [1])
    return lake, built, sessions


def test_a_new_derived_table_is_added_to_the_views_without_making_them_all_again(
        tmp_path, monkeypatch):
    lake, built, sessions = _lake_counting_rebuilds(tmp_path, monkeypatch)
    lake.write_derived("policy_eval", "all", pa.table({"session_id": ["s1", "s2"]}))
    with lake.connect() as con:
        assert con.execute("SELECT count(*) FROM policy_eval").fetchone() == (2,)
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (sessions,)
    assert built == [1]


def _write_session_flags(lake, values: dict, extra: pa.Field | None = None) -> None:
    """One ``session_flags`` row in its placeholder's columns (plus ``extra``, if given)."""
    with lake.connect() as con:
        schema = con.sql("SELECT * FROM session_flags").to_arrow_table().schema
    if extra is not None:
        schema = schema.append(extra)
    row = {name: None for name in schema.names} | values
    lake.write_derived("session_flags", "all", pa.Table.from_pylist([row], schema=schema))


def test_a_derived_table_replacing_a_placeholder_of_the_same_columns_is_read_by_the_views_above(
        tmp_path, monkeypatch):
    lake, built, sessions = _lake_counting_rebuilds(tmp_path, monkeypatch)
    with lake.connect() as con:
        session_id = con.execute("SELECT min(session_id) FROM sessions").fetchone()[0]
    _write_session_flags(lake, {"session_id": session_id, "ignored": True})
    with lake.connect() as con:
        assert con.execute("SELECT session_id, ignored FROM session_flags").fetchall() == [
            (session_id, True)]
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (sessions,)
    assert built == [1]


def test_a_derived_table_whose_columns_differ_from_its_placeholder_makes_every_view_again(
        tmp_path, monkeypatch):
    lake, built, sessions = _lake_counting_rebuilds(tmp_path, monkeypatch)
    # a column the placeholder lacks
    _write_session_flags(lake, {"session_id": "s1", "reason": "test"}, pa.field("reason", pa.string()))
    with lake.connect() as con:
        assert con.execute("SELECT session_id, reason FROM session_flags").fetchall() == [
            ("s1", "test")]
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (sessions,)
    assert built == [1, 1]


def _every_view(con) -> dict:
    names = [row[0] for row in con.execute(
        "SELECT DISTINCT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()]
    return {name: sorted(map(repr, con.execute(f'SELECT * FROM "{name}"').fetchall()))
            for name in names}


def test_a_current_persisted_file_is_attached_and_answers_as_the_views_made_in_memory(
        tmp_path, monkeypatch):
    lake, built, _ = _lake_counting_rebuilds(tmp_path, monkeypatch, persisted=True)
    with lake.connect() as con:
        attached = _every_view(con)
        catalogs = {row[0] for row in con.execute(
            "SELECT DISTINCT database_name FROM duckdb_views() WHERE view_name = 'sessions'")
            .fetchall()}
    assert built == [] and catalogs == {lake_module.PERSISTED_CATALOG}
    assert {"sessions", "messages", "session_summary", "daily_usage"} <= set(attached)
    lake_module._VIEWS.pop(str(lake.root)).con.close()
    (lake.root / lake_module.VIEWS_STAMP).unlink()
    with lake.connect() as con:
        assert _every_view(con) == attached
    assert built == [1]


def test_a_temp_view_overrides_a_name_the_attached_views_use(tmp_path, monkeypatch):
    lake, built, sessions = _lake_counting_rebuilds(tmp_path, monkeypatch, persisted=True)
    with lake.connect() as con:
        con.execute(f"CREATE TEMP VIEW session_info AS SELECT * FROM "
                    f"{lake_module.PERSISTED_CATALOG}.session_info WHERE false")
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
    with lake.connect() as con:    # another cursor: its own temp views
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (sessions,)
    assert built == []


def test_a_stale_stamp_makes_the_views_in_memory(tmp_path, monkeypatch):
    lake, _ = ingest_paths(tmp_path, copy_real(tmp_path, SAMPLE))
    stamp = lake.root / lake_module.VIEWS_STAMP
    fingerprint, _, version = stamp.read_text().partition("\n")
    assert lake.duckdb_file_current()
    for stale in (f"{'0' * 64}\n{version}", f"{fingerprint}\n0.0.1", ""):
        stamp.write_text(stale)
        assert not lake.duckdb_file_current()
    built = []
    original = lake_module.Lake.create_views
    monkeypatch.setattr(lake_module.Lake, "create_views",
                        lambda self, con: (built.append(1), original(self, con)))
    with lake.connect() as con:
        assert con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = ?",
                           [lake_module.PERSISTED_CATALOG]).fetchone() == (0,)
    assert built == [1]


def test_a_derived_table_appearing_while_the_file_is_attached_is_read_by_the_views_above(
        tmp_path, monkeypatch):
    lake, built, sessions = _lake_counting_rebuilds(tmp_path, monkeypatch, persisted=True)
    with lake.connect() as con:
        session_id = con.execute("SELECT min(session_id) FROM sessions").fetchone()[0]
        assert con.execute("SELECT count(*) FROM sessions WHERE ignored").fetchone() == (0,)
    _write_session_flags(lake, {"session_id": session_id, "ignored": True})
    with lake.connect() as con:   # the file holds the placeholder: the views are made again
        assert con.execute("SELECT session_id FROM sessions WHERE ignored").fetchall() == [
            (session_id,)]
    assert built == [1]
    lake.write_duckdb_file()
    assert lake.duckdb_file_current()


def test_a_first_run_extends_the_file_ingest_wrote_rather_than_writing_it_whole_again(
        tmp_path, monkeypatch):
    # ingest writes ctxlake.duckdb (the views bound once), the stages bind them once more in
    # memory and add each new derived table there; the end of the run extends the file with
    # those tables (it wrote the file whole a second time, binding every view a third time)
    from pipeline.stages.nightly import run_nightly

    built, written = [], []
    original, write = lake_module.Lake.create_views, lake_module.Lake.write_duckdb_file
    monkeypatch.setattr(lake_module.Lake, "create_views",
                        lambda self, con: (built.append(1), original(self, con))[1])
    monkeypatch.setattr(lake_module.Lake, "write_duckdb_file",
                        lambda self: (written.append(1), write(self))[1])
    lake = lake_module.Lake(tmp_path / "lake")
    summary = run_nightly([copy_real(tmp_path, SAMPLE)], lake=lake, workers=1, tz="UTC")
    assert summary.status == "ok" and summary.warnings == []
    assert (built, written) == ([1, 1], [1]) and lake.duckdb_file_current()
    assert {"plans", "session_flags", "usage_call_rows"} <= set(lake._derived_names())
    lake_module._VIEWS.pop(str(lake.root)).con.close()
    with lake.connect() as con:
        extended = _every_view(con)
    # the same answers as a file written whole over the same tables
    lake_module._VIEWS.pop(str(lake.root)).con.close()
    lake.write_duckdb_file()
    with lake.connect() as con:
        assert _every_view(con) == extended
    assert built == [1, 1, 1]


def test_a_file_whose_stamp_lacks_its_tables_is_written_whole_not_extended(tmp_path):
    lake, _ = ingest_paths(tmp_path, copy_real(tmp_path, SAMPLE))
    stamp = lake.root / lake_module.VIEWS_STAMP
    fingerprint, version, _names = stamp.read_text().split("\n")
    lake.write_derived("policy_eval", "all", pa.table({"session_id": ["s1"]}))
    stamp.write_text(f"{fingerprint}\n{version}")     # a stamp of an older version
    assert not lake.extend_duckdb_file()
    stamp.write_text(f"{fingerprint}\n{version}\n[\"policy_eval\"]")   # another fingerprint
    assert not lake.extend_duckdb_file()
    stamp.write_text(f"{fingerprint}\n{version}\n[]")
    assert lake.extend_duckdb_file() and lake.duckdb_file_current()
    with lake.connect() as con:
        assert con.execute("SELECT count(*) FROM policy_eval").fetchone() == (1,)
