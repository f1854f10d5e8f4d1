"""The stage runner's ledger writes: a short stage's committed batch is written with its
marker, once; a stage that has run a while writes its batch at once; a stage that fails
after a commit keeps what it committed."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core import ledger as ledgers
from pipeline.core.lake import Lake
from pipeline.core.ledger import LEDGER, ItemResult, Ledger, Runner, Stage


def _rows_on_disk(lake: Lake, stage: str) -> dict[str, str]:
    path = Ledger(lake).path(stage)
    if not path.exists():
        return {}
    table = pq.read_table(path)
    return dict(zip(table.column("item").to_pylist(), table.column("status").to_pylist()))


def _stage(lake: Lake, seen: list, *, fail: bool = False) -> Stage:
    """A stage of two items that commits both at once, then notes what its file holds."""
    def work(owed, commit):
        commit({item: ItemResult("done") for item in owed.todo})
        seen.append(_rows_on_disk(lake, "toy"))
        if fail:
            raise RuntimeError("broke after its commit")
    return Stage("toy", {"v": 1}, lambda: {"a": "fp-a", "b": "fp-b"}, work)


@pytest.fixture
def lake(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.root.mkdir()
    return lake


def test_a_short_stage_writes_its_committed_rows_once_with_its_marker(lake):
    seen: list = []
    report = Runner(lake, "run-1").run(_stage(lake, seen))
    assert report.status == "ok" and report.done == 2
    assert seen == [{}]            # nothing written at the commit
    assert _rows_on_disk(lake, "toy") == {"": "done", "a": "done", "b": "done"}


def test_a_stage_that_has_run_a_while_writes_its_batch_at_once(lake, monkeypatch):
    monkeypatch.setattr(ledgers, "COMMIT_WRITE_AFTER_S", 0.0)
    seen: list = []
    Runner(lake, "run-1").run(_stage(lake, seen))
    assert seen == [{"a": "done", "b": "done"}]      # the batch, no marker yet
    assert _rows_on_disk(lake, "toy") == {"": "done", "a": "done", "b": "done"}


def test_a_stage_failing_after_its_commit_keeps_the_rows_it_committed_without_a_marker(lake):
    seen: list = []
    report = Runner(lake, "run-1").run(_stage(lake, seen, fail=True))
    assert report.status == "failed" and "broke after its commit" in report.error
    assert seen == [{}]
    assert _rows_on_disk(lake, "toy") == {"a": "done", "b": "done"}


def _row(item: str, status: str = "done", detail: str | None = None) -> dict:
    return {"stage": "toy", "item": item, "input_fp": f"in-{item}", "settings_fp": "s",
            "run_id": "run-1", "status": status, "detail": detail}


def test_writing_the_changes_over_a_file_gives_the_bytes_of_writing_every_row(lake):
    ledger = Ledger(lake)
    before = {item: _row(item, detail='{"output": "x"}' if item == "b" else None)
              for item in ("", "a", "b", "c", "d")}
    ledger.write("toy", before)
    base = ledger.file("toy")
    changed = {"c": _row("c", "failed"), "e": _row("e"), "": _row("")}
    ledger.write_changes("toy", base, changed, dropped={"a"})
    merged = ledger.path("toy").read_bytes()
    ledger.write("toy", {**{k: v for k, v in before.items() if k != "a"}, **changed})
    assert ledger.path("toy").read_bytes() == merged
    assert _rows_on_disk(lake, "toy") == {"": "done", "b": "done", "c": "failed", "d": "done",
                                          "e": "done"}


def test_recorded_rows_are_read_one_at_a_time_without_the_marker(lake):
    from pipeline.core.ledger import RecordedRows

    ledger = Ledger(lake)
    ledger.write("toy", {item: _row(item) for item in ("", "a", "b")})
    recorded = RecordedRows(ledger.file("toy"))
    assert list(recorded) == ["a", "b"] and len(recorded) == 2
    assert recorded["b"] == _row("b") and recorded.get("") is None and "" not in recorded
    assert ledger.keys("toy")["a"] == ("in-a", "s", "done")


def test_a_ledger_file_without_a_column_a_later_version_added_is_written_with_it_null(lake):
    ledger = Ledger(lake)
    older = pa.table({"stage": ["toy", "toy"], "item": ["a", "b"], "input_fp": ["fp-a", "old"],
                      "settings_fp": [Stage("toy", {"v": 1}, dict, None).settings_fp] * 2,
                      "run_id": ["run-0", "run-0"], "status": ["done", "done"]})
    ledger.root.mkdir()
    pq.write_table(older, ledger.path("toy"))
    report = Runner(lake, "run-1").run(_stage(lake, []))
    assert (report.status, report.done, report.skipped) == ("ok", 1, 1)     # b changed
    table = pq.read_table(ledger.path("toy"))
    assert table.column_names == LEDGER.names
    assert dict(zip(table.column("item").to_pylist(), table.column("detail").to_pylist())) \
        == {"": None, "a": None, "b": None}
    assert table.column("run_id").to_pylist() == ["run-1", "run-0", "run-1"]
