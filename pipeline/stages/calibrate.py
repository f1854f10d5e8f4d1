"""Calibration of the token heuristic against recorded usage, per model and content class.

Fits per-model factors (prose, code, CJK; a real tokenizer's count for the output where one
ships offline) with a within-thread ridge least-squares fit, scores them leave-one-session-out
(:func:`estimator_report`) and stores ``token_calibration``; :func:`est_tokens_calibrated` reads
it. The method, the data and the evaluation: docs/calibration.md.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core import sqlfiles

from pipeline.text import tokenizers
from pipeline.core.errors import TokenizerUnavailableError
from pipeline.core.lake import Lake, holds_lake_lock, read_parquet
from pipeline.text.tokens import cjk_count, estimate_tokens
from pipeline.text.written_output import WrittenRow, written_pieces

CLASSES = ("prose", "code", "cjk")
TOOL_CALL = "tool_call"
DIRECTIONS = ("prompt", "output")
# What a fit's factors multiply: the heuristic's content classes, or a real tokenizer's count
# (the output of a model whose tokenizer ships, see output_basis)
HEURISTIC = "heuristic"
TOKENS = "tokens"
REAL_ENCODINGS = ("o200k_base", "cl100k_base", "claude")
# the terms of each fit, keyed "<direction>" (heuristic basis) or "<direction>:<encoding>":
# heuristic tokens per content class, or the real token count; and for output the number of
# tool calls the call made (its framing)
FEATURES = {"prompt": CLASSES, "output": CLASSES + (TOOL_CALL,),
            **{f"output:{encoding}": (TOKENS, TOOL_CALL) for encoding in REAL_ENCODINGS}}
ALL_MODELS = "*"
TARGET_PCT = 5.0
PRIOR_FACTOR = 1.0
# Ridge weights, as one pseudo-call carrying N heuristic tokens of the class: the pooled fit
# (all models) is pulled towards 1.0 with N = 100; a model's fit is pulled towards the pooled
# factors with N = 1000, so a model seen little borrows from the others (partial pooling).
POOLED_PRIOR_WEIGHT = 100.0 ** 2
MODEL_PRIOR_WEIGHT = 1000.0 ** 2
# On a real basis the factor multiplies a tokenizer's own count, expected 1.0: its pull
# towards 1.0 (pooled and per model) is worth one call of 10,000 tokens, so a few calls whose
# count holds what the transcript lost (a Task call saved without its prompt) cannot drag it;
# thousands of calls still move it where the vocabulary is only approximate (Claude).
REAL_TOKENS_PRIOR_WEIGHT = 10_000.0 ** 2
FACTOR_BOUNDS = (0.25, 4.0)
# The framing per tool call (output only), in tokens per call: a weak prior of 0 (the
# heuristic adds nothing), worth one call one tool call away from its model's mean, for the
# pooled fit and for a model's own (pulled towards 0 too, not towards the pooled value: the
# framing is the model's own tool-call syntax); never negative. The weight is the ratio of
# the noise of an output count (tens of tokens) to the spread of framings (0 to ~60 tokens).
TOOL_CALL_PRIOR_WEIGHT = 1.0
TOOL_CALL_BOUNDS = (0.0, 1000.0)
MIN_CALLS_FOR_TEMPORAL_HOLDOUT = 6
CODE_KINDS = ("tool_use", "tool_result")
# A recorded output count with more visible characters per token than this is not a complete
# count (typical text and code run at 2-5 characters per token, the heuristic assumes 4).
MAX_CHARS_PER_TOKEN = 10

Factors = tuple[float, ...]

TOKEN_CALIBRATION = pa.schema([
    ("model", pa.string()),
    ("direction", pa.string()),        # prompt | output
    ("content_class", pa.string()),    # prose | code | cjk | tool_call (output only)
    ("factor", pa.float64()),          # recorded tokens per heuristic token of the class
                                       # (tool_call: tokens of framing per tool call)
    ("intercept", pa.float64()),       # prompt: tokens outside the transcript (system prompt, tools)
    ("n_calls", pa.int64()),           # recorded API calls the fit rests on
    ("n_fit_calls", pa.int64()),       # calls that entered the least squares (threads of 2+
                                       # calls for prompt; complete visible counts for output)
    ("n_sessions", pa.int64()),
    ("class_tokens", pa.int64()),      # heuristic tokens of the class seen by the fit (0 =
                                       # prior only; tool_call: the number of tool calls;
                                       # tokens: the real tokenizer's count)
    ("data_until", pa.timestamp("us", tz="UTC")),  # newest call used (not the wall clock: deterministic)
    ("basis", pa.string()),            # heuristic | an encoding (output of a model whose exact
                                       # tokenizer ships: content classes tokens, tool_call)
])


def _fit_key(direction: str, basis: str = HEURISTIC) -> str:
    """The key of a fit in FEATURES: the direction, with the encoding for a real basis."""
    return direction if basis == HEURISTIC else f"{direction}:{basis}"


def tokenizer_available(encoding: str) -> bool:
    """Whether the ``tokenizers`` extra can count ``encoding`` here (installed: the
    tokenizer itself is loaded only when a text not counted before needs it)."""
    return encoding in tokenizers.ENCODINGS and tokenizers.available(encoding)


def output_basis(model: str | None) -> str:
    """What the output calibration of ``model`` counts: its tokenizer's encoding where one
    ships and the extra is installed (exact for OpenAI models, the legacy vocabulary for
    Claude), else the heuristic's content classes."""
    encoding = tokenizers.encoding_for_model(model, approximate=True)
    if encoding in REAL_ENCODINGS and tokenizer_available(encoding):
        return encoding
    return HEURISTIC


def _prior(direction: str) -> tuple[Factors, Factors, Factors, list[tuple[float, float]]]:
    """(prior values, pooled weights, model weights, bounds) of a direction's terms."""
    values, pooled, model, bounds = [], [], [], []
    for feature in FEATURES[direction]:
        framing = feature == TOOL_CALL
        values.append(0.0 if framing else PRIOR_FACTOR)
        pooled.append(TOOL_CALL_PRIOR_WEIGHT if framing else
                      REAL_TOKENS_PRIOR_WEIGHT if feature == TOKENS else POOLED_PRIOR_WEIGHT)
        model.append(TOOL_CALL_PRIOR_WEIGHT if framing else
                     REAL_TOKENS_PRIOR_WEIGHT if feature == TOKENS else MODEL_PRIOR_WEIGHT)
        bounds.append(TOOL_CALL_BOUNDS if framing else FACTOR_BOUNDS)
    return tuple(values), tuple(pooled), tuple(model), bounds


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
    """One recorded quantity ``y`` (prompt or visible output tokens) against features ``x``."""

    model: str
    group_id: str          # the hold-out unit: a session with its sub-agents
    thread_id: str
    order: int             # position of the call in the data (session order)
    x: Factors
    y: float
    subset: str = ""       # output: which kind of count (see OUTPUT_SUBSETS)
    plain: float = 0.0     # output on a real basis: the heuristic estimate (est_tokens of the
                           # same rows), the report's comparison


# Output calls, by what their recorded count holds beyond the transcript's visible rows.
REASONING_APART = "hidden reasoning recorded apart (subtracted)"
THINKING_IN_COUNT = "thinking rows, no reasoning count (hidden part unknown)"
VISIBLE_ONLY = "no thinking or hidden reasoning"
OUTPUT_SUBSETS = (REASONING_APART, THINKING_IN_COUNT, VISIBLE_ONLY)


@dataclass
class Dataset:
    calls: list[dict]
    prompt: list[Observation]
    output: list[Observation]           # complete visible counts: fitted and scored
    partial_output: list[Observation]   # counts written before the call ended: scored apart
    hidden_only: list[int]              # orders of calls whose recorded output is all hidden
    # output on a real tokenizer's count, for the models whose tokenizer ships: model ->
    # encoding, and the observations by encoding (the same calls as in output/partial_output)
    output_basis: dict[str, str] = field(default_factory=dict)
    real_output: dict[str, list[Observation]] = field(default_factory=dict)
    real_partial: dict[str, list[Observation]] = field(default_factory=dict)
    # the evaluation's per-thread state, built on first use (_FoldFits, _ThreadOverheads)
    fits: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


def visible_output(call: dict) -> tuple[Factors, float, int, str]:
    """(features, visible recorded tokens, visible characters, subset) of one call's output
    (:func:`fit_inputs` on one row)."""
    rows = fit_inputs(pa.Table.from_pylist([call])).every_output
    return tuple(rows.x[0].tolist()), float(rows.y[0]), int(rows.chars[0]), rows.subsets[0]


@dataclass
class FitRows:
    """One fit's observations as columns, rows in data order: what :func:`fit_table` fits
    and what :func:`build_dataset` turns into :class:`Observation` objects."""

    x: np.ndarray          # (rows, terms) features
    y: np.ndarray          # recorded tokens
    orders: np.ndarray     # position of each row's call in the data
    models: np.ndarray     # model of each row (objects)
    threads: np.ndarray    # thread of each row (objects)
    # the threads as integers (one per thread, any numbering): what the fits group by,
    # without a Python step per row
    thread_codes: np.ndarray
    subsets: list | None = None      # output: which kind of count
    plain: np.ndarray | None = None  # output on a real basis: the heuristic estimate
    chars: np.ndarray | None = None  # output: visible characters

    def take(self, rows: np.ndarray) -> "FitRows":
        """These rows only, in this order."""
        return FitRows(self.x[rows], self.y[rows], self.orders[rows], self.models[rows],
                       self.threads[rows], self.thread_codes[rows],
                       None if self.subsets is None else [self.subsets[i] for i in rows.tolist()],
                       None if self.plain is None else self.plain[rows],
                       None if self.chars is None else self.chars[rows])

    def of_model(self, model: str) -> "FitRows":
        return self if model == ALL_MODELS else self.take(np.flatnonzero(self.models == model))

    def observations(self, groups: list) -> list[Observation]:
        subsets = self.subsets or [""] * len(self.y)
        plain = self.plain.tolist() if self.plain is not None else [0.0] * len(self.y)
        return [Observation(model, groups[order], thread, order, tuple(x), y, subset, p)
                for model, thread, order, x, y, subset, p in zip(
                    self.models.tolist(), self.threads, self.orders.tolist(), self.x.tolist(),
                    self.y.tolist(), subsets, plain)]


@dataclass
class FitInputs:
    """Every fit's rows of some calls (see :func:`fit_inputs`)."""

    prompt: FitRows
    output: FitRows                     # complete visible counts
    partial_output: FitRows             # counts written before the call ended
    hidden_only: list[int]              # orders of calls whose recorded output is all hidden
    output_basis: dict[str, str]        # model -> encoding, for the models on a real basis
    real_output: dict[str, FitRows]     # by encoding
    real_partial: dict[str, FitRows]
    every_output: FitRows               # every call's output row, recorded or not

    def rows(self, key: str, partial: bool = False) -> FitRows | None:
        direction, _, basis = key.partition(":")
        if direction == "prompt":
            return self.prompt
        if not basis:
            return self.partial_output if partial else self.output
        return (self.real_partial if partial else self.real_output).get(basis)


def _column_codes(table: pa.Table, name: str) -> np.ndarray:
    """A column's values as integers, equal values (NULL included) the same integer."""
    encoded = pc.dictionary_encode(table.column(name).combine_chunks(), null_encoding="encode")
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _numbers(table: pa.Table, name: str) -> np.ndarray:
    """A numeric column as doubles, NULL as 0 (``float(value or 0)``, column-wise)."""
    column = table.column(name)
    if pa.types.is_null(column.type):
        return np.zeros(len(table))
    return pc.fill_null(column.cast(pa.float64()), 0.0).to_numpy()


def _nulls(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).is_null().to_numpy(zero_copy_only=False)


def fit_inputs(calls: pa.Table) -> FitInputs:
    """The prompt and output observations of per-call rows (``select_calibration_calls``, with
    :func:`load_calls`'s real counts where a call has ``out_basis``), column-wise.

    Output: where the source records the hidden reasoning apart, it is subtracted and the
    thinking rows (its summary) are not part of the estimate; otherwise thinking rows are
    output the model wrote and count like prose. A count with more visible characters per
    token than ``MAX_CHARS_PER_TOKEN`` is partial (scored apart, not fitted)."""
    n = len(calls)
    orders = np.arange(n, dtype=np.int64)
    models = np.array(calls.column("model").to_pylist(), dtype=object)
    threads = np.array(calls.column("thread_id").to_pylist(), dtype=object)
    prompt = FitRows(np.column_stack([_numbers(calls, f"ctx_{c}") for c in CLASSES])
                     .reshape(n, len(CLASSES)), _numbers(calls, "recorded_prompt"),
                     orders, models, threads, _column_codes(calls, "thread_id"))
    # output, visible part
    apart = ~_nulls(calls, "recorded_reasoning")
    reasoning = _numbers(calls, "recorded_reasoning")
    thinking_blocks = _numbers(calls, "out_thinking_blocks") != 0

    def with_thinking(name: str, thinking: str) -> np.ndarray:
        # thinking rows count as output where no reasoning count is recorded apart
        value = _numbers(calls, name)
        return np.where(apart, value, value + _numbers(calls, thinking))

    prose = with_thinking("out_prose", "out_thinking_prose")
    cjk = with_thinking("out_cjk", "out_thinking_cjk")
    chars = with_thinking("out_chars", "out_thinking_chars")
    x = np.column_stack([prose, _numbers(calls, "out_code"), cjk,
                         _numbers(calls, "out_tool_blocks")]).reshape(n, 4)
    y = _numbers(calls, "recorded_output") - reasoning
    subsets = np.where(apart, np.where((reasoning > 0) | thinking_blocks, REASONING_APART,
                                       VISIBLE_ONLY),
                       np.where(thinking_blocks, THINKING_IN_COUNT, VISIBLE_ONLY)).tolist()
    recorded = ~_nulls(calls, "recorded_output")
    visible = recorded & (y > 0)
    partial = visible & (y * MAX_CHARS_PER_TOKEN < chars)
    output_threads = np.array([f"output:{model}" for model in models.tolist()], dtype=object)
    output_codes = _column_codes(calls, "model")   # one output "thread" per model
    heuristic = FitRows(x, y, orders, models, output_threads, output_codes, subsets, chars=chars)
    bases = (calls.column("out_basis").to_pylist() if "out_basis" in calls.column_names
             else [None] * n)
    bases = [basis or HEURISTIC for basis in bases]
    data = FitInputs(prompt, heuristic.take(np.flatnonzero(visible & ~partial)),
                     heuristic.take(np.flatnonzero(partial)),
                     np.flatnonzero(recorded & ~visible).tolist(),
                     {model: basis for model, basis in zip(models.tolist(), bases)
                      if basis != HEURISTIC}, {}, {}, heuristic)
    if data.output_basis:
        tokens = with_thinking("out_tokens", "out_thinking_tokens")
        real = FitRows(np.column_stack([tokens, x[:, 3]]).reshape(n, 2), y, orders, models,
                       output_threads, output_codes, subsets, x[:, 0] + x[:, 1] + x[:, 2])
        basis_of = np.array(bases, dtype=object)
        for basis in sorted(set(data.output_basis.values())):
            mine = visible & (basis_of == basis)
            for found, rows in ((data.real_output, mine & ~partial),
                                (data.real_partial, mine & partial)):
                if rows.any():
                    found[basis] = real.take(np.flatnonzero(rows))
    return data


def build_dataset(calls: list[dict]) -> Dataset:
    """:func:`fit_inputs` of per-call rows as :class:`Observation` lists (the evaluation's
    leave-one-session-out folds work on them)."""
    table = pa.Table.from_pylist(calls) if calls else None
    if table is None:
        return Dataset(calls, [], [], [], [])
    data = fit_inputs(table)
    groups = table.column("group_id").to_pylist()
    return Dataset(calls, data.prompt.observations(groups), data.output.observations(groups),
                   data.partial_output.observations(groups), data.hidden_only,
                   dict(data.output_basis),
                   {b: rows.observations(groups) for b, rows in data.real_output.items()},
                   {b: rows.observations(groups) for b, rows in data.real_partial.items()})


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """The solution of the small ridge-regularised normal equations (LAPACK, partial pivoting)."""
    return np.linalg.solve(np.array(matrix, dtype=float), np.array(vector, dtype=float)).tolist()


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
        n, width = len(members), len(members[0].x)
        mean_x = [sum(o.x[i] for o in members) / n for i in range(width)]
        mean_y = sum(o.y for o in members) / n
        pairs += [(tuple(a - b for a, b in zip(o.x, mean_x)), o.y - mean_y) for o in members]
    return pairs


def fit_factors(observations: list[Observation], direction: str = "prompt", *,
                with_overhead: bool, prior: Factors | None = None,
                weights: Factors | None = None) -> Factors:
    """Ridge least squares of ``y ~ f . x`` (within threads when ``with_overhead``) pulled
    towards ``prior`` (default: the heuristic, framing 0) with ``weights`` per term (default:
    the pooled weights), each term clamped to its bounds."""
    x, y = _xy(observations, direction)
    return _ridge(x, y, [o.thread_id for o in observations], direction,
                  with_overhead=with_overhead, prior=prior, weights=weights)


def _ridge(x: np.ndarray, y: np.ndarray, threads, direction: str, *, with_overhead: bool,
           prior: Factors | None = None, weights: Factors | None = None) -> Factors:
    """:func:`fit_factors` of observations given as columns."""
    default_prior, pooled_weights, _model_weights, bounds = _prior(direction)
    prior = default_prior if prior is None else prior
    weights = pooled_weights if weights is None else weights
    x, y = _centred_columns(x, y, threads, with_overhead)
    xtx = x.T @ x + np.diag(np.asarray(weights, dtype=float))
    xty = x.T @ y + np.asarray(weights, dtype=float) * np.asarray(prior, dtype=float)
    solved = np.linalg.solve(xtx, xty)
    return tuple(min(high, max(low, float(f))) for f, (low, high) in zip(solved, bounds))


def _centred_columns(x: np.ndarray, y: np.ndarray, threads,
                     with_overhead: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_centred` of observations given as columns, as arrays (rows in the same order),
    for the least squares."""
    if not with_overhead or not len(y):
        return x, y
    width = x.shape[1]
    codes, groups = _first_seen_codes(threads)
    counts = np.bincount(codes)
    keep = counts[codes] >= 2
    sums_x = np.zeros((len(groups), width))
    np.add.at(sums_x, codes, x)
    sums_y = np.bincount(codes, weights=y)
    x = x - sums_x[codes] / counts[codes][:, None]
    y = y - sums_y[codes] / counts[codes]
    # threads in first-seen order, each thread's rows together (as _centred lists them)
    order = np.argsort(codes[keep], kind="stable")
    return x[keep][order], y[keep][order]


def fit_model_factors(observations: list[Observation], model: str, direction: str = "prompt", *,
                      with_overhead: bool, pooled: Factors | None = None,
                      own: list[Observation] | None = None) -> Factors:
    """A model's factors: its own calls, pulled towards the factors pooled over all models
    (``pooled``: those, when the caller has them already; ``own``: the model's observations,
    in order, when the caller has them grouped already)."""
    if pooled is None:
        pooled = fit_factors(observations, direction, with_overhead=with_overhead)
    if model == ALL_MODELS:
        return pooled
    # the framing of a tool call is the model's own syntax: not borrowed from other models
    prior = tuple(0.0 if f == TOOL_CALL else p for f, p in zip(FEATURES[direction], pooled))
    if own is None:
        own = [o for o in observations if o.model == model]
    return fit_factors(own, direction, with_overhead=with_overhead, prior=prior,
                       weights=_prior(direction)[2])


def thread_overhead(others: Iterable[Observation], factors: Factors) -> float | None:
    """Median of ``y - f . x`` over recorded calls of a thread (not the one estimated)."""
    values = [o.y - _dot(factors, o.x) for o in others]
    return _quantile(values, 0.5) if values else None


def fit_intercept(observations: Iterable[Observation], factors: Factors) -> float | None:
    """Median over threads of the thread overhead: the prompt a transcript does not show."""
    values = [thread_overhead(members, factors) for members in _by_thread(observations).values()]
    return _quantile([v for v in values if v is not None], 0.5) if values else None


# -- real token counts, remembered ---------------------------------------------------------
TOKEN_COUNTS = "token_counts"
TOKEN_COUNTS_SCHEMA = pa.schema([
    ("encoding", pa.string()),
    ("piece_sha256", pa.string()),   # sha256 of the counted text (UTF-8), hex
    ("tokens", pa.int64()),
])


def count_pieces(lake: Lake, encoding: str, texts: list[str], *, store: bool = False,
                 merge: bool = False) -> list[int]:
    """The ``encoding`` token count of each text, remembered in ``derived/token_counts/
    <encoding>.parquet`` by the sha256 of the text: only texts not counted before go to the
    tokenizer (a real tokenizer counts ~6 MB/s here; the output of a 500 MB archive is ~20 MB,
    and the nightly job would count it all again each night). ``store`` (the calibrate stage,
    under the lake lock) rewrites the file with exactly these texts' counts, so it never holds
    what the lake no longer has; with ``merge`` (the calibrate stage on some sessions) the new
    counts are added to those already there. A report only reads it."""
    path = lake.derived_dir / TOKEN_COUNTS / f"{encoding}.parquet"
    known: dict[str, int] = {}
    if path.exists():
        stored = read_parquet(path, columns=["piece_sha256", "tokens"])
        known = dict(zip(stored.column(0).to_pylist(), stored.column(1).to_pylist()))
    digests = [hashlib.sha256(text.encode("utf-8")).hexdigest() for text in texts]
    missing = {digest: text for digest, text in zip(digests, texts) if digest not in known}
    if missing:
        known.update(zip(missing, tokenizers.count_tokens_batch(list(missing.values()), encoding)))
    if store and (missing or not merge):
        current = sorted(set(known) if merge else set(digests))
        lake.write_derived(TOKEN_COUNTS, encoding, pa.table(
            [[encoding] * len(current), current, [known[d] for d in current]],
            schema=TOKEN_COUNTS_SCHEMA))
    return [known[digest] for digest in digests]


# -- the stored table ---------------------------------------------------------------------
CALIBRATION_CALLS = "calibration_calls"
CALIBRATION_CALLS_ORDER = ["session_id", "first_seq", "call_key"]
OUTPUT_COUNT_FIELDS = [("out_basis", pa.string()), ("out_tokens", pa.int64()),
                       ("out_thinking_tokens", pa.int64())]


def load_calls(lake: Lake, *, store_counts: bool = False,
               sessions: Iterable[str] | None = None) -> list[dict]:
    """The rows of ``select_calibration_calls``, each with ``out_basis`` (:func:`output_basis`
    of its model); a call on a real basis also has ``out_tokens`` and ``out_thinking_tokens``,
    that tokenizer's count of the text of its visible assistant rows and of its thinking rows
    (``select_calibration_output_texts``, only for those models' calls; counted through
    :func:`count_pieces`, which ``store_counts`` lets remember them). ``sessions``: only the
    calls of these sessions."""
    return _calls_table(lake, store_counts=store_counts, sessions=sessions).to_pylist()


def _calls_table(lake: Lake, *, store_counts: bool, sessions: Iterable[str] | None) -> pa.Table:
    wanted = None if sessions is None else sorted(set(sessions))
    with lake.connect(scope=wanted) as con:
        con.execute(sqlfiles.load("create_table_calibration_rows"), {"session_ids": wanted})
        table = con.sql(sqlfiles.load("select_calibration_calls")).to_arrow_table()
        models = table.column("model").to_pylist()
        basis_of = {model: output_basis(model) for model in sorted(set(models))}
        real_models = [model for model, basis in basis_of.items() if basis != HEURISTIC]
        texts = []
        if real_models:
            texts = con.execute(sqlfiles.load("select_calibration_output_texts"),
                                {"models": real_models}).fetchall()
    keys = list(zip(table.column("session_id").to_pylist(), table.column("call_key").to_pylist()))
    encoding_of = {key: basis_of[model] for key, model in zip(keys, models)
                   if basis_of[model] != HEURISTIC}
    written: dict[tuple[str, str], list[WrittenRow]] = defaultdict(list)
    # the pieces to count, by encoding: (call, 0 = what it wrote | 1 = thinking, text)
    pieces: dict[str, list[tuple[tuple[str, str], int, str]]] = defaultdict(list)
    for session_id, call_key, _seq, _block_no, is_thinking, kind, text, tool_name in texts:
        key = (session_id, call_key)
        if key not in encoding_of:
            continue
        if is_thinking:
            if text:
                pieces[encoding_of[key]].append((key, 1, text))
        else:
            written[key].append(WrittenRow(kind, text, tool_name))
    for key, rows in written.items():
        # what the model wrote, its tool calls in its own syntax (pipeline.text.written_output)
        pieces[encoding_of[key]] += [(key, 0, piece)
                                     for piece in written_pieces(rows, encoding_of[key])]
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for encoding, batch in pieces.items():
        for (key, slot, _text), n in zip(batch, count_pieces(
                lake, encoding, [text for _key, _slot, text in batch], store=store_counts,
                merge=wanted is not None)):
            counts[key][slot] += n
    if store_counts and wanted is None:   # an encoding no call is counted with any more goes
        for stale in sorted((lake.derived_dir / TOKEN_COUNTS).glob("*.parquet")):
            if stale.stem not in pieces:
                stale.unlink()
    bases = [basis_of[model] for model in models]
    real = [basis != HEURISTIC for basis in bases]
    out = [counts[key][0] if is_real else None for key, is_real in zip(keys, real)]
    thinking = [counts[key][1] if is_real else None for key, is_real in zip(keys, real)]
    for (name, kind), values in zip(OUTPUT_COUNT_FIELDS, (bases, out, thinking)):
        table = table.append_column(pa.field(name, kind), pa.array(values, kind))
    return table


def _table_rows(data: FitInputs, key: str, model: str, stats: dict,
                pooled: dict) -> list[dict]:
    """The ``token_calibration`` rows of one model (or ``*``) and one fit (see _fit_key).
    ``stats``: the model's calls, sessions and newest call; ``pooled``: a cache, per fit, of
    its pooled factors (the same for every model of one table)."""
    direction, _, basis = key.partition(":")
    everything = data.rows(key)
    if key not in pooled:
        pooled[key] = _ridge(everything.x, everything.y, everything.thread_codes, key,
                             with_overhead=True)
    pooled_factors = pooled[key]
    mine = everything.of_model(model)
    if model == ALL_MODELS:
        factors = pooled_factors
    else:   # the framing of a tool call is the model's own syntax: not borrowed
        prior = tuple(0.0 if f == TOOL_CALL else p for f, p in zip(FEATURES[key], pooled_factors))
        factors = _ridge(mine.x, mine.y, mine.thread_codes, key, with_overhead=True, prior=prior,
                         weights=_prior(key)[2])
    # fit_intercept and _centred, vectorised with the same floating-point operations
    intercept = (_intercept(_ThreadOverheads(mine.x, mine.y, mine.thread_codes), factors,
                            np.empty(0, dtype=np.int64)) if len(mine.y) else None)
    fitted, _y = _centred_columns(mine.x, mine.y, mine.thread_codes, direction == "prompt")
    return [{
        "model": model, "direction": direction, "content_class": content_class,
        "factor": round(factors[i], 6),
        "intercept": None if intercept is None else round(intercept, 3),
        "n_calls": stats["n_calls"], "n_fit_calls": len(fitted),
        "n_sessions": stats["n_sessions"],
        "class_tokens": int(sum(np.abs(fitted[:, i]).tolist())),   # summed in row order
        "data_until": stats["until"], "basis": basis or HEURISTIC,
    } for i, content_class in enumerate(FEATURES[key])]


def _model_stats(calls: pa.Table) -> dict[str, dict]:
    """Per model (and ``*``): its calls, its sessions (groups) and its newest call."""
    every = pc.CountOptions(mode="all")   # as a set of the values would count them
    by_model = calls.group_by("model").aggregate([
        ("model", "count", every), ("group_id", "count_distinct", every), ("timestamp", "max")])
    stats = {row["model"]: {"n_calls": row["model_count"],
                            "n_sessions": row["group_id_count_distinct"],
                            "until": row["timestamp_max"]} for row in by_model.to_pylist()}
    stats[ALL_MODELS] = {"n_calls": len(calls),
                         "n_sessions": pc.count_distinct(calls.column("group_id"), mode="all").as_py(),
                         "until": pc.max(calls.column("timestamp")).as_py()}
    return stats


def fit_table(calls: pa.Table) -> pa.Table:
    """The ``token_calibration`` rows fitted on all calls (sorted, deterministic): per model,
    prompt and output on the heuristic basis, then output on the model's real basis if any
    (``*``: on every real basis in the data). A real basis with no complete visible count
    yet (its calls all partial or hidden, as in a session that has just begun) has no rows:
    its model's output falls back to the heuristic fit. Column-wise: a night refits from the
    remembered rows of every call in a fraction of a second."""
    data = fit_inputs(calls)
    stats = _model_stats(calls)
    rows: list[dict[str, Any]] = []
    pooled: dict = {}
    for model in sorted(set(data.prompt.models.tolist())) + [ALL_MODELS]:
        bases = (sorted(set(data.output_basis.values())) if model == ALL_MODELS
                 else [data.output_basis[model]] if model in data.output_basis else [])
        for key in [*DIRECTIONS, *(_fit_key("output", basis) for basis in bases)]:
            if data.rows(key) is not None:
                rows += _table_rows(data, key, model, stats[model], pooled)
    return pa.Table.from_pylist(rows, schema=TOKEN_CALIBRATION)


@holds_lake_lock
def calibrate(lake: Lake, *, sessions: Iterable[str] | None = None) -> pa.Table:
    """Fit the calibration on every recorded call in the lake and store ``token_calibration``.

    The per-call rows the fit reads are remembered in ``derived/calibration_calls`` (per
    session bucket). ``sessions`` (the nightly job's owed sessions): only their calls are read
    from the lake again; the fit runs on the remembered rows of every session."""
    fresh = _calls_table(lake, store_counts=True, sessions=sessions)
    lake.write_session_rows(CALIBRATION_CALLS, "all", fresh, sessions,
                            sort_by=CALIBRATION_CALLS_ORDER)
    calls = fresh if sessions is None else lake.read_derived(CALIBRATION_CALLS, "all", fresh.schema)
    calls = calls.sort_by([(name, "ascending") for name in CALIBRATION_CALLS_ORDER])
    table = fit_table(calls)
    lake.write_derived("token_calibration", "all", table)
    return table


@dataclass
class TokenCalibration:
    """Fitted factors by (model, direction) on the heuristic basis; unknown models fall back to
    ``*``, then to the heuristic (factors 1.0, no framing). ``real_output``: the output fits on
    a real tokenizer's count, by (model, encoding): ((tokens factor, framing), intercept)."""

    factors: dict[tuple[str, str], Factors]
    intercepts: dict[tuple[str, str], float | None]
    real_output: dict[tuple[str, str], tuple[Factors, float | None]] = field(default_factory=dict)

    @classmethod
    def from_table(cls, table: pa.Table) -> "TokenCalibration":
        """Read ``token_calibration``; a table without the ``basis`` column is all heuristic,
        a missing content class (a table without ``tool_call``) takes its prior."""
        factors: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
        intercepts: dict[tuple[str, str], float | None] = {}
        for row in table.to_pylist():
            key = (row["model"], _fit_key(row["direction"], row.get("basis") or HEURISTIC))
            factors[key][row["content_class"]] = row["factor"]
            intercepts[key] = row["intercept"]
        fitted = {k: tuple(v.get(f, p) for f, p in zip(FEATURES[k[1]], _prior(k[1])[0]))
                  for k, v in factors.items() if k[1] in FEATURES}
        heuristic = {k: v for k, v in fitted.items() if k[1] in DIRECTIONS}
        real = {(model, key.partition(":")[2]): (v, intercepts[model, key])
                for (model, key), v in fitted.items() if key not in DIRECTIONS}
        return cls(heuristic, {k: intercepts[k] for k in heuristic}, real)

    @classmethod
    def load(cls, lake: Lake) -> "TokenCalibration":
        """The stored table, or an empty calibration (every factor 1.0) when none was fitted.
        Reads the one Parquet file directly: no need to build every view of the lake."""
        stored = lake.derived_dir / "token_calibration" / "all.parquet"
        if not stored.exists():
            return cls({}, {})
        return cls.from_table(read_parquet(stored))

    def lookup(self, model: str | None, direction: str = "prompt",
               basis: str = HEURISTIC) -> tuple[Factors, float | None]:
        """(factors, intercept) of a fit: ``basis`` an encoding for the output on a real
        tokenizer's count (factors: tokens, tool_call)."""
        if basis != HEURISTIC:
            if _fit_key(direction, basis) not in FEATURES:
                raise ValueError(f"no fit on the basis {basis!r} for the {direction} direction")
            for key in ((model or ALL_MODELS, basis), (ALL_MODELS, basis)):
                if key in self.real_output:
                    return self.real_output[key]
            return _prior(_fit_key(direction, basis))[0], None
        for key in ((model or ALL_MODELS, direction), (ALL_MODELS, direction)):
            if key in self.factors:
                return self.factors[key], self.intercepts.get(key)
        return _prior(direction)[0], None


def est_tokens_calibrated(calibration: TokenCalibration, model: str | None,
                          classes: dict[str, int], *, direction: str = "prompt",
                          recorded: Iterable[tuple[float, dict[str, int]]] = ()) -> int:
    """The calibrated estimate of a prompt (or a visible output) from its heuristic class tokens.

    ``classes`` holds the heuristic tokens per content class (see :func:`class_tokens`); for
    an output also ``tool_call``, the number of tool calls it makes.
    Prompt: the overhead (system prompt, tools) is the median of ``recorded - f . classes``
    over ``recorded`` = (recorded prompt tokens, class tokens) of other calls of the same
    thread, or the model's intercept when there are none (0 when the model has none).
    Output: the model's intercept plus the calibrated sum and the framing of its tool calls;
    it estimates the visible output (hidden reasoning is not in a transcript).
    """
    factors, intercept = calibration.lookup(model, direction)
    features = FEATURES[direction]
    x = [float(classes.get(c, 0)) for c in features]
    if direction == "output":
        return max(0, round((intercept or 0.0) + _dot(factors, x)))
    overheads = [y - _dot(factors, [float(k.get(c, 0)) for c in features]) for y, k in recorded]
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


def _quantile_of(values: np.ndarray, q: float) -> float:
    """:func:`_quantile` of an array, with the same floating-point operations (same result)."""
    if not len(values):
        return math.nan
    pos = (len(values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    part = np.partition(values, [lo, hi])
    low, high = float(part[lo]), float(part[hi])
    return low + (high - low) * (pos - lo)


@dataclass(frozen=True)
class ErrorSummary:
    """Median and p90 absolute % error of an estimate over some calls (None: none scored)."""

    median_pct: float | None = None
    p90_pct: float | None = None

    def to_dict(self) -> dict:
        return {"median_pct": self.median_pct, "p90_pct": self.p90_pct}


@dataclass(frozen=True)
class SubsetEvaluation:
    """The output errors of one kind of call (:data:`OUTPUT_SUBSETS`)."""

    subset: str
    n_scored: int
    heuristic: ErrorSummary
    calibrated: ErrorSummary

    def to_dict(self) -> dict:
        return {"subset": self.subset, "n_scored": self.n_scored,
                "heuristic": self.heuristic.to_dict(), "calibrated": self.calibrated.to_dict()}


@dataclass(frozen=True)
class ModelEvaluation:
    """One row of the estimator report: a model's heuristic and calibrated error in one
    direction (docs/calibration.md). The last fields belong to one direction each."""

    model: str
    direction: str                  # prompt | output
    basis: str                      # heuristic, or the tokenizer the output fit counts with
    n_calls: int
    n_scored: int
    n_sessions: int
    evaluation: str                 # how it was scored, and what the figures leave out
    heuristic: ErrorSummary
    calibrated: ErrorSummary
    target_pct: float
    within_target: bool | None
    gap_pct: float | None           # calibrated median - target (None: nothing scored)
    factors: dict[str, float]
    # prompt: the median share of the recorded prompt the transcript explains, and the
    # error with the model's intercept instead of the thread's own overhead
    transcript_share_pct: float | None = None
    calibrated_with_model_intercept: ErrorSummary | None = None
    # output: on a real basis, the heuristic classes' figures on the same calls
    calibrated_heuristic_basis: ErrorSummary | None = None
    scored: str | None = None
    hidden_reasoning_pct: float | None = None
    n_partial_recorded: int | None = None
    n_hidden_only: int | None = None
    calibrated_with_partial: ErrorSummary | None = None
    subsets: tuple[SubsetEvaluation, ...] = ()

    def to_dict(self) -> dict:
        out = {"model": self.model, "direction": self.direction, "basis": self.basis,
               "n_calls": self.n_calls, "n_scored": self.n_scored, "n_sessions": self.n_sessions,
               "evaluation": self.evaluation, "heuristic": self.heuristic.to_dict(),
               "calibrated": self.calibrated.to_dict(), "target_pct": self.target_pct,
               "within_target": self.within_target, "gap_pct": self.gap_pct,
               "factors": dict(self.factors)}
        if self.direction == "prompt":
            out["transcript_share_pct"] = self.transcript_share_pct
            out["calibrated_with_model_intercept"] = self.calibrated_with_model_intercept.to_dict()
            return out
        if self.calibrated_heuristic_basis is not None:
            out["calibrated_heuristic_basis"] = self.calibrated_heuristic_basis.to_dict()
        out.update(scored=self.scored, hidden_reasoning_pct=self.hidden_reasoning_pct,
                   n_partial_recorded=self.n_partial_recorded, n_hidden_only=self.n_hidden_only,
                   calibrated_with_partial=self.calibrated_with_partial.to_dict(),
                   subsets=[subset.to_dict() for subset in self.subsets])
        return out


@dataclass(frozen=True)
class EstimatorReport:
    """``ctxlake report estimator``: every model's rows (:class:`ModelEvaluation`)."""

    target_pct: float
    n_calls: int                    # recorded calls the report reads
    data_until: str | None          # the last call's time (ISO)
    method: str
    models: list[ModelEvaluation]

    def to_dict(self) -> dict:
        return {"target_pct": self.target_pct, "n_calls": self.n_calls,
                "data_until": self.data_until, "method": self.method,
                "models": [model.to_dict() for model in self.models]}


def _summary(errors: list[float]) -> ErrorSummary:
    if not errors:
        return ErrorSummary()
    return ErrorSummary(round(100 * _quantile(errors, 0.5), 2),
                        round(100 * _quantile(errors, 0.9), 2))


def _holdout_folds(observations: list[Observation]) -> tuple[str, list[np.ndarray]]:
    """(method, folds) for one model: a fold is the orders of the calls it leaves out of the
    fit, which are the calls it scores."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for o in observations:
        by_group[o.group_id].append(o.order)
    if len(by_group) >= 2:
        return "leave-one-session-out", [np.array(by_group[g]) for g in sorted(by_group)]
    orders = sorted(o.order for o in observations)
    if len(orders) >= MIN_CALLS_FOR_TEMPORAL_HOLDOUT:
        return ("temporal hold-out (one session: fitted on its first half, scored on the "
                "second)", [np.array(orders[len(orders) // 2:])])
    return ("one session, few calls: factors from the other models only",
            [np.array(orders, dtype=np.int64)])


# Every fold is a refit. Call by call that costs calls x sessions (minutes on a 500 MB lake),
# so the two classes below keep per thread what a fit and an overhead need, and a fold costs
# its own calls plus one vectorised pass over the model's calls: _FoldFits gives what
# fit_model_factors gives, _ThreadOverheads what thread_overhead and fit_intercept give
# (tests/test_calibration.py compares them fold by fold).
_EXACT_BITS = 1074   # every finite double is an integer multiple of 2**-1074


def _exact(value: float) -> int:
    """``value`` in units of 2**-1074, exactly (so sums and differences are exact)."""
    numerator, denominator = value.as_integer_ratio()
    return numerator << (_EXACT_BITS + 1 - denominator.bit_length())


def _rounded(exact: int) -> float:
    """The double nearest an exact sum (int / int is correctly rounded)."""
    return exact / (1 << _EXACT_BITS)


def _dot_rows(factors: Factors, x: np.ndarray) -> np.ndarray:
    """:func:`_dot` of ``factors`` with each row of ``x``, operation for operation (the
    same doubles)."""
    total = factors[0] * x[:, 0]
    for i in range(1, len(factors)):
        total = total + factors[i] * x[:, i]
    return total


def _first_seen_codes(keys) -> tuple[np.ndarray, list]:
    """(the group number of each row, numbered in first-seen order; the distinct keys in that
    order). ``keys``: any hashable values, or an integer array (thread codes), numbered anew
    without a Python step per row."""
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
        distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        seen = np.argsort(first, kind="stable")
        rank = np.empty(len(distinct), dtype=np.int64)
        rank[seen] = np.arange(len(distinct))
        return rank[inverse.reshape(-1)], distinct[seen].tolist()
    numbers: dict[Any, int] = {}
    codes = np.fromiter((numbers.setdefault(key, len(numbers)) for key in keys),
                        dtype=np.int64, count=len(keys))
    return codes, list(numbers)


def _row_groups(keys) -> tuple[list, np.ndarray, list[np.ndarray]]:
    """(distinct keys in first-seen order, group number of each row, rows of each group in
    ascending order). ``keys``: as :func:`_first_seen_codes` takes them."""
    codes, distinct = _first_seen_codes(keys)
    order = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[order], np.arange(len(distinct)))
    return distinct, codes, np.split(order, starts[1:]) if distinct else []


class _Block(NamedTuple):
    """The calls of a thread (or of one model in a thread) and their centred sums."""

    rows: np.ndarray
    sums: np.ndarray        # column sums of (x, y)
    entries: np.ndarray     # centred cross-products: X'X's upper triangle, then X'y
    exact: list[int]        # the entries in units of 2**-1074


class _FoldFits:
    """:func:`fit_model_factors` (``with_overhead``) of one direction, for any model with
    any of its calls left out (a fold), at the cost of the calls left out.

    The within-thread normal equations are a sum over threads of each thread's centred
    cross-products (a thread's calls of every model for the pooled fit, its calls of one
    model for that model's own). They are kept per thread, and their totals exactly (in
    units of 2**-1074); a fold swaps the terms of the threads it touches for those of the
    calls that stay (recomputed, or downdated with the parallel-variance formula when most
    of the thread stays) and rounds each entry once. The reference accumulates call by call:
    the two differ in the last bits (factors by ~1e-12 relative, as each does from exact
    arithmetic), far below the 3 and 2 decimals the report prints."""

    def __init__(self, observations: list[Observation], direction: str):
        width = len(FEATURES[direction])
        self.direction = direction
        self.prior = _prior(direction)
        self.pairs = [(i, j) for i in range(width) for j in range(i, width)]
        self.pairs += [(i, width) for i in range(width)]     # column ``width`` of z is y
        self.left, self.right = (np.array(side) for side in zip(*self.pairs))
        self.z = np.array([o.x + (o.y,) for o in observations], dtype=float).reshape(
            len(observations), width + 1)
        self.models = np.array([o.model for o in observations], dtype=object)
        orders = np.array([o.order for o in observations], dtype=np.int64)
        self.row_of_order = np.full(int(orders.max(initial=-1)) + 1, -1, dtype=np.int64)
        self.row_of_order[orders] = np.arange(len(orders))
        _threads, self.pooled_of_row, members = _row_groups([o.thread_id for o in observations])
        self.pooled = [self._block(rows) for rows in members]
        self.pooled_total = self._total(self.pooled)
        keys, self.own_of_row, members = _row_groups(
            [(o.thread_id, o.model) for o in observations])
        self.own = [self._block(rows) for rows in members]
        own_of_model: dict[str, list[_Block]] = defaultdict(list)
        for (_thread, model), block in zip(keys, self.own):
            own_of_model[model].append(block)
        self.own_total = {model: self._total(blocks) for model, blocks in own_of_model.items()}

    def rows_of(self, model: str) -> np.ndarray:
        """The rows of ``model``'s observations, ascending."""
        return np.flatnonzero(self.models == model)

    def rows_of_orders(self, orders: np.ndarray) -> np.ndarray:
        """The rows of the calls ``orders`` that have an observation here, ascending."""
        rows = self.row_of_order[orders[orders < len(self.row_of_order)]]
        return np.sort(rows[rows >= 0])

    def _total(self, blocks: list[_Block]) -> list[int]:
        return [sum(column) for column in zip(*(b.exact for b in blocks))] or [0] * len(self.pairs)

    def _centred(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(column sums, centred cross-products) of ``rows``."""
        z = self.z[rows]
        sums = z.sum(axis=0)
        if len(rows) < 2:
            return sums, np.zeros(len(self.pairs))
        centred = z - sums / len(rows)
        return sums, (centred[:, self.left] * centred[:, self.right]).sum(axis=0)

    def _block(self, rows: np.ndarray) -> _Block:
        sums, entries = self._centred(rows)
        return _Block(rows, sums, entries, [_exact(v) for v in entries.tolist()])

    def _kept(self, block: _Block, left_out: np.ndarray) -> list[int]:
        """The exact entries of ``block`` without its rows marked in ``left_out`` (a mask)."""
        gone = left_out[block.rows]
        n, n_gone = len(block.rows), int(gone.sum())
        n_kept = n - n_gone
        if n_kept < 2:   # a thread of one call has no within-thread variation
            return [0] * len(self.pairs)
        if n_kept <= n_gone:
            entries = self._centred(block.rows[~gone])[1]
        else:   # M2(kept) = M2(all) - M2(gone) - n_kept n_gone / n * d d', d the mean gap
            gone_sums, gone_entries = self._centred(block.rows[gone])
            d = gone_sums / n_gone - (block.sums - gone_sums) / n_kept
            entries = (block.entries - gone_entries
                       - (n_kept * n_gone / n) * (d[self.left] * d[self.right]))
        return [_exact(v) for v in entries.tolist()]

    def _without(self, total: list[int], blocks: list[_Block], block_of_row: np.ndarray,
                 left_out: np.ndarray) -> list[int]:
        total = list(total)
        mask = np.zeros(len(self.z), dtype=bool)
        mask[left_out] = True
        for number in np.unique(block_of_row[left_out]).tolist():
            block = blocks[number]
            for p, (old, new) in enumerate(zip(block.exact, self._kept(block, mask))):
                total[p] += new - old
        return total

    def _solve(self, exact: list[int], prior: Factors, weights: Factors) -> Factors:
        """:func:`fit_factors`'s ridge solution from the exact entries."""
        width = len(prior)
        xtx = [[0.0] * width for _ in range(width)]
        xty = [0.0] * width
        for (i, j), value in zip(self.pairs, exact):
            if j == width:
                xty[i] = _rounded(value + _exact(weights[i] * prior[i]))
            else:
                xtx[i][j] = xtx[j][i] = _rounded(value + (_exact(weights[i]) if i == j else 0))
        bounds = self.prior[3]
        return tuple(min(high, max(low, f)) for f, (low, high) in zip(_solve(xtx, xty), bounds))

    def fit(self, model: str, left_out: np.ndarray) -> Factors:
        """``fit_model_factors(observations but the rows left_out, model, direction,
        with_overhead=True)``; ``left_out`` are rows of ``model``."""
        default_prior, pooled_weights, model_weights, _bounds = self.prior
        pooled_total = self.pooled_total
        own_total = self.own_total.get(model, [0] * len(self.pairs))
        if len(left_out):
            pooled_total = self._without(pooled_total, self.pooled, self.pooled_of_row, left_out)
            own_total = self._without(own_total, self.own, self.own_of_row, left_out)
        pooled = self._solve(pooled_total, default_prior, pooled_weights)
        if model == ALL_MODELS:
            return pooled
        prior = tuple(0.0 if f == TOOL_CALL else p
                      for f, p in zip(FEATURES[self.direction], pooled))
        return self._solve(own_total, prior, model_weights)


def _xy(observations: list[Observation], direction: str) -> tuple[np.ndarray, np.ndarray]:
    """The features (one row per observation) and the recorded tokens, as arrays."""
    x = np.array([o.x for o in observations], dtype=float)
    return (x.reshape(len(observations), len(FEATURES[direction])),
            np.array([o.y for o in observations], dtype=float))


class _ThreadOverheads:
    """:func:`thread_overhead` of every thread of some calls at once, for any factors and
    any calls left out; and each call's thread overhead over the thread's other calls.

    A fold's residuals ``y - f . x`` are sorted per thread with one call per bucket of
    threads of similar size (padded with +inf, which sorts last; a call left out is +inf
    too); a large thread takes a partition. The median is then taken with
    :func:`_quantile`'s operations: the same doubles."""

    LARGE = 512

    def __init__(self, x: np.ndarray, y: np.ndarray, threads: list[str]):
        self.x, self.y = x, y
        _keys, self.thread_of_row, self.members = _row_groups(threads)
        self.sizes = np.array([len(m) for m in self.members], dtype=np.int64)
        self.large = [t for t, size in enumerate(self.sizes.tolist()) if size > self.LARGE]
        by_width: dict[int, list[int]] = defaultdict(list)
        for t, size in enumerate(self.sizes.tolist()):
            if size <= self.LARGE:
                by_width[1 << (size - 1).bit_length()].append(t)
        self.buckets = []
        for width, threads_of_width in sorted(by_width.items()):
            index = np.full((len(threads_of_width), width), len(y), dtype=np.int64)
            for row, t in enumerate(threads_of_width):
                index[row, :self.sizes[t]] = self.members[t]
            self.buckets.append((np.array(threads_of_width, dtype=np.int64), index))

    @classmethod
    def of(cls, observations: list[Observation], direction: str) -> "_ThreadOverheads":
        return cls(*_xy(observations, direction), [o.thread_id for o in observations])

    def medians(self, factors: Factors, left_out: np.ndarray) -> np.ndarray:
        """The overhead of every thread with a call not ``left_out`` (rows), in no set order."""
        residuals = np.empty(len(self.y) + 1)
        residuals[:-1] = self.y - _dot_rows(factors, self.x)
        residuals[-1] = math.inf                                  # the padding
        residuals[left_out] = math.inf
        counts = self.sizes - np.bincount(self.thread_of_row[left_out], minlength=len(self.sizes))
        found = []
        for threads, index in self.buckets:
            n = counts[threads]
            values = np.sort(residuals[index[n > 0]], axis=1)
            n = n[n > 0]
            pos = (n - 1) * 0.5
            lo, hi = np.floor(pos), np.ceil(pos)
            at = np.arange(len(n))
            low, high = values[at, lo.astype(np.int64)], values[at, hi.astype(np.int64)]
            found.append(low + (high - low) * (pos - lo))
        for t in self.large:
            values = residuals[self.members[t]]
            values = values[values != math.inf]
            if len(values):
                found.append(np.array([_quantile_of(values, 0.5)]))
        return np.concatenate(found) if found else np.empty(0)

    def without_each(self, factors: Factors, rows: np.ndarray) -> np.ndarray:
        """For each of ``rows``: the overhead of its thread over the thread's other calls
        (NaN for a thread's only call)."""
        out = np.full(len(rows), math.nan)
        thread_of = self.thread_of_row[rows]
        for t in np.unique(thread_of).tolist():
            members = self.members[t]
            n = len(members) - 1    # the others
            if n == 0:
                continue
            where = np.flatnonzero(thread_of == t)
            values = self.y[members] - _dot_rows(factors, self.x[members])
            order = np.argsort(values, kind="stable")
            ranked = values[order]
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            own = rank[np.searchsorted(members, rows[where])]
            pos = (n - 1) * 0.5
            lo, hi = math.floor(pos), math.ceil(pos)
            # the others sorted are the thread's sorted residuals with the call's own taken out
            low, high = ranked[lo + (lo >= own)], ranked[hi + (hi >= own)]
            out[where] = low + (high - low) * (pos - lo)
        return out


def _observations(data: Dataset, key: str, partial: bool = False) -> list[Observation]:
    """The observations of a fit (see _fit_key); ``partial``: the output's partial counts."""
    direction, _, basis = key.partition(":")
    if direction == "prompt":
        return data.prompt
    if not basis:
        return data.partial_output if partial else data.output
    return (data.real_partial if partial else data.real_output).get(basis, [])


def _fits(data: Dataset, key: str) -> _FoldFits:
    if key not in data.fits:
        data.fits[key] = _FoldFits(_observations(data, key), key)
    return data.fits[key]


def _intercept(overheads: _ThreadOverheads, factors: Factors, left_out: np.ndarray) -> float | None:
    """:func:`fit_intercept` of the calls of ``overheads`` but the rows ``left_out``."""
    thread_overheads = overheads.medians(factors, left_out)
    return _quantile_of(thread_overheads, 0.5) if len(thread_overheads) else None


def _result(model: str, key: str, data: Dataset, n_scored: int, method: str,
            heuristic: list[float], calibrated: list[float], **direction_figures
            ) -> ModelEvaluation:
    cal = _summary(calibrated)
    factors = _fits(data, key).fit(model, np.empty(0, dtype=np.int64))   # on every call
    direction, _, basis = key.partition(":")
    return ModelEvaluation(
        model=model, direction=direction, basis=basis or HEURISTIC,
        n_calls=sum(1 for c in data.calls if c["model"] == model),
        n_scored=n_scored,
        n_sessions=len({c["group_id"] for c in data.calls if c["model"] == model}),
        evaluation=method,
        heuristic=_summary(heuristic), calibrated=cal,
        target_pct=TARGET_PCT,
        within_target=None if cal.median_pct is None else cal.median_pct <= TARGET_PCT,
        gap_pct=None if cal.median_pct is None else round(cal.median_pct - TARGET_PCT, 2),
        factors=dict(zip(FEATURES[key], (round(f, 3) for f in factors))),
        **direction_figures)


def _joined(parts: list[np.ndarray]) -> list[float]:
    return np.concatenate(parts).tolist() if parts else []


def _evaluate_prompt(model: str, data: Dataset) -> ModelEvaluation:
    fits = _fits(data, "prompt")
    rows = fits.rows_of(model)
    mine = [data.prompt[i] for i in rows.tolist()]
    method, folds = _holdout_folds(mine)
    overheads = _ThreadOverheads.of(mine, "prompt")
    ones = (PRIOR_FACTOR,) * len(CLASSES)
    heuristic, calibrated, no_overhead, shares = [], [], [], []
    for held in folds:
        left_out = fits.rows_of_orders(held)
        factors = fits.fit(model, left_out)
        held_rows = np.searchsorted(rows, left_out)       # the same calls among the model's
        intercept = _intercept(overheads, factors, held_rows)
        plain = overheads.without_each(ones, held_rows)
        scored = ~np.isnan(plain)   # a thread's only recorded call: nothing tells its overhead
        held_rows, plain = held_rows[scored], plain[scored]
        own = overheads.without_each(factors, held_rows)
        x, y = overheads.x[held_rows], overheads.y[held_rows]
        estimate = _dot_rows(factors, x)
        heuristic.append(np.abs(plain + _dot_rows(ones, x) - y) / y)
        calibrated.append(np.abs(own + estimate - y) / y)
        shares.append(_dot_rows(ones, x) / y)
        if intercept is not None:
            no_overhead.append(np.abs(intercept + estimate - y) / y)
    heuristic, calibrated = _joined(heuristic), _joined(calibrated)
    no_overhead, shares = _joined(no_overhead), _joined(shares)
    # how much of the recorded prompt the transcript explains (the rest is overhead): when
    # the overhead dominates, any estimator's % error on the whole prompt is small
    return _result(model, "prompt", data, len(heuristic), method, heuristic, calibrated,
                   transcript_share_pct=round(100 * _quantile(shares, 0.5), 1) if shares else None,
                   calibrated_with_model_intercept=_summary(no_overhead))


def _evaluate_output(model: str, data: Dataset, basis: str | None = None) -> ModelEvaluation:
    """Held-out error on the visible output of complete counts; partial counts are scored
    apart (with the same factors) and reported, never fitted. ``basis``: the model's own
    (``data.output_basis``, else the heuristic) unless given."""
    basis = data.output_basis.get(model, HEURISTIC) if basis is None else basis
    key = _fit_key("output", basis)
    fits = _fits(data, key)
    rows = fits.rows_of(model)
    everything = _observations(data, key)
    mine = [everything[i] for i in rows.tolist()]
    overheads = _ThreadOverheads.of(mine, key)
    subset_of = np.array([o.subset for o in mine], dtype=object)
    partial = [o for o in _observations(data, key, partial=True) if o.model == model]
    partial_x, partial_y = _xy(partial, key)
    partial_orders = np.array([o.order for o in partial], dtype=np.int64)
    # the same held-out calls as the prompt direction (every recorded call takes part in the
    # split, scored or not)
    method, folds = _holdout_folds([o for o in data.prompt if o.model == model])
    ones = (PRIOR_FACTOR,) * len(CLASSES)
    # the heuristic's estimate of each call (est_tokens of its visible rows), for comparison
    plain_estimate = (_dot_rows(ones, overheads.x) if basis == HEURISTIC
                      else np.array([o.plain for o in mine], dtype=float))
    heuristic, calibrated, with_partial = [], [], []
    by_subset: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for held in folds:
        left_out = fits.rows_of_orders(held)
        factors = fits.fit(model, left_out)
        scored = np.searchsorted(rows, left_out)         # the same calls among the model's
        intercept = _intercept(overheads, factors, scored)
        if intercept is None:   # no call of the model to fit on: the other models' intercept
            if f"{key}:all" not in data.fits:
                data.fits[f"{key}:all"] = _ThreadOverheads.of(everything, key)
            intercept = _intercept(data.fits[f"{key}:all"], factors, left_out) or 0.0
        x, y = overheads.x[scored], overheads.y[scored]
        errors = np.abs(intercept + _dot_rows(factors, x) - y) / y
        plain = np.abs(plain_estimate[scored] - y) / y
        heuristic.append(plain)
        calibrated.append(errors)
        with_partial.append(errors)
        for name in set(subset_of[scored].tolist()):
            same = subset_of[scored] == name
            by_subset[name][0].append(plain[same])
            by_subset[name][1].append(errors[same])
        in_partial = np.isin(partial_orders, held)
        x, y = partial_x[in_partial], partial_y[in_partial]
        with_partial.append(np.abs(intercept + _dot_rows(factors, x) - y) / y)
    heuristic, calibrated, with_partial = map(_joined, (heuristic, calibrated, with_partial))
    by_subset_lists = {name: (_joined(h), _joined(c)) for name, (h, c) in by_subset.items()}
    n_partial = len(with_partial) - len(calibrated)
    calls = [c for c in data.calls if c["model"] == model]
    counted = [c for c in calls if c["recorded_reasoning"] is not None and c["recorded_output"]]
    total = sum(c["recorded_output"] for c in counted)
    hidden_pct = (round(100 * sum(c["recorded_reasoning"] for c in counted) / total, 1)
                  if total else None)
    subsets = tuple(SubsetEvaluation(name, len(by_subset_lists[name][0]),
                                     _summary(by_subset_lists[name][0]),
                                     _summary(by_subset_lists[name][1]))
                    for name in OUTPUT_SUBSETS if name in by_subset_lists)
    # what the figure leaves out or cannot know, in the evaluation text the table shows
    notes = []
    on_classes = None
    if basis != HEURISTIC:
        on_classes = _evaluate_output(model, data, HEURISTIC).calibrated
        what = ("the legacy Claude vocabulary's count of what the call wrote, tool calls in "
                "Claude's syntax" if basis == "claude" else "real token count of the visible rows")
        median = on_classes.median_pct   # None: no call of the model scored yet
        notes.append(f"basis: {basis} ({what}; on the heuristic's classes: "
                     + (f"{median:g}%)" if median is not None else "no call scored)"))
    if n_partial:
        notes.append(f"{n_partial} partial count{'s' if n_partial > 1 else ''} not scored "
                     f"(all {len(with_partial)}: {_summary(with_partial).median_pct:g}%)")
    n_hidden_only = sum(1 for order in data.hidden_only if data.calls[order]["model"] == model)
    if n_hidden_only:
        notes.append(f"{n_hidden_only} call{'s' if n_hidden_only > 1 else ''} with no visible "
                     "output counted (all hidden reasoning) not scored")
    if hidden_pct:
        notes.append(f"hidden reasoning {hidden_pct:g}% of the recorded output, subtracted")
    for subset in subsets:
        if subset.subset == THINKING_IN_COUNT:
            notes.append(f"{subset.n_scored} with thinking but no reasoning count: "
                         f"{subset.calibrated.median_pct:g}%")
    return _result(
        model, key, data, len(calibrated), "; ".join([method] + notes), heuristic, calibrated,
        calibrated_heuristic_basis=on_classes,   # on a real basis: the class split's figures
        scored="visible output (recorded output minus the hidden reasoning the source records "
               "apart)",
        # the part of the recorded output no transcript shows (where the source counts it)
        hidden_reasoning_pct=hidden_pct,
        # recorded output far below the visible output: written before the call ended
        n_partial_recorded=n_partial, n_hidden_only=n_hidden_only,
        calibrated_with_partial=_summary(with_partial), subsets=subsets)


def estimator_report(lake: Lake) -> EstimatorReport:
    """Heuristic vs calibrated error against recorded usage, per model (see module docstring)."""
    calls = load_calls(lake)
    data = build_dataset(calls)
    models = sorted({c["model"] for c in calls})
    rows = [evaluate(model, data) for model in models
            for evaluate in (_evaluate_prompt, _evaluate_output)]
    until = max((c["timestamp"] for c in calls if c["timestamp"] is not None), default=None)
    return EstimatorReport(
        target_pct=TARGET_PCT,
        n_calls=len(calls),
        data_until=until.isoformat() if isinstance(until, datetime) else None,
        method=("prompt = thread overhead (median of recorded - estimate over the thread's "
                "other calls) + factors x heuristic class tokens; heuristic: factors 1.0; "
                "error = |estimate - recorded| / recorded per call; calls alone in their "
                "thread are not scored; output = model intercept + factors x heuristic of "
                "the call's own visible rows + framing x tool calls, scored against the "
                "visible output (recorded output - recorded hidden reasoning; thinking rows "
                "count only where the source has no reasoning count); partial counts "
                f"(over {MAX_CHARS_PER_TOKEN} visible characters per recorded token) not scored"
                + ("; output basis (the row's basis): where a model's tokenizer ships "
                   "(OpenAI models: exact; Claude: the legacy vocabulary, approximate), that "
                   "tokenizer's count of what the call wrote (tool calls in the model's own "
                   "syntax) x one factor replaces the heuristic classes; the heuristic "
                   "column stays est_tokens"
                   if data.output_basis else "")),
        models=rows,
    )
