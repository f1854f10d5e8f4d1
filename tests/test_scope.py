"""Scoped cursors (pipeline.core.scope): a few sessions' queries read only their files and give
the rows the whole lake gives."""

from __future__ import annotations

import shutil

import pytest

from pipeline.core import sqlfiles
from pipeline.core.lake import Lake
from pipeline.core.scope import family_sources
from pipeline.stages.correlate import CANDIDATE_PATTERN
from pipeline.stages.ingest import ingest
from pipeline.stages.nightly import run_nightly
from pipeline.formats.base import COMMAND_WRAPPER
from tests.helpers.lake import REAL

# the per-session queries the nightly stages run on a scoped cursor, with their parameters
# (``ids``: the session and, for the family queries, its sub-agents)
QUERIES = {
    "select_session_first_prompts": lambda ids: {"session_ids": ids},
    "select_session_log_rows": lambda ids: {"sessions": ids},
    "select_session_log_costs": lambda ids: {"sessions": ids},
    "select_tool_link_statuses": lambda ids: {"session_ids": ids},
    "select_usage_call_rows_of_sessions": lambda ids: {"sessions": ids},
    "select_recovery_sessions": lambda ids: {"sessions": ids},
    "select_recovery_tool_events": lambda ids: {"sessions": ids},
    "select_recovery_messages": lambda ids: {"sessions": ids},
    "select_recovery_evidence_bytes": lambda ids: {"sessions": ids},
    "select_session_topic_texts": lambda ids: {"sessions": ids, "limit": 5,
                                               "command_pattern": COMMAND_WRAPPER.pattern},
    "select_plan_sessions": lambda ids: {"session_id": None, "since": None, "session_ids": ids},
    "select_session_messages": lambda ids: {"session_ids": ids},
    "select_session_tool_calls": lambda ids: {"session_ids": ids},
    "select_session_tool_results": lambda ids: {"session_ids": ids},
    "select_session_read_paths": lambda ids: {"session_ids": ids},
    "select_tool_call_inputs": lambda ids: {"session_ids": ids, "pattern": CANDIDATE_PATTERN},
}


def _calibration_calls(con, ids: list[str]) -> list[tuple]:
    con.execute(sqlfiles.load("create_table_calibration_rows"), {"session_ids": ids})
    return con.execute(sqlfiles.load("select_calibration_calls")).fetchall()


def _scoped_tables(con) -> set[str]:
    return {row[0] for row in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal").fetchall()}


@pytest.fixture(scope="module")
def many_part_lake(tmp_path_factory):
    """Every real sample, one more file a night (one part file per source and table, as a lake
    built over many nights has), then one nightly run for the derived tables."""
    root = tmp_path_factory.mktemp("scope")
    archive = root / "archive"
    lake = Lake(root / "lake")
    for path in sorted(p for p in REAL.rglob("*") if p.is_file() and p.suffix != ".md"):
        target = archive / path.relative_to(REAL)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        ingest([archive], lake=lake, workers=1)
    run_nightly([archive], lake=lake, tz="UTC")
    return lake


def test_every_real_session_reads_the_same_rows_through_a_cursor_scoped_to_it(many_part_lake):
    lake = many_part_lake
    with lake.connect() as con:
        links = con.execute(sqlfiles.load("select_session_source_links")).fetchall()
        families = {row[0]: [row[0]] for row in links}
        for session_id, parent, _source in links:
            if parent in families and session_id not in families[parent]:
                families[parent].append(session_id)
        sources = {row[0] for row in con.execute("SELECT source_id FROM sources").fetchall()}
    assert len(families) >= 10 and len(sources) >= 10
    compared = 0
    for session_id, ids in sorted(families.items()):
        ids = sorted(ids)
        # scoped to the session alone, as a stage scopes to the sessions it owes: its family
        # (sub-agents, parent) comes with it
        with lake.connect() as whole, lake.connect(scope=[session_id]) as scoped:
            # the scope holds a few of the lake's sources, so its part tables are temp views
            assert len(family_sources(links, ids)) < len(sources) / 2
            assert {"_messages_current", "tool_calls", "session_info"} <= _scoped_tables(scoped)
            for name, params in QUERIES.items():
                expected = whole.execute(sqlfiles.load(name), params(ids)).fetchall()
                assert scoped.execute(sqlfiles.load(name), params(ids)).fetchall() == expected, \
                    (name, session_id)
            assert _calibration_calls(scoped, ids) == _calibration_calls(whole, ids), session_id
            compared += 1
    assert compared == len(families)


def test_a_scope_of_most_sources_keeps_the_lake_wide_views(many_part_lake):
    with many_part_lake.connect() as con:
        every = [row[0] for row in con.execute(
            "SELECT DISTINCT session_id FROM session_info WHERE session_id IS NOT NULL").fetchall()]
    with many_part_lake.connect(scope=every) as scoped:
        assert _scoped_tables(scoped) == set()


def test_a_family_is_every_session_joined_by_parent_links_with_their_sources():
    links = [("root", None, "s1"), ("agent-a", "root", "s2"), ("agent-b", "root", "s3"),
             ("nested", "agent-b", "s4"), ("other", None, "s5"), ("root", None, "s6")]
    assert family_sources(links, ["nested"]) == {"s1", "s2", "s3", "s4", "s6"}
    assert family_sources(links, ["other"]) == {"s5"}
    assert family_sources(links, ["unknown"]) == set()


def test_a_scoped_view_shows_no_row_of_an_uncommitted_part_or_a_superseded_generation(
        many_part_lake, tmp_path, monkeypatch):
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipeline.core import scope

    lake = Lake(tmp_path / "lake")
    shutil.copytree(many_part_lake.root, lake.root)
    with lake.connect() as con:
        session_id, source_id = con.execute(
            "SELECT session_id, min(source_id) FROM session_info WHERE parent_session_id IS NULL "
            "AND session_id IS NOT NULL GROUP BY session_id ORDER BY session_id LIMIT 1").fetchone()
    # two more parts of the messages table holding that source's rows, which the lake-wide
    # view never shows: one of a run that never committed, one of an older generation
    folder = lake.table_dir("messages")
    held = next(path for path in sorted(folder.glob("*.parquet")) if not path.name.startswith("_")
                and source_id in pq.read_table(path, columns=["source_id"]).column(0).to_pylist())
    rows = pq.read_table(held)
    rows = rows.filter(pc.equal(rows.column("source_id"), source_id))
    pq.write_table(rows, folder / "never0committed-0-0.parquet")
    older = rows.set_column(rows.schema.get_field_index("generation"), "generation",
                            pc.subtract(rows.column("generation"), 1).cast(rows.schema.field("generation").type))
    pq.write_table(older, folder / f"{held.name.split('-', 1)[0]}-99-99.parquet")
    # the files found by reading the tables' source ids (a lake made before `parts` was kept),
    # so that the scoped view lists both
    monkeypatch.setattr(scope, "_listed_parts", lambda *args: None)
    query = "SELECT count(*), count(DISTINCT seq) FROM messages WHERE session_id = $s"
    with lake.connect() as whole, lake.connect(scope=[session_id]) as scoped:
        plans = [plan for (state, wanted), plan in scope._PLANS.items() if session_id in wanted]
        assert {"never0committed-0-0.parquet", f"{held.name.split('-', 1)[0]}-99-99.parquet"} \
            <= {path.rsplit("/", 1)[-1] for path in plans[-1]["messages"]}
        counted = whole.execute(query, {"s": session_id}).fetchone()
        assert counted[0] == counted[1] > 0
        assert scoped.execute(query, {"s": session_id}).fetchone() == counted
        for name in ("select_session_messages", "select_recovery_messages"):
            params = QUERIES[name]([session_id])
            assert scoped.execute(sqlfiles.load(name), params).fetchall() == \
                whole.execute(sqlfiles.load(name), params).fetchall()
