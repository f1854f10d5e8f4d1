"""Data-rule checks (sql/checks/*.sql): none fires on the real samples, and each one can fire.

Each bad case snapshots a view into a table and replaces the view with a doctored copy on the
same connection (views re-bind by name, so every dependent view and the check see the doctored
rows), then asserts the exact violating rows the check must return.
"""

from __future__ import annotations

import duckdb
import pytest

from pipeline.core import sqlfiles
from pipeline.stages.correlate import correlate
from tests.helpers.lake import REAL, ingest_paths

EXPECTED_CHECKS = {
    "checks/select_duplicate_message_seqs",
    "checks/select_est_tokens_mismatches",
    "checks/select_messages_without_source",
    "checks/select_results_before_calls",
    "checks/select_results_linked_twice",
    "checks/select_session_rows_without_session_info",
    "checks/select_source_accounting_mismatches",
    "checks/select_tool_results_without_call_id",
}


@pytest.fixture(scope="module")
def real_lake(tmp_path_factory):
    """Every real sample ingested and correlated (built once for this module)."""
    tmp_path = tmp_path_factory.mktemp("checks")
    lake, summary = ingest_paths(tmp_path, REAL)
    assert summary.files >= 10 and summary.quarantined == 0
    correlate(lake)
    return lake


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory):
    """A small demo archive (pipeline.demo.archive, 3 MB, fixed seed) ingested and correlated."""
    from pipeline.demo.archive import write_demo_archive

    tmp_path = tmp_path_factory.mktemp("checks-demo")
    write_demo_archive(tmp_path / "demo", size_bytes=3_000_000, seed=11)
    lake, summary = ingest_paths(tmp_path, tmp_path / "demo")
    assert summary.files > 10 and summary.quarantined == 0
    correlate(lake)
    return lake


@pytest.fixture
def con(real_lake):
    connection = real_lake.connect()
    yield connection
    connection.close()


def run_check(con: duckdb.DuckDBPyConnection, name: str) -> list[tuple]:
    return con.execute(sqlfiles.load(name)).fetchall()


def doctor(con: duckdb.DuckDBPyConnection, view: str, select: str) -> None:
    """Replace ``view`` by ``select`` over a snapshot of it named ``<view>_snapshot``, in this
    connection only (temp objects: the lake's views are shared by its connections)."""
    con.execute(f"CREATE TEMP TABLE {view}_snapshot AS SELECT * FROM {view}")
    con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {select}")


def test_every_check_file_is_covered_here():
    assert set(sqlfiles.check_names()) >= EXPECTED_CHECKS
    assert set(sqlfiles.check_names()) - EXPECTED_CHECKS == set(), \
        "a new check needs a bad case in this file"


@pytest.mark.parametrize("name", sorted(EXPECTED_CHECKS))
def test_no_check_fires_on_the_real_samples(con, name):
    assert run_check(con, name) == []


@pytest.mark.parametrize("name", sorted(EXPECTED_CHECKS))
def test_no_check_fires_on_the_demo_archive(demo_lake, name):
    connection = demo_lake.connect()
    try:
        assert run_check(connection, name) == []
        # the demo really exercises the links: paired ids and protected memory reads exist
        paired, protected = connection.execute(
            "SELECT count(*) FILTER (WHERE status = 'paired'), count(*) FILTER (WHERE protected) "
            "FROM tool_links").fetchone()
        assert paired >= 100 and protected >= 1
    finally:
        connection.close()


def test_the_real_lake_is_not_trivially_empty(con):
    counts = con.execute("SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM tool_links "
                         "WHERE status = 'paired'), (SELECT count(*) FROM sources)").fetchone()
    assert counts[0] > 500 and counts[1] > 100 and counts[2] >= 10


def test_a_result_linked_to_two_calls_is_reported(con):
    doctor(con, "tool_links", "SELECT * FROM tool_links_snapshot UNION ALL (SELECT * FROM "
           "tool_links_snapshot WHERE status = 'paired' ORDER BY session_id, call_id LIMIT 1)")
    first = con.execute("SELECT session_id, call_id FROM tool_links_snapshot WHERE status = 'paired' "
                        "ORDER BY session_id, call_id LIMIT 1").fetchone()
    got = run_check(con, "checks/select_results_linked_twice")
    assert [(row[3], row[4], row[5]) for row in got] == [(first[0], first[1], 2)]


def test_a_paired_result_before_its_call_is_reported(con):
    doctor(con, "tool_links", "SELECT * REPLACE (CASE WHEN status = 'paired' THEN result_seq + 1 "
           "ELSE call_seq END AS call_seq) FROM tool_links_snapshot")
    paired = con.execute("SELECT count(*) FROM tool_links_snapshot WHERE status = 'paired'").fetchone()[0]
    got = run_check(con, "checks/select_results_before_calls")
    assert len(got) == paired > 0
    assert all(call_seq == result_seq + 1 for _, _, _, call_seq, result_seq in got)


def test_an_est_tokens_that_disagrees_with_the_formula_is_reported(con):
    # Glob results 'No files found' (claude_code/1af7fc5e...): 14 UTF-16 units, no CJK:
    # ceil(14 / 4) = 4 tokens; doctored to 5
    text = "No files found"
    doctor(con, "messages", f"SELECT * REPLACE (CASE WHEN text = '{text}' THEN 5 ELSE est_tokens "
           "END AS est_tokens) FROM messages_snapshot")
    hits = con.execute("SELECT count(*) FROM messages_snapshot WHERE text = ?", [text]).fetchone()[0]
    got = [row for row in run_check(con, "checks/select_est_tokens_mismatches") if row[0] == "messages"]
    assert hits > 0
    assert [(stored, recomputed) for *_, stored, recomputed in got] == [(5, 4)] * hits


def test_a_source_whose_lines_do_not_add_up_is_reported(con):
    doctor(con, "records", "SELECT * FROM records_snapshot WHERE NOT (line_no = 1 AND source_id = "
           "(SELECT min(source_id) FROM records_snapshot))")
    source = con.execute("SELECT min(source_id) FROM records_snapshot").fetchone()[0]
    got = run_check(con, "checks/select_source_accounting_mismatches")
    assert [(row[0], row[3], row[6]) for row in got] == [
        (source, con.execute("SELECT records FROM sources WHERE source_id = ?", [source]).fetchone()[0],
         con.execute("SELECT records - 1 FROM sources WHERE source_id = ?", [source]).fetchone()[0])]


def test_a_source_line_count_off_by_one_is_reported(con):
    doctor(con, "sources", "SELECT * REPLACE (lines + 1 AS lines) FROM sources_snapshot")
    sources = con.execute("SELECT count(*) FROM sources_snapshot").fetchone()[0]
    assert len(run_check(con, "checks/select_source_accounting_mismatches")) == sources >= 10


def test_a_message_from_an_unknown_source_is_reported(con):
    doctor(con, "messages", "SELECT * REPLACE (CASE WHEN seq = (SELECT min(seq) FROM "
           "messages_snapshot) THEN 'no-such-source' ELSE source_id END AS source_id) "
           "FROM messages_snapshot")
    got = run_check(con, "checks/select_messages_without_source")
    assert [row[0] for row in got] == ["no-such-source"]


def test_a_session_whose_rows_session_info_does_not_name_is_reported(con):
    doctor(con, "tool_calls", "SELECT * REPLACE (CASE WHEN seq = (SELECT min(seq) FROM "
           "tool_calls_snapshot) THEN 'unlisted-session' ELSE session_id END AS session_id) "
           "FROM tool_calls_snapshot")
    source = con.execute("SELECT DISTINCT source_id FROM tool_calls_snapshot WHERE seq = "
                         "(SELECT min(seq) FROM tool_calls_snapshot)").fetchall()
    got = run_check(con, "checks/select_session_rows_without_session_info")
    assert got == [("tool_calls", source_id, "unlisted-session") for (source_id,) in sorted(source)]


def test_a_tool_result_without_call_id_is_reported(con):
    doctor(con, "tool_results", "SELECT * REPLACE (CASE WHEN seq = (SELECT min(seq) FROM "
           "tool_results_snapshot) THEN NULL ELSE call_id END AS call_id) FROM tool_results_snapshot")
    expected = con.execute("SELECT count(*) FROM tool_results_snapshot WHERE seq = "
                           "(SELECT min(seq) FROM tool_results_snapshot)").fetchone()[0]
    got = run_check(con, "checks/select_tool_results_without_call_id")
    assert len(got) == expected >= 1 and all(row[-1] is None for row in got)


def test_a_duplicate_message_seq_in_a_session_is_reported(con):
    doctor(con, "messages", "SELECT * FROM messages_snapshot UNION ALL (SELECT * FROM "
           "messages_snapshot ORDER BY session_id, seq LIMIT 1)")
    first = con.execute("SELECT session_id, seq FROM messages_snapshot ORDER BY session_id, seq "
                        "LIMIT 1").fetchone()
    got = run_check(con, "checks/select_duplicate_message_seqs")
    assert [(row[0], row[1], row[2]) for row in got] == [(first[0], first[1], 2)]
