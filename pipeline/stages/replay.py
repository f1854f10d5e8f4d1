"""The replay stage: run each session under several policies and compare them side by side.

``replay(lake, policies=[...])`` plans every session under each policy with plan's session
engine, walks its assistant turns and measures what each API call would have been sent
(tokens, cache-aware cost, at-risk evictions, protected violations); rows go to
``policy_eval`` and ``replay_turns``. The time model and every figure: docs/replay.md.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.core import sqlfiles
from pipeline.core.config import Config, ResolvedPolicy, load_config
from pipeline.core.errors import UsageError
from pipeline.core.lake import Lake, new_connection, holds_lake_lock
from pipeline.policies.base import SessionInput
from pipeline.policies.tail_protect import prior_for as tail_prior_for

if TYPE_CHECKING:
    from pipeline.reports.replay_report import ReportFiles

__all__ = ["BASELINE", "DEFAULT_CACHE_TTL_MINUTES", "POLICY_EVAL", "REPLAY_TURNS", "PriceBook",
           "ReplayResult", "SessionFacts", "SessionReplay", "TokenPrices", "evaluate_evictions",
           "replay", "replay_session", "summary_rows"]

BASELINE = "none"
DEFAULT_CACHE_TTL_MINUTES = 5.0
HEURISTIC = "est_tokens (heuristic)"
CALIBRATED = "est_tokens_calibrated (token_calibration, no anchor)"
_TURN_KINDS = ("text", "thinking", "tool_use")
_INF = 1 << 62

# what tells one replay's rows from another's: its id and its settings (with the policy and
# config hash, the key rows are kept by; see replay())
REPLAY_STAMP = [
    ("replay_id", pa.string()),
    ("replay_settings", pa.string()),       # replay_settings(): "price_as=... cache_ttl=..."
    ("price_as", pa.string()),              # --price-as model, NULL: each call's recorded model
]

POLICY_EVAL = pa.schema([
    ("policy", pa.string()),
    ("config_hash", pa.string()),
    ("session_id", pa.string()),
    ("format", pa.string()),
    ("model", pa.string()),                 # the session's model (or the price_model used)
    ("turns", pa.int64()),
    ("total_input_tokens", pa.int64()),     # context summed over turns
    ("peak_context_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("baseline_input_tokens", pa.int64()),  # total_input_tokens under none
    ("tokens_saved", pa.int64()),
    ("tokens_saved_pct", pa.float64()),
    ("cache_read_tokens", pa.int64()),
    ("cache_write_tokens", pa.int64()),
    ("cache_ttl_minutes", pa.float64()),
    ("cost_usd", pa.float64()),             # with prompt caching; NULL when a turn is unpriced
    ("cost_uncached_usd", pa.float64()),
    ("baseline_cost_usd", pa.float64()),
    ("baseline_cost_uncached_usd", pa.float64()),
    ("cost_saved_usd", pa.float64()),
    ("cost_saved_pct", pa.float64()),
    ("unpriced_turns", pa.int64()),
    ("plans", pa.int64()),
    ("evictions", pa.int64()),
    ("evicted_tokens", pa.int64()),         # sum of tokens_before - tokens_after
    ("at_risk_evictions", pa.int64()),      # proxy for regret (see the module docstring)
    ("protected_violations", pa.int64()),   # must be 0
    ("violations_json", pa.string()),       # {"rule": count} when > 0
    ("usage_scope", pa.string()),           # call | run | NULL (no recorded usage)
    ("usage_turns", pa.int64()),
    ("recorded_input_tokens", pa.int64()),
    ("estimated_input_tokens", pa.int64()),  # by ``estimator``, over the same turns
    ("estimate_error_pct", pa.float64()),
    ("heuristic_error_pct", pa.float64()),
    ("estimator", pa.string()),
    ("price_source", pa.string()),
    *REPLAY_STAMP,
])

# the per-turn columns the replay computes (REPLAY_TURNS adds the stamp)
_TURN_ROWS = pa.schema([
    ("policy", pa.string()),
    ("config_hash", pa.string()),
    ("session_id", pa.string()),
    ("turn", pa.int32()),                   # 0-based
    ("seq", pa.int64()),                    # the turn's first row
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("model", pa.string()),
    ("context_tokens", pa.int64()),
    ("cache_read_tokens", pa.int64()),
    ("cache_write_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("evictions", pa.int64()),              # evictions taking effect at this turn
    ("cost_usd", pa.float64()),
])
REPLAY_TURNS = pa.schema([*_TURN_ROWS, *REPLAY_STAMP])


def replay_settings(price_model: str | None, cache_ttl_minutes: float | None) -> str:
    """The settings a replay's figures depend on besides the policy, as one text:
    ``price_as=recorded cache_ttl=5`` (the key, with the policy, its rows are kept by)."""
    ttl = "off" if cache_ttl_minutes is None else f"{cache_ttl_minutes:g}"
    return f"price_as={price_model or 'recorded'} cache_ttl={ttl}"


def replay_id_of(resolved: Sequence[ResolvedPolicy], settings: str, session_id: str | None,
                 since: Any) -> str:
    """A replay's id: a hash of what it was asked (policies and their config hashes,
    settings, session filter), so the same replay writes the same bytes."""
    payload = {"policies": [[p.name, p.config_hash] for p in resolved], "settings": settings,
               "session_id": session_id, "since": None if since is None else str(since)}
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def _stamp(table: pa.Table, schema: pa.Schema, replay_id: str, settings: str,
           price_model: str | None) -> pa.Table:
    n = table.num_rows
    values = {"replay_id": replay_id, "replay_settings": settings, "price_as": price_model}
    columns = [table.column(f.name) if f.name in table.column_names and f.name not in values
               else pa.array([values[f.name]] * n, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


# ---------------------------------------------------------------------------------------
# Prices
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenPrices:
    """USD per token (and per request) for one model at one tier."""

    request: float
    input: float
    cache_write: float
    cache_read: float
    output: float


# (model, the call's total input tokens, its time in microseconds since the epoch or None)
PriceLookup = Callable[[str | None, int, int | None], "TokenPrices | None"]


class PriceBook:
    """Per-token prices from :func:`pipeline.reports.prices.model_price_table` (genai-prices):
    the regime (conditional price) of a call matched by the usage reports' own rule, the
    ``price_regimes`` macro (``sql/create_macro_price_regimes.sql``), then the tier of that
    regime holding the call's total input.

    ``price_model``: price every call as this model instead of the recorded one.
    """

    def __init__(self, price_model: str | None = None):
        from pipeline.reports.prices import PRICE_SOURCE, resolve_model

        if price_model is not None and resolve_model(price_model) is None:
            raise UsageError(f"no price known for the model '{price_model}'",
                             hint="use a model name genai-prices knows, e.g. "
                                  "claude-sonnet-4-5 or qwen3-coder-480b-a35b-instruct")
        self.price_model = price_model
        self.source = PRICE_SOURCE
        self._rows: dict[str, list[tuple]] = {}
        self._tables: dict[str, pa.Table] = {}
        self._regimes: dict[tuple[str, int | None], int | None] = {}
        self._cons: dict[int, Any] = {}     # per process id: its DuckDB connection

    def _model_rows(self, model: str) -> list[tuple]:
        """(priority, input above, input up to, prices) of each priced tier of ``model``."""
        rows = self._rows.get(model)
        if rows is None:
            from pipeline.reports.prices import model_price_table

            table = model_price_table([model])
            rows = []
            for r in table.to_pylist():
                if r["input_usd_per_mtok"] is None:
                    continue
                prices = TokenPrices(*(float(r[k] or 0) / (1 if k == "request_usd" else 1e6)
                                       for k in ("request_usd", "input_usd_per_mtok",
                                                 "cache_write_usd_per_mtok",
                                                 "cache_read_usd_per_mtok",
                                                 "output_usd_per_mtok")))
                rows.append((r["priority"], r["input_above"], r["input_upto"], prices))
            self._rows[model] = rows
            self._tables[model] = table.filter(pc.is_valid(table.column("input_usd_per_mtok")))
        return rows

    def prepare(self, calls: Iterable[tuple[str | None, int | None]]) -> None:
        """Match the regimes of these (recorded model, time in µs) calls in one query (only
        models with conditional prices need one)."""
        wanted = []
        for model, ts_us in calls:
            model = self.price_model or model
            if model and (model, ts_us) not in self._regimes \
                    and len({row[0] for row in self._model_rows(model)}) > 1:
                wanted.append((model, ts_us))
        wanted = sorted(set(wanted), key=lambda c: (c[0], -1 if c[1] is None else c[1]))
        if not wanted:
            return
        calls_table = pa.table({
            "call_no": pa.array(range(len(wanted)), pa.int64()),
            "model": pa.array([m for m, _ in wanted], pa.string()),
            "timestamp": pa.array([t for _, t in wanted], pa.timestamp("us", tz="UTC"))})
        prices_table = pa.concat_tables([self._tables[m] for m in sorted({m for m, _ in wanted})])
        con = self._connection()
        con.register("replay_calls", calls_table)
        con.register("replay_prices", prices_table)
        try:
            found = dict(con.execute(sqlfiles.load("select_replay_price_regimes")).fetchall())
        finally:
            con.unregister("replay_calls")
            con.unregister("replay_prices")
        for call_no, call in enumerate(wanted):
            self._regimes[call] = found.get(call_no)

    def _connection(self):
        """This process's in-memory DuckDB holding the macro (a forked worker opens its own)."""
        con = self._cons.get(os.getpid())
        if con is None:     # (a parent's connection is left untouched: never used after a fork)
            import duckdb

            con = duckdb.connect()
            con.execute("SET TimeZone = 'UTC'")
            con.execute(sqlfiles.load("create_macro_price_regimes"))
            self._cons[os.getpid()] = con
        return con

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_cons": {}}

    def __call__(self, model: str | None, total_input: int, ts_us: int | None) -> TokenPrices | None:
        model = self.price_model or model
        if not model:
            return None
        rows = self._model_rows(model)
        if len(rows) <= 1:
            return rows[0][3] if rows else None
        if len({row[0] for row in rows}) == 1:
            priority = rows[0][0]
        else:
            if (model, ts_us) not in self._regimes:
                self.prepare([(model, ts_us)])
            priority = self._regimes[(model, ts_us)]
        for row_priority, above, upto, prices in rows:
            if row_priority == priority and total_input > above and (upto is None or total_input <= upto):
                return prices
        return None


# ---------------------------------------------------------------------------------------
# Facts the policy input does not carry
# ---------------------------------------------------------------------------------------
@dataclass
class SessionFacts:
    """Model, CJK count and recorded usage by message seq (sparse), and the session's model.

    ``usage``: (seq, scope, prompt tokens = input + cache writes + cache reads).
    """

    models: list[tuple[int, str]] = field(default_factory=list)
    cjk: dict[int, int] = field(default_factory=dict)
    usage: list[tuple[int, str, int]] = field(default_factory=list)
    session_model: str | None = None

    @classmethod
    def from_table(cls, table: Any, session_model: str | None = None) -> "SessionFacts":
        """From rows with (some of) the columns of ``select_replay_message_facts`` (a messages
        table works too: tests put model and usage straight on their messages)."""
        facts = cls(session_model=session_model)
        if table is None:
            return facts
        if not isinstance(table, pa.Table):
            table = table.to_arrow()
        names = set(table.column_names)

        def col(name: str) -> list:
            return table.column(name).to_pylist() if name in names else [None] * table.num_rows

        seqs = col("seq")
        models, cjks, scopes = col("model"), col("cjk_count"), col("usage_scope")
        inputs, writes, reads = col("input_tokens"), col("cache_creation_tokens"), \
            col("cache_read_tokens")
        for i, seq in enumerate(seqs):
            if models[i] is not None:
                facts.models.append((seq, models[i]))
            if cjks[i]:
                facts.cjk[seq] = cjks[i]
            if inputs[i] is not None or writes[i] is not None or reads[i] is not None:
                facts.usage.append((seq, scopes[i] or "call",
                                    (inputs[i] or 0) + (writes[i] or 0) + (reads[i] or 0)))
        facts.models.sort()
        facts.usage.sort()
        return facts


def _is_model(name: str | None) -> bool:
    return bool(name) and not (name.startswith("<") and name.endswith(">"))


class _Fenwick:
    """Prefix sums over message positions with point updates (the applied token deltas)."""

    __slots__ = ("tree", "n")

    def __init__(self, n: int):
        self.n = n
        self.tree = [0] * (n + 1)

    def add(self, i: int, delta: int) -> None:
        i += 1
        n, tree = self.n, self.tree
        while i <= n:
            tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum of positions [0, i)."""
        total, tree = 0, self.tree
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total


# ---------------------------------------------------------------------------------------
# One session: the policy-independent part
# ---------------------------------------------------------------------------------------
@dataclass
class _Walk:
    context: list[int]
    cache_read: list[int]
    cache_write: list[int]
    applied: list[int]
    cost: list[float | None]
    cost_uncached: list[float | None]


class _Session:
    """What every policy's replay of one session shares (built once)."""

    def __init__(self, session: SessionInput, facts: SessionFacts | None, prices: PriceLookup | None,
                 cache_ttl_minutes: float | None):
        self.session = session
        view = self.view = session.view()
        self.facts = facts or SessionFacts.from_table(session.messages)
        self.prices = prices
        self.ttl_us = None if cache_ttl_minutes is None else int(cache_ttl_minutes * 60e6)
        seqs = view.seq
        n = len(seqs)
        turns = view.turns
        self.starts = [t.start for t in turns]
        self.turn_ts = [t.ts for t in turns]
        self.hi = [bisect.bisect_left(seqs, s) for s in self.starts]
        lo = []
        for s in self.starts:
            c = view.context_start(s)
            lo.append(0 if c <= -_INF else bisect.bisect_left(seqs, c))
        self.lo = lo
        # output tokens of each turn (its own assistant rows)
        out = [0] * len(turns)
        turn_of = view.turn_of_msg
        for i in range(n):
            if view.role[i] == "assistant" and view.kind[i] in _TURN_KINDS and turn_of[i] >= 0:
                out[turn_of[i]] += view.tokens[i]
        self.output = out
        # models: the first named on the turn's rows, else the session's most common one
        counts: Counter = Counter()
        turn_models: list[str | None] = [None] * len(turns)
        for seq, model in self.facts.models:
            if not _is_model(model):
                continue
            counts[model] += 1
            t = view.turn_of_seq(seq)
            if t >= 0 and turn_models[t] is None:
                pos = bisect.bisect_left(seqs, seq)
                if pos < n and seqs[pos] == seq and turn_of[pos] == t:
                    turn_models[t] = model
        default = counts.most_common(1)[0][0] if counts else None
        if default is None and _is_model(self.facts.session_model):
            default = self.facts.session_model
        self.model = default
        self.turn_models = [m or default for m in turn_models]
        prepare = getattr(prices, "prepare", None)
        if prepare is not None:     # a PriceBook matches the turns' price regimes in one query
            prepare(zip(self.turn_models, self.turn_ts))
        # the transcript's own recorded clears: (at_seq, position, delta), under every policy
        self.recorded = [(at, bisect.bisect_left(seqs, item), delta, False)
                         for at, item, delta in view._events]
        self._refs: tuple[dict, dict] | None = None
        self._tail_views: dict = {}
        self._times: list[datetime | None] | None = None

    def turn_times(self) -> list[datetime | None]:
        if self._times is None:
            self._times = [None if ts is None else datetime.fromtimestamp(ts / 1e6, tz=timezone.utc)
                           for ts in self.turn_ts]
        return self._times

    # -- the walk ---------------------------------------------------------------------------
    def events_of(self, evictions: list[dict]) -> list[tuple[int, int, int, bool]]:
        """(at_seq, message position, token delta, is_policy) of each eviction, in at_seq order.

        The delta is taken against the item's current tokens, so two steps touching the same
        item (never done by a correct plan) are not counted twice."""
        seqs = self.view.seq
        state: dict[int, int] = {}
        out = []
        for ev in sorted(evictions, key=lambda e: e["at_seq"]):
            seq = ev["seq"]
            before = state.get(seq, ev["tokens_before"])
            after = ev["tokens_after"]
            state[seq] = after
            out.append((ev["at_seq"], bisect.bisect_left(seqs, seq), after - before, True))
        return out

    def walk(self, policy_events: list[tuple[int, int, int, bool]]) -> _Walk:
        view = self.view
        prefix = view.prefix_tokens
        events = sorted(self.recorded + policy_events, key=lambda e: e[0])
        fen = _Fenwick(len(view.seq)) if events else None
        k_turns = len(self.starts)
        context = [0] * k_turns
        reads = [0] * k_turns
        writes = [0] * k_turns
        applied = [0] * k_turns
        cost: list[float | None] = [None] * k_turns
        uncached: list[float | None] = [None] * k_turns
        p = 0
        prev_lo = prev_hi = -1
        prev_ts = None
        ttl = self.ttl_us
        prices = self.prices
        for k in range(k_turns):
            s, lo, hi = self.starts[k], self.lo[k], self.hi[k]
            changed = _INF
            while p < len(events) and events[p][0] <= s:
                _at, pos, delta, is_policy = events[p]
                fen.add(pos, delta)
                if lo <= pos < changed:
                    changed = pos
                applied[k] += is_policy
                p += 1
            total = prefix[hi] - prefix[lo]
            if fen is not None:
                total += fen.prefix(hi) - fen.prefix(lo)
            context[k] = total
            ts = self.turn_ts[k]
            cold = (k == 0 or lo != prev_lo
                    or (ttl is not None and ts is not None and prev_ts is not None
                        and ts - prev_ts > ttl))
            if cold:
                shared = 0
            else:
                cut = min(changed, prev_hi)
                shared = prefix[cut] - prefix[lo]
                if fen is not None:
                    shared += fen.prefix(cut) - fen.prefix(lo)
            reads[k] = shared
            writes[k] = total - shared
            if prices is not None:
                price = prices(self.turn_models[k], total, ts)
                if price is not None:
                    out = self.output[k] * price.output + price.request
                    cost[k] = shared * price.cache_read + writes[k] * price.cache_write + out
                    uncached[k] = total * price.input + out
            prev_lo, prev_hi, prev_ts = lo, hi, ts
        return _Walk(context, reads, writes, applied, cost, uncached)

    # -- at-risk evictions (proxy for regret) ------------------------------------------------
    def refs(self) -> tuple[dict, dict]:
        """Seqs of the calls naming each path, and of each exact call (tool, input)."""
        if self._refs is None:
            by_path: dict[str, list[int]] = {}
            by_call: dict[tuple, list[int]] = {}
            for call in self.view.calls:
                for path in call.paths:
                    by_path.setdefault(path, []).append(call.seq)
                by_call.setdefault((call.tool_name, call.input_json), []).append(call.seq)
            self._refs = (by_path, by_call)
        return self._refs

    def at_risk(self, ev: dict) -> bool:
        by_path, by_call = self.refs()
        at = ev["at_seq"]
        view = self.view
        item = view.item_by_seq.get(ev["seq"])
        call = view.call_by_seq.get(ev["seq"]) if ev["action"] == "clear_input" else \
            (item.call if item is not None else None)
        paths = ev.get("paths")
        if paths is None:
            paths = item.paths if item is not None else ()
        for path in paths or ():
            seqs = by_path.get(path)
            if seqs and seqs[-1] >= at:
                return True
        if call is not None:
            seqs = by_call.get((call.tool_name, call.input_json))
            if seqs and seqs[-1] >= at and len(seqs) > 1:
                return True
        return False

    # -- protected items ----------------------------------------------------------------------
    def violation(self, ev: dict, tail_step: tuple | None, excluded: Mapping[str, frozenset]
                  ) -> str | None:
        """The rule an eviction breaks, or None."""
        view = self.view
        seq, action = ev["seq"], ev["action"]
        pos = bisect.bisect_left(view.seq, seq)
        if pos >= len(view.seq) or view.seq[pos] != seq:
            return "unknown_item"
        kind = view.kind[pos]
        if action == "clear_input":
            if kind != "tool_use":
                return "not_tool_output"
            return None
        if kind != "tool_result":
            return "not_tool_output"
        item = view.item_by_seq.get(seq)
        if item is not None and item.memory_protected:
            return "memory_read"
        step = ev.get("step")
        if item is not None and step in excluded and item.tool_name in excluded[step]:
            return "excluded_tool"
        if tail_step is not None and step in tail_step[1] and step != "payload_prune":
            tail_view = self._tail_views.get(tail_step[0])
            if tail_view is None:
                prior = tail_prior_for(tail_step[0])
                tail_view = self._tail_views[tail_step[0]] = view.with_prior(prior)
            if seq in tail_view.tail_protected(ev["at_seq"]):
                return "tail_protected"
        return None

    # -- recorded usage ------------------------------------------------------------------------
    def usage_figures(self, walk: _Walk, calibration) -> dict:
        """Estimate vs recorded usage for the real transcript (the baseline walk)."""
        empty = {"usage_scope": None, "usage_turns": None, "recorded_input_tokens": None,
                 "estimated_input_tokens": None, "estimate_error_pct": None,
                 "heuristic_error_pct": None, "estimator": None}
        if not self.facts.usage or not self.starts:
            return empty
        view = self.view
        per_turn: dict[int, int] = {}
        run_total = 0
        for seq, scope, prompt in self.facts.usage:
            if scope == "run":
                run_total += prompt
                continue
            t = view.turn_of_seq(seq)
            if t >= 0:
                per_turn[t] = per_turn.get(t, 0) + prompt
        if per_turn:
            scope, turns = "call", sorted(per_turn)
            recorded = sum(per_turn.values())
        elif run_total:
            scope, turns, recorded = "run", list(range(len(self.starts))), run_total
        else:
            return empty
        heuristic = sum(walk.context[t] for t in turns)
        estimator, estimate = HEURISTIC, heuristic
        if calibration is not None and calibration.factors:
            from pipeline.stages.calibrate import est_tokens_calibrated

            classes = self._class_prefix()
            estimate = 0
            for t in turns:
                lo, hi = self.lo[t], self.hi[t]
                prose = classes[0][hi] - classes[0][lo]
                code = classes[1][hi] - classes[1][lo]
                cjk = classes[2][hi] - classes[2][lo]
                # recorded clears shrink tool output: count the change as code
                code += walk.context[t] - (view.prefix_tokens[hi] - view.prefix_tokens[lo])
                estimate += est_tokens_calibrated(calibration, self.turn_models[t],
                                                  {"prose": prose, "code": code, "cjk": cjk})
            estimator = CALIBRATED

        def pct(value: int) -> float | None:
            return round(100.0 * (value - recorded) / recorded, 4) if recorded else None

        return {"usage_scope": scope, "usage_turns": len(turns), "recorded_input_tokens": recorded,
                "estimated_input_tokens": estimate, "estimate_error_pct": pct(estimate),
                "heuristic_error_pct": pct(heuristic), "estimator": estimator}

    def _class_prefix(self) -> tuple[list[int], list[int], list[int]]:
        view = self.view
        prose, code, cjk = [0], [0], [0]
        seqs, cjk_counts = view.seq, self.facts.cjk
        for i, tokens in enumerate(view.tokens):
            c = -(-cjk_counts.get(seqs[i], 0) * 3 // 2)
            rest = tokens - c
            is_code = view.kind[i] in ("tool_use", "tool_result")
            prose.append(prose[-1] + (0 if is_code else rest))
            code.append(code[-1] + (rest if is_code else 0))
            cjk.append(cjk[-1] + c)
        return prose, code, cjk


# ---------------------------------------------------------------------------------------
# One session under several policies (pure: tables in, rows out)
# ---------------------------------------------------------------------------------------
@dataclass
class SessionReplay:
    """One session's ``policy_eval`` rows and ``replay_turns`` rows (one entry per policy)."""

    session_id: str
    evals: list[dict] = field(default_factory=list)
    turn_columns: dict[str, list] = field(
        default_factory=lambda: {name: [] for name in _TURN_ROWS.names})

    @property
    def turns(self) -> list[dict]:
        cols = self.turn_columns
        return [dict(zip(cols, values)) for values in zip(*cols.values())]

    def eval_for(self, policy: str) -> dict:
        return next(row for row in self.evals if row["policy"] == policy)

    def turns_for(self, policy: str) -> list[dict]:
        return [row for row in self.turns if row["policy"] == policy]


def _sum_or_none(values: Iterable[float | None]) -> float | None:
    total = 0.0
    for v in values:
        if v is None:
            return None
        total += v
    return total


def _round(value: float | None, digits: int = 9) -> float | None:
    return None if value is None else round(value, digits)


def _protection_rules(policy: ResolvedPolicy | None) -> tuple[tuple | None, dict]:
    """(tail_protect params and the step names after it, exclude_tools by step name)."""
    if policy is None:
        return None, {}
    tail = None
    excluded: dict[str, frozenset] = {}
    for index, step in enumerate(policy.steps):
        if step.policy == "tail_protect" and tail is None:
            after = frozenset(s.policy for s in policy.steps[index + 1:])
            tail = (step.params, after)
        tools = getattr(step.params, "exclude_tools", None)
        if step.policy == "context_editing" and tools:
            excluded[step.policy] = excluded.get(step.policy, frozenset()) | frozenset(tools)
    return tail, excluded


class _Evaluator:
    def __init__(self, session: SessionInput, *, facts: SessionFacts | None,
                 prices: PriceLookup | None, calibration: Any, cache_ttl_minutes: float | None,
                 price_source: str | None):
        self.s = _Session(session, facts, prices, cache_ttl_minutes)
        self.calibration = calibration
        self.cache_ttl_minutes = cache_ttl_minutes
        self.price_source = price_source
        self.out = SessionReplay(session.session_id)
        self.baseline = self.s.walk([])
        self.baseline_cost = _sum_or_none(self.baseline.cost) if prices is not None else None
        self.baseline_uncached = _sum_or_none(self.baseline.cost_uncached) \
            if prices is not None else None

    def add(self, name: str, config_hash: str | None, evictions: list[dict], plans: int,
            policy: ResolvedPolicy | None = None, *, is_baseline: bool = False) -> dict:
        s = self.s
        walk = self.baseline if is_baseline or not evictions else s.walk(s.events_of(evictions))
        info = s.session.info
        turns = len(s.starts)
        total = sum(walk.context)
        base_total = sum(self.baseline.context)
        priced = s.prices is not None
        cost = _sum_or_none(walk.cost) if priced else None
        uncached = _sum_or_none(walk.cost_uncached) if priced else None
        tail, excluded = _protection_rules(policy)
        violations: Counter = Counter()
        at_risk = 0
        for ev in evictions:
            rule = s.violation(ev, tail, excluded)
            if rule is not None:
                violations[rule] += 1
            if s.at_risk(ev):
                at_risk += 1
        base_cost = self.baseline_cost
        row = {
            "policy": name, "config_hash": config_hash, "session_id": s.session.session_id,
            "format": info.format if info else None,
            "model": getattr(s.prices, "price_model", None) or s.model,
            "turns": turns, "total_input_tokens": total,
            "peak_context_tokens": max(walk.context, default=0),
            "output_tokens": sum(s.output), "baseline_input_tokens": base_total,
            "tokens_saved": base_total - total,
            "tokens_saved_pct": round(100.0 * (base_total - total) / base_total, 4)
            if base_total else None,
            "cache_read_tokens": sum(walk.cache_read), "cache_write_tokens": sum(walk.cache_write),
            "cache_ttl_minutes": self.cache_ttl_minutes,
            "cost_usd": _round(cost), "cost_uncached_usd": _round(uncached),
            "baseline_cost_usd": _round(base_cost),
            "baseline_cost_uncached_usd": _round(self.baseline_uncached),
            "cost_saved_usd": _round(base_cost - cost) if cost is not None and base_cost is not None
            else None,
            "cost_saved_pct": round(100.0 * (base_cost - cost) / base_cost, 4)
            if cost is not None and base_cost else None,
            "unpriced_turns": sum(1 for c in walk.cost if c is None) if priced else turns,
            "plans": plans, "evictions": len(evictions),
            "evicted_tokens": sum(ev["tokens_before"] - ev["tokens_after"] for ev in evictions),
            "at_risk_evictions": at_risk,
            "protected_violations": sum(violations.values()),
            "violations_json": orjson.dumps(dict(sorted(violations.items()))).decode()
            if violations else None,
            "price_source": self.price_source,
        }
        usage = s.usage_figures(walk, self.calibration) if is_baseline else \
            {k: None for k in ("usage_scope", "usage_turns", "recorded_input_tokens",
                               "estimated_input_tokens", "estimate_error_pct",
                               "heuristic_error_pct", "estimator")}
        row.update(usage)
        self.out.evals.append(row)
        cols = self.out.turn_columns
        cols["policy"] += [name] * turns
        cols["config_hash"] += [config_hash] * turns
        cols["session_id"] += [s.session.session_id] * turns
        cols["turn"] += list(range(turns))
        cols["seq"] += s.starts
        cols["timestamp"] += s.turn_times()
        price_model = getattr(s.prices, "price_model", None)
        cols["model"] += [price_model] * turns if price_model else s.turn_models
        cols["context_tokens"] += walk.context
        cols["cache_read_tokens"] += walk.cache_read
        cols["cache_write_tokens"] += walk.cache_write
        cols["output_tokens"] += s.output
        cols["evictions"] += walk.applied
        cols["cost_usd"] += [_round(c) for c in walk.cost]
        return row


def _is_baseline(policy: ResolvedPolicy) -> bool:
    return all(step.policy == BASELINE for step in policy.steps)


def replay_session(session: SessionInput, policies: Sequence[ResolvedPolicy], *,
                   facts: SessionFacts | None = None, prices: PriceLookup | None = None,
                   calibration: Any = None,
                   cache_ttl_minutes: float | None = DEFAULT_CACHE_TTL_MINUTES,
                   price_source: str | None = None) -> SessionReplay:
    """Replay one in-memory session under ``policies`` (pure; the lake stage calls it).

    Every policy is planned with :func:`pipeline.stages.plan.plan_session_input`. A ``none`` policy
    in the list gets the baseline row (with the estimate-vs-usage columns); savings are always
    measured against the no-eviction walk. ``facts`` default to the columns of
    ``session.messages`` (model, cjk_count, recorded usage) when present.
    """
    from pipeline.stages.plan import plan_session_input

    ev = _Evaluator(session, facts=facts, prices=prices, calibration=calibration,
                    cache_ttl_minutes=cache_ttl_minutes, price_source=price_source)
    for policy in policies:
        if _is_baseline(policy):
            ev.add(policy.name, policy.config_hash, [], 0, policy, is_baseline=True)
            continue
        planned = plan_session_input(session, policy)
        ev.add(policy.name, policy.config_hash, planned.evictions, len(planned.plans), policy)
    return ev.out


def evaluate_evictions(session: SessionInput, evictions: Any, *, policy: str = "custom",
                       policy_spec: ResolvedPolicy | None = None, plans: int = 0,
                       facts: SessionFacts | None = None, prices: PriceLookup | None = None,
                       calibration: Any = None,
                       cache_ttl_minutes: float | None = DEFAULT_CACHE_TTL_MINUTES) -> SessionReplay:
    """Replay one session under a given eviction table (``pipeline.core.schema.EVICTIONS`` columns:
    at least at_seq, seq, tokens_before, tokens_after, action; Arrow, polars or dicts).

    Returns the baseline row (``none``) and the row of ``policy``. Used to check hand-made
    plans, including deliberately bad ones (``protected_violations``).
    """
    if evictions is None:
        rows: list[dict] = []
    elif isinstance(evictions, list):
        rows = [dict(r) for r in evictions]
    else:
        table = evictions if isinstance(evictions, pa.Table) else evictions.to_arrow()
        rows = table.to_pylist()
    ev = _Evaluator(session, facts=facts, prices=prices, calibration=calibration,
                    cache_ttl_minutes=cache_ttl_minutes, price_source=None)
    ev.add(BASELINE, None, [], 0, None, is_baseline=True)
    ev.add(policy, policy_spec.config_hash if policy_spec else None, rows, plans, policy_spec)
    return ev.out


# ---------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------
@dataclass
class _Context:
    policies: list[ResolvedPolicy]
    prices: PriceBook
    calibration: Any
    cache_ttl_minutes: float | None


@dataclass
class _BatchOut:
    evals: list[dict]
    turns: dict[str, list]


def _load_facts(con, ids: list[str]) -> dict[str, SessionFacts]:
    """Facts of the sessions ``ids`` (two narrow scans, one Python pass over the rows)."""
    params = {"session_ids": ids}
    models = dict(con.execute(sqlfiles.load("select_replay_session_models"), params).fetchall())
    out = {sid: SessionFacts(session_model=models.get(sid)) for sid in ids}
    table = con.sql(sqlfiles.load("select_replay_message_facts"), params=params).to_arrow_table()
    if not isinstance(table, pa.Table):
        table = table.read_all()
    cols = [table.column(name).to_pylist() for name in
            ("session_id", "seq", "model", "cjk_count", "input_tokens", "cache_creation_tokens",
             "cache_read_tokens", "usage_scope")]
    current_sid, facts = None, None
    for sid, seq, model, cjk, inp, write, read, scope in zip(*cols):
        if sid != current_sid:
            current_sid = sid
            facts = out.setdefault(sid, SessionFacts(session_model=models.get(sid)))
        if model is not None:
            facts.models.append((seq, model))
        if cjk:
            facts.cjk[seq] = cjk
        if inp is not None or write is not None or read is not None:
            facts.usage.append((seq, scope or "call", (inp or 0) + (write or 0) + (read or 0)))
    return out


def _replay_inputs(inputs: list[SessionInput], facts: dict[str, SessionFacts],
                   ctx: _Context) -> _BatchOut:
    evals: list[dict] = []
    turns: dict[str, list] = {name: [] for name in _TURN_ROWS.names}
    for session in inputs:
        result = replay_session(session, ctx.policies, facts=facts.get(session.session_id),
                                prices=ctx.prices, calibration=ctx.calibration,
                                cache_ttl_minutes=ctx.cache_ttl_minutes,
                                price_source=ctx.prices.source)
        evals.extend(result.evals)
        for name, values in result.turn_columns.items():
            turns[name] += values
    return _BatchOut(evals, turns)


def _replay_chunk(loaded, chunk: list, classifier, facts: dict[str, SessionFacts], *,
                  ctx: _Context) -> _BatchOut:
    """One chunk of :func:`pipeline.stages.session_engine.run_session_chunks` (``facts``: its pass's extra)."""
    from pipeline.stages.session_engine import session_inputs

    return _replay_inputs(session_inputs(loaded, chunk, classifier), facts, ctx)


def _batch_facts(con, batch: list) -> dict[str, SessionFacts]:
    return _load_facts(con, [r.session_id for r in batch])


def _policy_specs(config: Config, policies: Sequence[str], sweeps: Sequence[str]) -> list[str]:
    specs = [BASELINE, *policies]
    for name in sweeps:
        if name not in config.sweeps:
            raise UsageError(f"no sweep '{name}' in the config",
                             hint=("sweeps: " + ", ".join(sorted(config.sweeps)))
                             if config.sweeps else "define one under [sweeps] in ctxlake.toml")
        specs.extend(config.sweeps[name])
    return specs


def _load_calibration(lake: Lake):
    from pipeline.stages.calibrate import TokenCalibration

    calibration = TokenCalibration.load(lake)
    return calibration if calibration.factors else None


@dataclass
class ReplayResult:
    """What a replay measured: per-session rows, per-turn rows and the comparison table."""

    policies: list[str]
    config_hashes: dict[str, str]
    evals: pa.Table
    turns: pa.Table
    summary: list[dict]
    sessions: int
    sessions_ignored: int
    cache_ttl_minutes: float | None
    price_model: str | None
    price_source: str
    estimator: str
    steps: dict[str, list[dict]] = field(default_factory=dict)
    report: ReportFiles | None = None      # what --report wrote
    replay_id: str | None = None
    settings: str | None = None            # replay_settings(): price model and cache TTL
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"policies": self.policies, "config_hashes": self.config_hashes,
                "replay_id": self.replay_id, "settings": self.settings,
                "steps": self.steps,
                "sessions": self.sessions, "sessions_ignored": self.sessions_ignored,
                "cache_ttl_minutes": self.cache_ttl_minutes, "price_model": self.price_model,
                "price_source": self.price_source, "estimator": self.estimator,
                "summary": self.summary,
                "report": self.report.to_dict() if self.report is not None else None,
                "warnings": self.warnings}


def summary_rows(evals: pa.Table | None, policies: Sequence[str], *, con=None,
                 settings: str | None = None) -> list[dict]:
    """The comparison table (``sql/select_replay_summary.sql``): one dict per policy.

    ``evals``: a run's ``policy_eval`` rows; None reads the lake's ``policy_eval`` view
    through ``con`` (a :meth:`Lake.connect` connection). ``settings``: only the rows of these
    :func:`replay_settings` (the view may hold a policy priced two ways)."""
    own = con is None
    con = con or new_connection()
    try:
        if evals is not None:
            con.register("replay_eval", evals)
            source = sqlfiles.ident("replay_eval")
        else:
            source = sqlfiles.ident("policy_eval")
        cur = con.execute(sqlfiles.render("select_replay_summary", source=source),
                          {"policies": list(policies), "settings": settings})
        rows = sqlfiles.fetch_dicts(cur)
        if evals is not None:
            con.unregister("replay_eval")
    finally:
        if own:
            con.close()
    for row in rows:
        for key, value in row.items():
            if hasattr(value, "as_tuple"):      # Decimal from DuckDB rounding
                row[key] = float(value)
    return rows


def _merge_existing(lake: Lake, name: str, key: str, config_hash: str, replayed: set[str],
                    table: pa.Table) -> pa.Table:
    path = lake.derived_dir / name / f"{key}.parquet"
    if not path.exists():
        return table
    old = pq.read_table(path)
    if old.schema != table.schema:
        return table
    from pipeline.stages.session_engine import kept_rows

    return pa.concat_tables([kept_rows(old, config_hash, replayed), table])


@holds_lake_lock
def replay(lake: Lake, *, policies: Sequence[str], sweeps: Sequence[str] = (),
           config: Config | None = None, session_id: str | None = None, since: Any = None,
           progress: Callable[[int, int], None] | None = None, workers: int | None = None,
           cache_ttl_minutes: float | None = DEFAULT_CACHE_TTL_MINUTES,
           price_model: str | None = None, report_dir: Path | str | None = None,
           chart_session: str | None = None, write: bool = True) -> ReplayResult:
    """Replay the lake's sessions under ``none`` + ``policies`` (+ the config's ``sweeps``).

    Writes ``policy_eval`` and ``replay_turns`` (one file per policy; with ``session_id`` or
    ``since`` the other sessions' rows of the same config are kept) and, with ``report_dir``,
    the report (:func:`pipeline.reports.replay_report.write_report`). Ignored sessions
    (``ignore_patterns``) are skipped and counted, as in planning.
    """
    from pipeline.stages.session_engine import run_session_chunks

    config = config or load_config(None)
    resolved: list[ResolvedPolicy] = []
    seen: set[str] = set()
    for spec in _policy_specs(config, policies, sweeps):
        policy = config.resolve(spec)
        if policy.name in seen:
            continue
        seen.add(policy.name)
        resolved.append(policy)
    keys = [p.key for p in resolved]
    if len(set(keys)) != len(keys):
        raise UsageError("two policies map to the same file key", hint=", ".join(keys))
    prices = PriceBook(price_model)
    ctx = _Context(resolved, prices, _load_calibration(lake), cache_ttl_minutes)
    run = run_session_chunks(lake, config, functools.partial(_replay_chunk, ctx=ctx),
                             session_id=session_id, since=since, batch_extra=_batch_facts,
                             progress=progress, workers=workers)
    outs: list[_BatchOut] = run.results
    rows, todo, ignored = run.rows, run.todo, run.ignored

    eval_rows = [row for out in outs for row in out.evals]
    evals = pa.Table.from_pylist(eval_rows, schema=POLICY_EVAL) if eval_rows \
        else POLICY_EVAL.empty_table()
    turns = pa.concat_tables([pa.table(out.turns, schema=_TURN_ROWS) for out in outs]) \
        if outs else _TURN_ROWS.empty_table()
    settings = replay_settings(price_model, cache_ttl_minutes)
    replay_id = replay_id_of(resolved, settings, session_id, since)
    evals = _stamp(evals, POLICY_EVAL, replay_id, settings, price_model)
    turns = _stamp(turns, REPLAY_TURNS, replay_id, settings, price_model)
    # rows are kept per (policy, settings): a replay priced as another model, or with another
    # cache TTL, writes files of its own beside the default ones instead of replacing them
    suffix = "" if settings == replay_settings(None, DEFAULT_CACHE_TTL_MINUTES) else \
        "--" + hashlib.sha256(settings.encode("utf-8")).hexdigest()[:8]
    evals = evals.sort_by([("policy", "ascending"), ("session_id", "ascending")])
    turns = turns.sort_by([("policy", "ascending"), ("session_id", "ascending"),
                           ("turn", "ascending")]).combine_chunks()
    names = [p.name for p in resolved]
    if write:
        replayed = {r.session_id for r in rows}
        partial = session_id is not None or since is not None
        for policy in resolved:
            for name, table in (("policy_eval", evals), ("replay_turns", turns)):
                mine = table.filter(pc.equal(table.column("policy"), policy.name))
                if partial:
                    mine = _merge_existing(lake, name, policy.key + suffix, policy.config_hash,
                                           replayed, mine)
                    mine = mine.sort_by([("session_id", "ascending")] +
                                        ([("turn", "ascending")] if name == "replay_turns" else []))
                lake.write_derived(name, policy.key + suffix, mine.combine_chunks())
    # the first replay of a lake adds its tables: the persisted views follow now, so the
    # commands after it attach them instead of binding every view
    refreshed = lake.refresh_duckdb_file()
    estimator = CALIBRATED if ctx.calibration is not None else HEURISTIC
    result = ReplayResult(
        policies=names, config_hashes={p.name: p.config_hash for p in resolved}, evals=evals,
        turns=turns, summary=summary_rows(evals, names), sessions=len(todo),
        sessions_ignored=len(ignored), cache_ttl_minutes=cache_ttl_minutes,
        price_model=price_model, price_source=prices.source, estimator=estimator,
        steps={p.name: p.describe() for p in resolved}, replay_id=replay_id,
        settings=settings, warnings=[refreshed] if refreshed else [])
    if report_dir is not None:
        from pipeline.reports.replay_report import write_report

        result.report = write_report(result, Path(report_dir), session_id=chart_session)
    return result
