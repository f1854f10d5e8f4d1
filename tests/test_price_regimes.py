"""One price matcher: the ``price_regimes`` macro picks a call's conditional price for the
usage reports' ``usage_calls`` view and for replay's ``PriceBook``.

DeepSeek's genai-prices entry has two regimes: the base price (priority 0) and a price for
00:30-16:30 UTC (priority 1, the last active one wins inside that window).
"""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb
import pyarrow as pa
import pytest

from pipeline.core import sqlfiles
from pipeline.reports.prices import model_price_table
from pipeline.stages.replay import PriceBook, TokenPrices

TIMES = {"off_window": "2026-01-04T00:20:00", "in_window": "2026-01-04T09:00:00",
         "window_end": "2026-01-04T16:30:00"}


def _us(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1_000_000)


def _regimes(calls: list[tuple[str, str | None]]) -> dict[int, int]:
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(sqlfiles.load("create_macro_price_regimes"))
        con.register("replay_prices", model_price_table({m for m, _ in calls}))
        con.register("replay_calls", pa.table({
            "call_no": pa.array(range(len(calls)), pa.int64()),
            "model": [m for m, _ in calls],
            "timestamp": pa.array([None if t is None else _us(t) for _, t in calls],
                                  pa.timestamp("us", tz="UTC"))}))
        return dict(con.execute(sqlfiles.load("select_replay_price_regimes")).fetchall())
    finally:
        con.close()


def test_the_macro_picks_the_last_active_conditional_price_by_utc_time():
    calls = [("deepseek-chat", TIMES["off_window"]), ("deepseek-chat", TIMES["in_window"]),
             ("deepseek-chat", TIMES["window_end"]), ("deepseek-chat", None),
             ("gpt-4o", TIMES["in_window"]), ("acme-internal-coder", TIMES["in_window"])]
    # an unpriced model keeps its one (NULL-priced) base row: its cost stays NULL downstream
    assert _regimes(calls) == {0: 0, 1: 1, 2: 0, 3: 0, 4: 0, 5: 0}


def _tier(model: str, priority: int) -> TokenPrices:
    row = next(r for r in model_price_table([model]).to_pylist()
               if r["priority"] == priority and r["input_above"] == -1)
    return TokenPrices(float(row["request_usd"]), float(row["input_usd_per_mtok"]) / 1e6,
                       float(row["cache_write_usd_per_mtok"]) / 1e6,
                       float(row["cache_read_usd_per_mtok"]) / 1e6,
                       float(row["output_usd_per_mtok"]) / 1e6)


def test_replay_prices_a_turn_at_the_regime_the_usage_reports_pick(monkeypatch):
    book = PriceBook()
    turns = [("deepseek-chat", _us(TIMES["off_window"])), ("deepseek-chat", _us(TIMES["in_window"])),
             ("deepseek-chat", None)]
    book.prepare(turns)          # one query for the session's turns

    def no_more_queries(*args, **kwargs):
        raise AssertionError("a prepared turn was matched again")
    monkeypatch.setattr(duckdb, "connect", no_more_queries)
    assert [book(model, 1000, ts) for model, ts in turns] == \
        [_tier("deepseek-chat", 0), _tier("deepseek-chat", 1), _tier("deepseek-chat", 0)]
    assert _tier("deepseek-chat", 0) != _tier("deepseek-chat", 1)


def test_a_turn_not_prepared_is_matched_on_demand_by_the_same_macro():
    book = PriceBook("deepseek-chat")
    assert book("anything", 1000, _us(TIMES["in_window"])) == _tier("deepseek-chat", 1)
    assert book(None, 1000, _us(TIMES["off_window"])) == _tier("deepseek-chat", 0)


@pytest.mark.parametrize("model", ["claude-sonnet-4-5-20250929", "gpt-4o"])
def test_a_model_with_one_regime_needs_no_query(model, monkeypatch):
    def no_query(*args, **kwargs):
        raise AssertionError("queried for a model with one regime")
    book = PriceBook()
    monkeypatch.setattr(duckdb, "connect", no_query)
    book.prepare([(model, _us(TIMES["in_window"]))])
    assert book(model, 1000, _us(TIMES["in_window"])) == _tier(model, 0)
