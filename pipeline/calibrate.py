"""Calibration of the token heuristic against recorded usage, per model and content class.

Data (``sql/select_calibration_calls.sql``): one row per API call whose usage is recorded per
call (Claude Code per ``message.id:requestId``, Gemini ``tokens``, Codex ``token_count``,
OpenAI-style ``usage``; the lake keeps input, cache reads and cache writes disjoint, so the
whole prompt of a call is ``input + cache_creation + cache_read``). For each call the
heuristic estimate (the ``est_tokens`` of the rows) is split into three content classes:

- ``prose``: text, meta and summary rows, and the thinking of the current turn (the API drops
  earlier turns' thinking from the prompt, so only thinking after the last human prompt
  counts);
- ``code``: tool inputs and tool results (``tool_use``/``tool_result`` rows);
- ``cjk``: the ``ceil(1.5 * cjk)`` part of every row.

The context of a call is the rows of its conversation thread before the call's first
assistant row. A thread is a session's main line or one inline sidechain, cut at every root
record (Claude: ``parentUuid`` null, e.g. after a compact boundary) and at every boundary row.
A call is the rows sharing its ``api_call_id``; without one, a usage row closes a call made
of the rows since the previous usage row (Codex writes ``token_count`` after the output).

Method (simple, robust, explainable): ``prompt_k = overhead_thread + sum_c f_c * x_c,k``.

- ``overhead_thread`` is what transcripts do not show (system prompt, tool definitions),
  constant within a thread. It is estimated as the MEDIAN over the thread's other recorded
  calls of ``prompt_j - f . x_j`` (robust to odd calls, e.g. Gemini CLI's first call of a
  turn that carries extra requests), never from the call being estimated.
- The factors ``f_c`` are a within-thread least-squares fit (each thread's mean removed, the
  fixed-effects estimator) over every call of the model, with a ridge pull towards the
  factors pooled over all models (worth one call carrying 1000 tokens of the class),
  themselves pulled towards 1.0, the heuristic (worth 100 tokens): a class with no data keeps
  1.0 and a model seen little borrows from the others; factors are clamped to [0.25, 4].
- The model's ``intercept`` (median of the thread overheads) stands in when a thread has no
  recorded usage at all.
- Output: ``output_tokens = intercept + sum_c f_c * x_c`` over the call's own assistant rows:
  the same fit with one intercept per model (the median, over the model's calls, of
  ``recorded - f . x``): the framing a model writes around a tool call, which no transcript
  text shows.

The heuristic, for comparison, is the same formula with every factor 1.0 (the plain
``est_tokens`` plus the same kind of overhead). Evaluation (:func:`estimator_report`):
leave-one-session-out when the model has two sessions or more (a session with its
sub-agents is scored with factors fitted without it); a model seen in one session is scored
on the second half of its calls with factors fitted on the first half (temporal hold-out),
or, with fewer than 6 calls, from the other models only. The report says which.

The stored table is ``token_calibration`` (``lake.write_derived("token_calibration", "all",
...)``), one row per (model, direction, content class), plus model ``*`` pooled over all
models for unknown models. The calibrated estimate is :func:`est_tokens_calibrated`: it says
it is calibrated in its name, the heuristic stays ``est_tokens``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import sqlfiles
from pipeline.lake import Lake, holds_lake_lock
from pipeline.tokens import cjk_count, estimate_tokens

CLASSES = ("prose", "code", "cjk")
DIRECTIONS = ("prompt", "output")
ALL_MODELS = "*"
TARGET_PCT = 5.0
PRIOR_FACTOR = 1.0
# Ridge weights, as one pseudo-call carrying N heuristic tokens of the class: the pooled fit
# (all models) is pulled towards 1.0 with N = 100; a model's fit is pulled towards the pooled
# factors with N = 1000, so a model seen little borrows from the others (partial pooling).
POOLED_PRIOR_WEIGHT = 100.0 ** 2
MODEL_PRIOR_WEIGHT = 1000.0 ** 2
FACTOR_BOUNDS = (0.25, 4.0)
MIN_CALLS_FOR_TEMPORAL_HOLDOUT = 6
CODE_KINDS = ("tool_use", "tool_result")

Factors = tuple[float, float, float]

TOKEN_CALIBRATION = pa.schema([
    ("model", pa.string()),
    ("direction", pa.string()),        # prompt | output
    ("content_class", pa.string()),    # prose | code | cjk
    ("factor", pa.float64()),          # recorded tokens per heuristic token of the class
    ("intercept", pa.float64()),       # prompt: tokens outside the transcript (system prompt, tools)
    ("n_calls", pa.int64()),           # recorded API calls the fit rests on
    ("n_fit_calls", pa.int64()),       # calls that entered the least squares (threads of 2+ calls for prompt)
    ("n_sessions", pa.int64()),
    ("class_tokens", pa.int64()),      # heuristic tokens of the class seen by the fit (0 = prior only)
    ("data_until", pa.timestamp("us", tz="UTC")),  # newest call used (not the wall clock: deterministic)
])


# -- content classes of one text ----------------------------------------------------------
def class_tokens(text: str | None, kind: str | None = "text") -> dict[str, int]:
    """The heuristic tokens of one row split into content classes (they sum to est_tokens)."""
    cjk = -(-cjk_count(text) * 3 // 2)
    rest = estimate_tokens(text) - cjk
    code = kind in CODE_KINDS
    return {"prose": 0 if code else rest, "code": rest if code else 0, "cjk": cjk}


# -- the fit ------------------------------------------------------------------------------
@dataclass
class Observation:
    """One recorded quantity ``y`` (prompt or output tokens) against class features ``x``."""

    model: str
    group_id: str          # the hold-out unit: a session with its sub-agents
    thread_id: str
    order: int             # position of the call in the data (session order)
    x: Factors
    y: float


@dataclass
class Dataset:
    calls: list[dict]
    prompt: list[Observation]
    output: list[Observation]


def _features(call: dict, prefix: str) -> Factors:
    return tuple(float(call[f"{prefix}_{c}"] or 0) for c in CLASSES)  # type: ignore[return-value]


def build_dataset(calls: list[dict]) -> Dataset:
    """Turn per-call rows (``select_calibration_calls``) into prompt and output observations."""
    prompt, output = [], []
    for order, call in enumerate(calls):
        ids = (call["model"], call["group_id"], call["thread_id"], order)
        prompt.append(Observation(*ids, _features(call, "ctx"), float(call["recorded_prompt"])))
        if call["recorded_output"] is not None and call["recorded_output"] > 0:
            # one "thread" per model: the output fit has a per-call intercept (the framing a
            # model emits around a tool call: ids, names, JSON syntax, stop tokens)
            out_ids = (call["model"], call["group_id"], f"output:{call['model']}", order)
            output.append(Observation(*out_ids, _features(call, "out"), float(call["recorded_output"])))
    return Dataset(calls, prompt, output)


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the system is 3x3 and ridge-regularised)."""
    n = len(vector)
    a = [row[:] + [vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            ratio = a[r][col] / a[col][col]
            for k in range(col, n + 1):
                a[r][k] -= ratio * a[col][k]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        out[r] = (a[r][n] - sum(a[r][k] * out[k] for k in range(r + 1, n))) / a[r][r]
    return out


def _dot(f: Iterable[float], x: Iterable[float]) -> float:
    return sum(a * b for a, b in zip(f, x))


def _by_thread(observations: Iterable[Observation]) -> dict[str, list[Observation]]:
    threads: dict[str, list[Observation]] = defaultdict(list)
    for obs in observations:
        threads[obs.thread_id].append(obs)
    return threads


def _centred(observations: list[Observation], with_overhead: bool) -> list[tuple[Factors, float]]:
    """(x, y) pairs for the least squares: thread means removed when an overhead is fitted."""
    if not with_overhead:
        return [(o.x, o.y) for o in observations]
    pairs = []
    for members in _by_thread(observations).values():
        if len(members) < 2:
            continue
        n = len(members)
        mean_x = [sum(o.x[i] for o in members) / n for i in range(len(CLASSES))]
        mean_y = sum(o.y for o in members) / n
        pairs += [(tuple(a - b for a, b in zip(o.x, mean_x)), o.y - mean_y) for o in members]
    return pairs  # type: ignore[return-value]


def fit_factors(observations: list[Observation], *, with_overhead: bool,
                prior: Factors = (PRIOR_FACTOR,) * 3, weight: float = POOLED_PRIOR_WEIGHT) -> Factors:
    """Ridge least squares of ``y ~ f . x`` (within threads when ``with_overhead``) pulled
    towards ``prior``, clamped to FACTOR_BOUNDS."""
    n = len(CLASSES)
    xtx = [[weight if i == j else 0.0 for j in range(n)] for i in range(n)]
    xty = [weight * p for p in prior]
    for x, y in _centred(observations, with_overhead):
        for i in range(n):
            xty[i] += x[i] * y
            for j in range(n):
                xtx[i][j] += x[i] * x[j]
    low, high = FACTOR_BOUNDS
    return tuple(min(high, max(low, f)) for f in _solve(xtx, xty))  # type: ignore[return-value]


def fit_model_factors(observations: list[Observation], model: str, *, with_overhead: bool) -> Factors:
    """A model's factors: its own calls, pulled towards the factors pooled over all models."""
    pooled = fit_factors(observations, with_overhead=with_overhead)
    if model == ALL_MODELS:
        return pooled
    return fit_factors([o for o in observations if o.model == model], with_overhead=with_overhead,
                       prior=pooled, weight=MODEL_PRIOR_WEIGHT)


def thread_overhead(others: Iterable[Observation], factors: Factors) -> float | None:
    """Median of ``y - f . x`` over recorded calls of a thread (not the one estimated)."""
    values = [o.y - _dot(factors, o.x) for o in others]
    return _quantile(values, 0.5) if values else None


def fit_intercept(observations: Iterable[Observation], factors: Factors) -> float | None:
    """Median over threads of the thread overhead: the prompt a transcript does not show."""
    values = [thread_overhead(members, factors) for members in _by_thread(observations).values()]
    return _quantile([v for v in values if v is not None], 0.5) if values else None


# -- the stored table ---------------------------------------------------------------------
def load_calls(lake: Lake) -> list[dict]:
    con = lake.connect()
    try:
        cur = con.execute(sqlfiles.load("select_calibration_calls"))
        return sqlfiles.fetch_dicts(cur)
    finally:
        con.close()


def fit_table(calls: list[dict]) -> pa.Table:
    """The ``token_calibration`` rows fitted on all calls (sorted, deterministic)."""
    data = build_dataset(calls)
    models = sorted({c["model"] for c in calls})
    rows: list[dict[str, Any]] = []
    for model in models + [ALL_MODELS]:
        model_calls = [c for c in calls if model == ALL_MODELS or c["model"] == model]
        until = max((c["timestamp"] for c in model_calls if c["timestamp"] is not None), default=None)
        sessions = len({c["group_id"] for c in model_calls})
        for direction in DIRECTIONS:
            prompt = direction == "prompt"
            everything = data.prompt if prompt else data.output
            observations = [o for o in everything if model == ALL_MODELS or o.model == model]
            factors = fit_model_factors(everything, model, with_overhead=True)
            intercept = fit_intercept(observations, factors)
            fitted = _centred(observations, prompt)
            for i, content_class in enumerate(CLASSES):
                rows.append({
                    "model": model, "direction": direction, "content_class": content_class,
                    "factor": round(factors[i], 6),
                    "intercept": None if intercept is None else round(intercept, 3),
                    "n_calls": len(model_calls), "n_fit_calls": len(fitted),
                    "n_sessions": sessions,
                    "class_tokens": int(sum(abs(x[i]) for x, _y in fitted)),
                    "data_until": until,
                })
    return pa.Table.from_pylist(rows, schema=TOKEN_CALIBRATION)


@holds_lake_lock
def calibrate(lake: Lake) -> pa.Table:
    """Fit the calibration on every recorded call in the lake and store ``token_calibration``."""
    table = fit_table(load_calls(lake))
    lake.write_derived("token_calibration", "all", table)
    return table


@dataclass
class TokenCalibration:
    """Fitted factors by (model, direction); unknown models fall back to ``*``, then to 1.0."""

    factors: dict[tuple[str, str], tuple[float, float, float]]
    intercepts: dict[tuple[str, str], float | None]

    @classmethod
    def from_table(cls, table: pa.Table) -> "TokenCalibration":
        factors: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
        intercepts: dict[tuple[str, str], float | None] = {}
        for row in table.to_pylist():
            key = (row["model"], row["direction"])
            factors[key][row["content_class"]] = row["factor"]
            intercepts[key] = row["intercept"]
        return cls({k: tuple(v.get(c, PRIOR_FACTOR) for c in CLASSES)  # type: ignore[misc]
                    for k, v in factors.items()}, intercepts)

    @classmethod
    def load(cls, lake: Lake) -> "TokenCalibration":
        """The stored table, or an empty calibration (every factor 1.0) when none was fitted.
        Reads the one Parquet file directly: no need to build every view of the lake."""
        stored = lake.derived_dir / "token_calibration" / "all.parquet"
        if not stored.exists():
            return cls({}, {})
        return cls.from_table(pq.read_table(stored))

    def lookup(self, model: str | None, direction: str = "prompt") -> tuple[tuple[float, float, float], float | None]:
        for key in ((model or ALL_MODELS, direction), (ALL_MODELS, direction)):
            if key in self.factors:
                return self.factors[key], self.intercepts.get(key)
        return (PRIOR_FACTOR,) * len(CLASSES), None  # type: ignore[return-value]


def est_tokens_calibrated(calibration: TokenCalibration, model: str | None,
                          classes: dict[str, int], *, direction: str = "prompt",
                          recorded: Iterable[tuple[float, dict[str, int]]] = ()) -> int:
    """The calibrated estimate of a prompt (or an output) from its heuristic class tokens.

    ``classes`` holds the heuristic tokens per content class (see :func:`class_tokens`).
    Prompt: the overhead (system prompt, tools) is the median of ``recorded - f . classes``
    over ``recorded`` = (recorded prompt tokens, class tokens) of other calls of the same
    thread, or the model's intercept when there are none (0 when the model has none).
    Output: the calibrated sum.
    """
    factors, intercept = calibration.lookup(model, direction)
    x = [float(classes.get(c, 0)) for c in CLASSES]
    if direction == "output":
        return max(0, round((intercept or 0.0) + _dot(factors, x)))
    overheads = [y - _dot(factors, [float(k.get(c, 0)) for c in CLASSES]) for y, k in recorded]
    overhead = _quantile(overheads, 0.5) if overheads else (intercept or 0.0)
    return max(0, round(overhead + _dot(factors, x)))


# -- evaluation ---------------------------------------------------------------------------
def _quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _summary(errors: list[float]) -> dict[str, float | None]:
    if not errors:
        return {"median_pct": None, "p90_pct": None}
    return {"median_pct": round(100 * _quantile(errors, 0.5), 2),
            "p90_pct": round(100 * _quantile(errors, 0.9), 2)}


def _holdout_splits(observations: list[Observation]) -> tuple[str, list[tuple[set[int], set[int]]]]:
    """(method, [(held-out orders, orders excluded from the fit)]) for one model."""
    groups = sorted({o.group_id for o in observations})
    if len(groups) >= 2:
        splits = []
        for group in groups:
            held = {o.order for o in observations if o.group_id == group}
            splits.append((held, held))
        return "leave-one-session-out", splits
    orders = sorted(o.order for o in observations)
    if len(orders) >= MIN_CALLS_FOR_TEMPORAL_HOLDOUT:
        second_half = set(orders[len(orders) // 2:])
        return ("temporal hold-out (one session: fitted on its first half, scored on the "
                "second)", [(second_half, second_half)])
    everything = set(orders)
    return "one session, few calls: factors from the other models only", [(everything, everything)]


def _evaluate(model: str, direction: str, data: Dataset) -> dict[str, Any]:
    prompt = direction == "prompt"
    everything = data.prompt if prompt else data.output
    mine = [o for o in everything if o.model == model]
    method, splits = _holdout_splits(mine)
    threads = _by_thread(mine)
    heuristic, calibrated, no_overhead, shares = [], [], [], []
    implausible = 0
    for held, excluded in splits:
        train = [o for o in everything if o.order not in excluded]
        factors = fit_model_factors(train, model, with_overhead=True)
        intercept = fit_intercept([o for o in train if o.model == model], factors)
        for o in mine:
            if o.order not in held:
                continue
            if not prompt:
                implausible += o.y < 0.1 * sum(o.x)
                heuristic.append(abs(sum(o.x) - o.y) / o.y)
                calibrated.append(abs((intercept or 0.0) + _dot(factors, o.x) - o.y) / o.y)
                continue
            others = [t for t in threads[o.thread_id] if t.order != o.order]
            if not others:
                continue   # a thread's only recorded call: nothing tells its overhead
            ones = (PRIOR_FACTOR,) * len(CLASSES)
            heuristic_estimate = thread_overhead(others, ones) + sum(o.x)  # type: ignore[operator]
            calibrated_estimate = thread_overhead(others, factors) + _dot(factors, o.x)  # type: ignore[operator]
            heuristic.append(abs(heuristic_estimate - o.y) / o.y)
            calibrated.append(abs(calibrated_estimate - o.y) / o.y)
            shares.append(sum(o.x) / o.y)
            if intercept is not None:
                no_overhead.append(abs(intercept + _dot(factors, o.x) - o.y) / o.y)
    cal = _summary(calibrated)
    result: dict[str, Any] = {
        "model": model, "direction": direction,
        "n_calls": sum(1 for c in data.calls if c["model"] == model),
        "n_scored": len(heuristic),
        "n_sessions": len({o.group_id for o in mine}),
        "evaluation": method,
        "heuristic": _summary(heuristic), "calibrated": cal,
        "target_pct": TARGET_PCT,
        "within_target": None if cal["median_pct"] is None else cal["median_pct"] <= TARGET_PCT,
        "gap_pct": None if cal["median_pct"] is None else round(cal["median_pct"] - TARGET_PCT, 2),
        "factors": dict(zip(CLASSES, (round(f, 3) for f in
                                      fit_model_factors(everything, model, with_overhead=True)))),
    }
    if prompt:
        # how much of the recorded prompt the transcript explains (the rest is overhead): when
        # the overhead dominates, any estimator's % error on the whole prompt is small
        result["transcript_share_pct"] = (round(100 * _quantile(shares, 0.5), 1) if shares else None)
        result["calibrated_with_model_intercept"] = _summary(no_overhead)
    else:
        # recorded output far below the visible output: a partial count (Claude Code writes the
        # stream's first usage on many calls, e.g. output_tokens = 1), not an estimator error
        result["n_implausible_recorded"] = implausible
    return result


def estimator_report(lake: Lake) -> dict[str, Any]:
    """Heuristic vs calibrated error against recorded usage, per model (see module docstring)."""
    calls = load_calls(lake)
    data = build_dataset(calls)
    models = sorted({c["model"] for c in calls})
    rows = [_evaluate(model, direction, data) for model in models for direction in DIRECTIONS]
    until = max((c["timestamp"] for c in calls if c["timestamp"] is not None), default=None)
    return {
        "target_pct": TARGET_PCT,
        "n_calls": len(calls),
        "data_until": until.isoformat() if isinstance(until, datetime) else None,
        "method": ("prompt = thread overhead (median of recorded - estimate over the thread's "
                   "other calls) + factors x heuristic class tokens; heuristic: factors 1.0; "
                   "error = |estimate - recorded| / recorded per call; calls alone in their "
                   "thread are not scored; output = model intercept + factors x heuristic of the call's own rows"),
        "models": rows,
    }
