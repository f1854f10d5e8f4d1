"""Model prices for the usage reports, from the ``genai-prices`` snapshot (offline, never fetched).

Source: the ``genai-prices`` package (pydantic/genai-prices, MIT) ships its whole price table in
``genai_prices/data.py``; :func:`genai_prices.calc_price` reads that bundled snapshot unless
``genai_prices.UpdatePrices`` is started, which downloads a newer table in a background
thread. ctxlake never starts it and never calls ``set_custom_snapshot``: every price comes
from the installed wheel, so a report is the same offline and online, and only changes when
the package is upgraded (:data:`PRICE_SOURCE` names the version; ``tests/test_usage.py``
proves no socket is opened).

How a recorded usage row is priced
----------------------------------
The lake stores, per API call, ``input_tokens`` (uncached input), ``cache_creation_tokens``,
``cache_read_tokens`` and ``output_tokens`` (reasoning included): the readers normalise every
format to this split. genai-prices takes the TOTAL input (``input_tokens`` = uncached + cache
write + cache read) plus the cache parts, chooses a conditional price by the request time
(start dates, DeepSeek's off-peak hours) and a tier by the call's total input tokens (e.g.
Claude Sonnet above 200k), and may add a per-request fee.

Within one (conditional price, tier) the price is linear in the four counts, so this module
turns each recorded model name into a few rows of a flat table, ``model_prices``: one row per
(conditional price, tier) with the USD per million uncached-input / cache-write / cache-read /
output tokens and the per-request fee, each *measured by calling genai-prices itself* with
probe usages inside that tier (so its fallbacks, e.g. "no cache-read price: cached tokens
pay the input price", are kept exactly). One SQL macro picks each call's regime, for the usage
reports and replay alike (``sql/create_macro_price_regimes.sql``); ``sql/create_view_usage_calls.sql``
then joins every call to its regime's rows and computes the cost in DECIMAL, fast and exact. One
difference from genai-prices, on purpose: a tier is applied as ccusage applies LiteLLM's
``*_above_200k_tokens`` prices, to each token kind on its own count (its tokens up to the
tier's ``input_above`` at the base rate, the rest at the tier's), not to the whole call by its
total input, so that ctxlake's costs equal ccusage's to the cent; tests check the SQL against
``genai_prices.calc_price`` rates combined that way, call by call.

Decisions:
- Model names are mapped as recorded: genai-prices' own matching first (it knows dated
  names such as ``claude-sonnet-4-5-20250929``); then ``provider/model`` names
  (``deepseek/deepseek-chat``, ``google/gemini-3-pro-preview``, litellm/OpenRouter style) are
  priced at the creator provider's list price (``deepseek``, ``google``), then as an
  OpenRouter model id; a Claude model on Amazon Bedrock (``anthropic.`` in its name, an
  inference profile such as ``eu.anthropic.claude-sonnet-4-5-20250929-v1:0``) at AWS's price;
  then SWE-agent 0.x shortcuts (``gpt4`` is ``gpt-4-1106-preview``,
  from ``SHORTCUTS`` in SWE-agent's ``sweagent/agent/models.py``). Anything else, a null model
  and Claude Code's ``<synthetic>`` are unpriced: reports show them as UNPRICED, never $0.
- Cache writes are priced at genai-prices' ``cache_write`` (Anthropic's 5-minute TTL) price,
  except the part the transcript records as 1-hour writes (Claude Code's
  ``usage.cache_creation.ephemeral_1h_input_tokens``, the lake's ``cache_write_1h_tokens``),
  which pays the ``cache_write_1h`` price (2x input for Claude), as ccusage does.
- Custom prices from the config file (``[prices."model"]``, see :mod:`pipeline.core.config`)
  replace these rows for the models they name, at report time (:func:`override_rows`).
- No ``price_context`` (service tier, batch): standard prices, except Claude's fast mode. A
  call Claude Code records with ``usage.speed: "fast"`` is stored under the model name plus
  ``-fast`` (``claude-opus-4-6-fast``), as ccusage names it; such a name is priced at the
  model's ``speed: fast`` price variant in genai-prices, else at :data:`FAST_MODE_MULTIPLIERS`
  times every standard base price (the fast prices the snapshot lacks: Opus 4.6 and 4.7,
  $30/$150 per MTok, 6x, with the caching multipliers on top, one price across the whole
  context window; Anthropic's fast-mode pricing page), else at the standard price, as
  ccusage does for a model it has no fast price for.
- A call without a timestamp is priced at the model's first (base) price; run-level usage
  (``usage_scope = 'run'``, e.g. SWE-agent ``model_stats`` totals) is priced at the base tier,
  because per-call input sizes are unknown (see ``sql/create_view_usage_calls.sql``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from decimal import Decimal
from typing import Iterable

__all__ = ["PRICE_SOURCE", "MODEL_PRICES", "ResolvedModel", "resolve_model", "model_price_table",
           "reference_cost"]

# SWE-agent 0.x model shortcuts (OpenAIModel.SHORTCUTS in sweagent/agent/models.py).
SWE_AGENT_SHORTCUTS = {
    "gpt3": "gpt-3.5-turbo-1106",
    "gpt3-legacy": "gpt-3.5-turbo-16k-0613",
    "gpt4": "gpt-4-1106-preview",
    "gpt4-legacy": "gpt-4-0613",
    "gpt4-0125": "gpt-4-0125-preview",
    "gpt3-0125": "gpt-3.5-turbo-0125",
}
# Claude fast mode (``usage.speed: "fast"``): the suffix of the recorded model name, and the
# price multiplier of the models whose fast price the genai-prices snapshot does not carry
# (genai-prices model id -> factor on every standard price; Anthropic's pricing page, "Fast
# mode": Opus 4.6 and 4.7 at $30 input / $150 output per MTok, caching multipliers on top).
FAST_SUFFIX = "-fast"
FAST_MODE_MULTIPLIERS = {"claude-opus-4-6": Decimal(6), "claude-opus-4-7": Decimal(6)}
# genai-prices models whose long-context prices (above 200k tokens of a kind) the snapshot
# lacks while ccusage charges them (LiteLLM's ``*_above_200k_tokens``): priced with the tiers
# of the model named here, scaled by the ratio of the base prices (Anthropic: Sonnet 4 with the
# 1M context window, as Sonnet 4.5, $6 input / $22.50 output per MTok above 200k; on Bedrock
# the same, a regional profile 10% over. Probed: ccusage 20.0.24 charges each of these what
# it charges Sonnet 4.5, times 1.1 for a regional eu./us. Sonnet 4.5 profile)
LONG_CONTEXT_AS = {
    "claude-sonnet-4-0": "claude-sonnet-4-5",
    "regional.anthropic.claude-sonnet-4-20250514-v1:0": "claude-sonnet-4-5",
    "regional.anthropic.claude-sonnet-4-5-20250929-v1:0": "claude-sonnet-4-5",
    "global.anthropic.claude-sonnet-4-5-20250929-v1:0": "claude-sonnet-4-5",
}
# Names that are never a model (Claude Code writes "<synthetic>" on locally made messages).
NOT_A_MODEL = re.compile(r"^<.*>$")


@functools.cache
def _model_prices_schema():
    """The ``model_prices`` table's schema (pyarrow is imported only when a table is built)."""
    import pyarrow as pa

    MONEY = pa.decimal128(38, 12)
    return pa.schema([
        ("model", pa.string()),            # the model name as recorded in the lake
        ("provider", pa.string()),         # genai-prices provider id
        ("priced_as", pa.string()),        # genai-prices model id
        ("priority", pa.int32()),          # index of the conditional price (last active wins; 0 = base)
        ("start_date", pa.date32()),       # conditional price: active from this UTC date
        ("time_from", pa.time64("us")),    # conditional price: daily UTC window [from, to)
        ("time_to", pa.time64("us")),
        ("input_above", pa.int64()),       # tier: total input tokens > input_above ...
        ("input_upto", pa.int64()),        # ... and <= input_upto (null: no upper bound)
        ("request_usd", MONEY),            # fee per API call
        ("input_usd_per_mtok", MONEY),     # uncached input
        ("cache_write_usd_per_mtok", MONEY),   # 5-minute cache writes (Anthropic's default TTL)
        ("cache_write_1h_usd_per_mtok", MONEY),  # 1-hour cache writes
        ("cache_read_usd_per_mtok", MONEY),
        ("output_usd_per_mtok", MONEY),
        ("price_source", pa.string()),
    ])


def __getattr__(name: str):
    if name == "MODEL_PRICES":
        return _model_prices_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _source() -> str:
    from importlib.metadata import version
    return f"genai-prices {version('genai-prices')} (bundled snapshot)"


PRICE_SOURCE = _source()
MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class ResolvedModel:
    recorded: str
    provider: str
    priced_as: str
    info: object        # genai_prices.types.ModelInfo


def _snapshot():
    # The bundled snapshot only: ``get_snapshot()`` would return a custom snapshot if some
    # other code started ``UpdatePrices``; ctxlake must not depend on that.
    from genai_prices import data_snapshot
    return data_snapshot._bundled_snapshot()


def _lookup(ref: str, provider_id: str | None):
    try:
        return _snapshot().find_provider_model(ref, None, provider_id, None)
    except LookupError:
        return None


@functools.lru_cache(maxsize=4096)
def resolve_model(name: str | None) -> ResolvedModel | None:
    """The genai-prices model a recorded model name is priced as, or None (unpriced)."""
    if not name or not name.strip() or NOT_A_MODEL.match(name.strip()):
        return None
    ref = name.strip()
    attempts: list[tuple[str, str | None]] = [(ref, None)]
    if "/" in ref:
        prefix, rest = ref.split("/", 1)
        attempts.append((rest, prefix))
        if "/" in rest:  # openrouter/google/gemini-..., litellm prefixes
            attempts.append((rest.split("/", 1)[1], rest.split("/", 1)[0]))
        attempts.append((ref, "openrouter"))
    shortcut = SWE_AGENT_SHORTCUTS.get(ref.lower())
    if shortcut:
        attempts.append((shortcut, None))
    if "anthropic." in ref:
        # Claude on Amazon Bedrock (Claude Code with CLAUDE_CODE_USE_BEDROCK records the
        # inference profile, us.anthropic.claude-sonnet-4-20250514-v1:0): AWS's price, the
        # regional premium included, as ccusage prices it
        attempts.append((ref, "aws"))
    for model_ref, provider_id in attempts:
        found = _lookup(model_ref, provider_id)
        if found is not None:
            provider, info = found
            return ResolvedModel(name, provider.id, info.id, info)
    return None


def _is_fast(resolved: ResolvedModel) -> bool:
    """Whether a recorded name is a Claude fast-mode name: ``<model>-fast`` where ``<model>``
    is priced as the same genai-prices model (an id of its own ending in ``-fast`` is not)."""
    base = _fast_base(resolved.recorded.strip())
    if base is None or resolved.priced_as.endswith(FAST_SUFFIX):
        return False
    plain = resolve_model(base)
    return plain is not None and plain.priced_as == resolved.priced_as


def _regimes(info, *, fast: bool = False) -> list[tuple[int, object, object]]:
    """(priority, constraint or None, ModelPrice) for each conditional price of a model;
    ``fast``: its Claude fast-mode prices (see the module docstring)."""
    from genai_prices import types
    if isinstance(info.prices, types.ModelPrice):
        regimes = [(0, None, info.prices)]
    else:
        regimes = [(index, cp.constraint, cp.prices) for index, cp in enumerate(info.prices)]
    if info.id in LONG_CONTEXT_AS:
        regimes = [(priority, constraint, _with_long_context(price, LONG_CONTEXT_AS[info.id]))
                   for priority, constraint, price in regimes]
    if not fast:
        return regimes
    return [(priority, constraint, _fast_price(info, price)) for priority, constraint, price in regimes]


def _with_long_context(standard, like: str):
    """``standard`` with the long-context tiers of the genai-prices model ``like``: each flat
    price that ``like`` tiers becomes tiered at the same starts, each tier's price times this
    price over ``like``'s base (Bedrock's regional premium carries over to the tier)."""
    from copy import copy

    from genai_prices import types
    found = _lookup(like, None)
    if found is None or not isinstance(found[1].prices, types.ModelPrice):
        return standard
    tiered = copy(standard)
    for key, value in standard.__dict__.items():
        other = found[1].prices.__dict__.get(key)
        if isinstance(value, Decimal) and isinstance(other, types.TieredPrices) and other.base:
            ratio = value / other.base
            tiered.__dict__[key] = types.TieredPrices(
                base=value, tiers=[types.Tier(start=tier.start, price=tier.price * ratio)
                                   for tier in other.tiers])
    return tiered


def _fast_price(info, standard):
    """``standard`` (one conditional price of ``info``) in fast mode: the snapshot's
    unconstrained ``speed: fast`` variant over it, as genai-prices resolves a price context,
    else :data:`FAST_MODE_MULTIPLIERS` times each of its prices, else itself."""
    from copy import copy

    from genai_prices import types
    overrides: dict = {}
    for variant in info.price_variants or ():
        if variant.constraint is None and variant.when == {"speed": "fast"}:
            overrides.update({k: v for k, v in variant.prices.__dict__.items() if v is not None})
    factor = FAST_MODE_MULTIPLIERS.get(info.id)
    if not overrides and factor is None:
        return standard
    fast = copy(standard)
    if overrides:
        fast.__dict__.update(overrides)
        return fast
    for key, value in standard.__dict__.items():
        if isinstance(value, types.TieredPrices):
            # fast mode is one price across the whole context window (no long-context tier)
            fast.__dict__[key] = value.base * factor
        elif isinstance(value, Decimal):
            fast.__dict__[key] = value * factor
    return fast


def _fast_base(name: str) -> str | None:
    """The model name a fast-mode name (``<model>-fast``) was recorded from, else None."""
    return name[: -len(FAST_SUFFIX)] if name.endswith(FAST_SUFFIX) and len(name) > len(FAST_SUFFIX) \
        else None


def _thresholds(model_price) -> list[int]:
    from genai_prices import types
    starts: set[int] = set()
    for value in model_price.__dict__.values():
        if isinstance(value, types.TieredPrices):
            starts.update(tier.start for tier in value.tiers)
    return sorted(starts)


def _probe(model_price, total_input: int, **parts: int) -> Decimal:
    from genai_prices import Usage
    usage = Usage(input_tokens=total_input, **{k: v for k, v in parts.items() if v})
    return model_price.calc_price(usage)["total_price"]


def _linear_prices(model_price, low: int) -> tuple[Decimal, Decimal, Decimal, Decimal, Decimal, Decimal]:
    """(fee, input, cache write, 1-hour cache write, cache read, output) USD per token for
    totals just above ``low``.

    Measured with genai-prices on usages whose total input lies in the tier (low, ...]:
    f(T) = fee + a*T gives a and the fee from two totals; then one probe per other kind.
    """
    t1, t2 = low + 1, low + 2
    f1, f2 = _probe(model_price, t1), _probe(model_price, t2)
    per_input = f2 - f1
    fee = f1 - per_input * t1
    per_write = (_probe(model_price, t2, cache_write_tokens=t2) - fee) / t2
    # 1-hour writes are a part of the cache writes (genai-prices' Usage); a model without a
    # 1-hour price pays its cache-write price for them
    per_write_1h = (_probe(model_price, t2, cache_write_tokens=t2, cache_write_1h_tokens=t2) - fee) / t2
    per_read = (_probe(model_price, t2, cache_read_tokens=t2) - fee) / t2
    per_output = (_probe(model_price, t2, output_tokens=t2) - fee - per_input * t2) / t2
    return fee, per_input, per_write, per_write_1h, per_read, per_output


def _utc_time(value: time) -> time:
    if value.tzinfo is None:
        return value
    return datetime.combine(date(1970, 1, 1), value).astimezone(timezone.utc).time()


def _constraint_columns(constraint) -> tuple[date | None, time | None, time | None]:
    from genai_prices import types
    if constraint is None:
        return None, None, None
    if isinstance(constraint, types.StartDateConstraint):
        return constraint.start_date, None, None
    if isinstance(constraint, types.TimeOfDateConstraint):
        return None, _utc_time(constraint.start_time), _utc_time(constraint.end_time)
    raise TypeError(f"unsupported genai-prices constraint {type(constraint).__name__}")


@functools.lru_cache(maxsize=4096)
def _rows_for(name: str) -> tuple[dict, ...]:
    resolved = resolve_model(name)
    if resolved is None:
        return (_unpriced_row(name),)
    rows = []
    for priority, constraint, model_price in _regimes(resolved.info, fast=_is_fast(resolved)):
        try:
            start_date, time_from, time_to = _constraint_columns(constraint)
        except TypeError:
            return (_unpriced_row(name),)  # a constraint kind not known here: never guessed
        bounds = [-1, *_thresholds(model_price)]
        for index, low in enumerate(bounds):
            high = bounds[index + 1] if index + 1 < len(bounds) else None
            fee, per_input, per_write, per_write_1h, per_read, per_output = _linear_prices(model_price, low)
            rows.append(dict(
                model=name, provider=resolved.provider, priced_as=resolved.priced_as,
                priority=priority, start_date=start_date, time_from=time_from, time_to=time_to,
                input_above=low, input_upto=high, request_usd=_money(fee),
                input_usd_per_mtok=_money(per_input * MILLION),
                cache_write_usd_per_mtok=_money(per_write * MILLION),
                cache_write_1h_usd_per_mtok=_money(per_write_1h * MILLION),
                cache_read_usd_per_mtok=_money(per_read * MILLION),
                output_usd_per_mtok=_money(per_output * MILLION),
                price_source=PRICE_SOURCE))
    return tuple(rows)


def _unpriced_row(name: str) -> dict:
    """A row that marks a model as looked up and unpriced (NULL prices: its cost stays NULL)."""
    return dict(model=name, provider=None, priced_as=None, priority=0, start_date=None,
                time_from=None, time_to=None, input_above=-1, input_upto=None, request_usd=None,
                input_usd_per_mtok=None, cache_write_usd_per_mtok=None,
                cache_read_usd_per_mtok=None, output_usd_per_mtok=None, price_source=PRICE_SOURCE)


def _money(value: Decimal) -> Decimal:
    return value.quantize(Decimal("1e-12"))


def model_price_table(models: Iterable[str | None]) -> "pa.Table":
    """The ``model_prices`` rows for these recorded model names (an unpriced name gets one row
    with NULL prices, so a reader of the table can tell "looked up, no price" from "not seen").

    Deterministic: rows sorted by (model, priority, input_above).
    """
    rows: list[dict] = []
    for name in sorted({m for m in models if m}):
        rows.extend(_rows_for(name))
    rows.sort(key=lambda r: (r["model"], r["priority"], r["input_above"]))
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=_model_prices_schema())


def reference_cost(model: str | None, timestamp: datetime | None, *, input_tokens: int = 0,
                   output_tokens: int = 0, cache_write_tokens: int = 0,
                   cache_read_tokens: int = 0, cache_write_1h_tokens: int = 0) -> Decimal | None:
    """Cost of ONE call straight from ``genai_prices.calc_price`` (the check for the SQL path).

    ``input_tokens`` is the uncached input, as stored in the lake; ``cache_write_1h_tokens``
    is the 1-hour part of ``cache_write_tokens``. None when unpriced.
    """
    resolved = resolve_model(model)
    if resolved is None:
        return None
    if _is_fast(resolved):
        # genai-prices has no name for fast mode: the rows' own fast prices (checked against
        # its price variants and the multipliers in tests/test_usage.py)
        regimes = _regimes(resolved.info, fast=True)
        chosen = regimes[0]
        for regime in regimes:
            if timestamp is not None and regime[1] is not None and regime[1].active(timestamp):
                chosen = regime
        from genai_prices import Usage
        return chosen[2].calc_price(Usage(
            input_tokens=input_tokens + cache_write_tokens + cache_read_tokens,
            output_tokens=output_tokens, cache_write_tokens=cache_write_tokens,
            cache_read_tokens=cache_read_tokens,
            **({"cache_write_1h_tokens": cache_write_1h_tokens} if cache_write_1h_tokens else {})))["total_price"]
    from genai_prices import Usage
    usage = Usage(input_tokens=input_tokens + cache_write_tokens + cache_read_tokens,
                  output_tokens=output_tokens, cache_write_tokens=cache_write_tokens,
                  cache_read_tokens=cache_read_tokens,
                  **({"cache_write_1h_tokens": cache_write_1h_tokens} if cache_write_1h_tokens else {}))
    snapshot = _snapshot()
    provider = next(p for p in snapshot.providers if p.id == resolved.provider)
    when = timestamp
    if when is None:
        regimes = _regimes(resolved.info)
        return regimes[0][2].calc_price(usage)["total_price"]
    return resolved.info.calc_price(usage, provider, genai_request_timestamp=when).total_price
