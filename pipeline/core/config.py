"""The policy config file ``ctxlake.toml``: named policies, parameters, chains, filters.

Where: the path given (``--config``), else ``$CTXLAKE_CONFIG``, else ``./ctxlake.toml`` when it
exists, else the per-user ``$XDG_CONFIG_HOME/ctxlake/ctxlake.toml`` (``~/.config/ctxlake/``)
when it exists, else the built-in defaults (the numbers of docs/policies.md). ``ctxlake.example.toml``
at the repository root is a commented example. Format::

    lake = "~/lakes/agents"                            # default lake (after --lake, $CTXLAKE_HOME)
    time_zone = "Europe/Paris"                         # default --tz of run, summarize, reports
    archives = ["~/.claude/projects", "/srv/agents"]   # default PATHs of run and ingest
    default_policies = ["payload_prune+microcompact"]  # default --policy of run and status
    price_as = "qwen/qwen3-coder"                      # default --price-as of replay
    log_details = false                                # true: a follow-up line per log entry
    ignore_patterns = ["^warmup$", "run the linter"]   # case-insensitive JavaScript regexes
    session_logging = true                             # false: no daily session logs
    quiet_minutes = 60                                 # ingest: a file untouched this long is settled
    engine = "local"                                   # or "ray" (pipeline.stages.engine; ctxlake[ray])
    ray_address = "auto"                               # with ray: join this cluster (default: local)

    [memory]                       # extra managed-memory roots (pipeline.text.memory syntax)
    project = ["docs/agent-notes/"]
    user = ["~/notes/agent.md"]
    team = []

    [policies.microcompact]        # override a built-in policy's parameters
    idle_minutes = 30

    [policies.quick_mc]            # a named variant of a built-in policy
    policy = "microcompact"
    keep_recent = 2

    [policies.prune_then_mc]       # a named chain (each step sees the previous output)
    chain = ["payload_prune", "quick_mc"]

    [sweeps]                       # policy lists for replay sweeps
    masking = ["observation_masking(window=5)", "observation_masking(window=10)"]

    [report]                       # the nightly job also refreshes the HTML report
    html = true                    # (<lake>/html; default false)

    [prices."acme-model-9"]        # custom price or override, USD per million tokens
    input = 2.0                    # uncached input (required)
    output = 8.0                   # output, reasoning included (required)
    cache_write = 2.5              # 5-minute cache writes (default: input)
    cache_write_1h = 4.0           # 1-hour cache writes (default: cache_write)
    cache_read = 0.2               # cache reads (default: input)
    request = 0.0                  # USD per API call (default: 0)
    [[prices."acme-model-9".tiers]]  # a token kind's tokens beyond this many in a call
    above = 200000                 # (each kind on its own count, as ccusage tiers them)
    input = 4.0                    # keys not given keep the base tier's value
    output = 12.0

Prices (``[prices."<model>"]``, the model name exactly as the transcripts record it) are used
by the usage reports instead of the bundled genai-prices snapshot for that model, at every
time of day and date (no conditional prices).

Policy specs (CLI ``--policy``, chain steps, sweeps): ``name``, ``name(key=value, ...)`` with
TOML values (``window=5``, ``exclude_tools=["Read"]``, ``scenario="docs"``), or steps joined
with ``+`` (``payload_prune+microcompact(keep_recent=3)``). Unknown keys, wrong types, values
out of range and invalid regexes raise :class:`~pipeline.core.errors.ConfigError` naming the key and
the file. ``config_hash`` covers every resolved parameter of every step, the ignore patterns
and the memory roots: same hash, same plans.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import hashlib
import math
import os
import re
import tomllib
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from decimal import Decimal

import orjson

from pipeline.core.errors import ConfigError
from pipeline.core.locations import default_config_path, user_config_path  # noqa: F401
from pipeline.policies import REGISTRY, PolicyInfo
from pipeline.policies.base import ParamError, params_dict
from pipeline.policies.ignore_patterns import compile_patterns

__all__ = ["Config", "ResolvedPolicy", "Step", "load_config", "parse_policy_spec",
           "DEFAULT_CONFIG_NAME"]

DEFAULT_CONFIG_NAME = "ctxlake.toml"
TOP_KEYS = {"archives", "default_policies", "engine", "ignore_patterns", "lake", "log_details",
            "memory", "policies", "price_as", "prices", "quiet_minutes", "ray_address", "report",
            "session_logging", "sweeps", "time_zone"}
PRICE_KEYS = ("input", "output", "cache_write", "cache_write_1h", "cache_read", "request")
REPORT_KEYS = ("html",)
MEMORY_KEYS = ("project", "user", "team")
# sweeps every install has (a config's [sweeps] table adds to them, or redefines one)
BUILTIN_SWEEPS: dict[str, tuple[str, ...]] = {
    "masking": ("observation_masking(window=5)", "observation_masking(window=10)",
                "observation_masking(window=20)"),
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Step:
    policy: str                 # built-in policy name
    params: Any                 # its Params dataclass instance

    @property
    def info(self) -> PolicyInfo:
        return REGISTRY[self.policy]


@dataclass(frozen=True)
class ResolvedPolicy:
    name: str                   # as requested (spec text, normalised whitespace)
    steps: tuple[Step, ...]
    config_hash: str

    @property
    def key(self) -> str:
        """File-safe key for ``lake.write_derived`` (stable for the same name)."""
        return policy_key(self.name)

    def describe(self) -> list[dict]:
        return [{"policy": s.policy, "params": params_dict(s.params)} for s in self.steps]


def policy_key(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "policy"
    if slug == name:
        return slug
    return f"{slug[:80]}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:8]}"


@dataclass(frozen=True)
class NamedPolicy:
    name: str
    base: str | None = None             # a built-in policy (variant/override)
    params: Mapping[str, Any] = field(default_factory=dict)
    chain: tuple[str, ...] = ()         # or a chain of specs


@dataclass(frozen=True)
class PriceTier:
    """One tier of a custom price: USD per million tokens (``request``: USD per call), for
    the tokens of each kind beyond ``above`` in a call (-1: the base tier)."""

    above: int
    input: Decimal
    output: Decimal
    cache_write: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal
    request: Decimal


@dataclass(frozen=True)
class Config:
    path: Path | None = None
    ignore_patterns: tuple[str, ...] = ()
    memory: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    policies: Mapping[str, NamedPolicy] = field(default_factory=dict)
    sweeps: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(BUILTIN_SWEEPS))
    session_logging: bool = True
    quiet_minutes: float = 60.0
    report_html: bool = False           # [report] html: the nightly job refreshes the HTML report
    prices: Mapping[str, tuple[PriceTier, ...]] = field(default_factory=dict)  # model -> tiers
    lake: str | None = None
    time_zone: str | None = None
    archives: tuple[str, ...] = ()
    default_policies: tuple[str, ...] = ()
    price_as: str | None = None
    log_details: bool = False
    engine: str = "local"               # where stages run their units (pipeline.stages.engine)
    ray_address: str | None = None      # with engine = "ray": None starts a local instance

    # -- derived -------------------------------------------------------------------------
    def archive_paths(self) -> list[Path]:
        """``archives`` with ``~`` expanded (the default PATHs of ``run`` and ``ingest``)."""
        return [Path(os.path.expanduser(p)) for p in self.archives]

    def to_dict(self) -> dict:
        """Every setting with its effective value (``ctxlake config show``)."""
        return {
            "path": self.where(), "lake": self.lake, "time_zone": self.time_zone,
            "archives": list(self.archives), "default_policies": list(self.default_policies),
            "price_as": self.price_as, "log_details": self.log_details,
            "session_logging": self.session_logging, "quiet_minutes": self.quiet_minutes,
            "report": {"html": self.report_html},
            "engine": self.engine, "ray_address": self.ray_address,
            "ignore_patterns": list(self.ignore_patterns),
            "memory": {k: list(v) for k, v in sorted(self.memory.items())},
            "policies": {name: ({"chain": list(p.chain)} if p.chain else
                                {"policy": p.base or name, **dict(p.params)})
                         for name, p in sorted(self.policies.items())},
            "sweeps": {name: list(v) for name, v in sorted(self.sweeps.items())},
            "prices": {model: [dataclasses.asdict(t) for t in tiers]
                       for model, tiers in sorted(self.prices.items())},
        }

    def where(self) -> str | None:
        return str(self.path) if self.path else None

    def compiled_ignore_patterns(self) -> list[re.Pattern]:
        return compile_patterns(self.ignore_patterns)

    def memory_roots(self):
        from pipeline.text.memory import MemoryRoots

        try:
            return MemoryRoots.from_config({k: list(v) for k, v in self.memory.items()})
        except ValueError as error:
            raise ConfigError(f"[memory]: {error}", path=self.where()) from None

    def policy_names(self) -> list[str]:
        return sorted(set(REGISTRY) | set(self.policies))

    def resolve(self, spec: str) -> ResolvedPolicy:
        """Resolve a policy spec (see the module docstring) into steps and a config hash."""
        name = " ".join(spec.split())
        steps = tuple(self._resolve_spec(name, depth=0))
        if not steps:
            raise ConfigError(f"policy '{spec}' has no steps", path=self.where())
        payload = {
            "steps": [{"policy": s.policy, "params": params_dict(s.params)} for s in steps],
            "ignore_patterns": list(self.ignore_patterns),
            "memory": {k: list(v) for k, v in sorted(self.memory.items())},
        }
        digest = hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()
        return ResolvedPolicy(name, steps, digest[:16])

    def _resolve_spec(self, spec: str, depth: int) -> list[Step]:
        if depth > 8:
            raise ConfigError(f"policy chain '{spec}' refers to itself", path=self.where())
        out: list[Step] = []
        for part in _split_chain(spec):
            name, inline = parse_policy_spec(part)
            out.extend(self._resolve_one(name, inline, part, depth))
        return out

    def _resolve_one(self, name: str, inline: dict, text: str, depth: int) -> list[Step]:
        named = self.policies.get(name)
        if named is not None and named.chain:
            if inline:
                raise ConfigError(f"policy '{name}' is a chain: parameters go on its steps",
                                  path=self.where())
            steps: list[Step] = []
            for step in named.chain:
                steps.extend(self._resolve_spec(step, depth + 1))
            return steps
        if named is not None:
            base = named.base or name
            params = dict(named.params)
            where_key = f"policies.{name}"
        elif name in REGISTRY:
            base, params, where_key = name, {}, f"policies.{name}"
        else:
            raise ConfigError(f"unknown policy '{name}'", path=self.where(),
                              hint="choose one of: " + ", ".join(self.policy_names()))
        if base not in REGISTRY:
            raise ConfigError(f"policies.{name}.policy: unknown policy '{base}'",
                              path=self.where(), hint="built-in policies: "
                              + ", ".join(sorted(REGISTRY)))
        # a [policies.<built-in>] table overrides that built-in's defaults, for variants too
        override = self.policies.get(base)
        if override is not None and override is not named and not override.chain \
                and override.base is None:
            params = {**override.params, **params}
        params.update(inline)
        key_prefix = text if inline else where_key
        return [Step(base, build_params(base, params, key_prefix=key_prefix,
                                        path=self.where()))]


# ---------------------------------------------------------------------------------------
# Parsing and validation
# ---------------------------------------------------------------------------------------
def _split_chain(spec: str) -> list[str]:
    """Split ``a(x=1)+b`` on top-level ``+`` (not inside parentheses, brackets or quotes)."""
    parts, depth, quote, current = [], 0, None, []
    for ch in spec:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "+" and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    if any(not p for p in parts):
        raise ConfigError(f"policy spec '{spec}' has an empty step")
    return parts


_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*(?:\((.*)\))?\s*$", re.S)


def parse_policy_spec(spec: str) -> tuple[str, dict]:
    """``"observation_masking(window=5)"`` -> ``("observation_masking", {"window": 5})``.

    Arguments are TOML values (``k=1``, ``k=1.5``, ``k=true``, ``k="x"``, ``k=["a","b"]``).
    """
    match = _SPEC.match(spec)
    if not match:
        raise ConfigError(f"cannot read policy spec '{spec}'",
                          hint='write NAME or NAME(key=value, ...), e.g. '
                               '"observation_masking(window=5)"')
    name, args = match.group(1), match.group(2)
    if not args or not args.strip():
        return name, {}
    try:
        params = tomllib.loads(f"p = {{ {args} }}")["p"]
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"cannot read the parameters of '{spec}': {error}",
                          hint='values are TOML: window=5, scenario="docs", '
                               'exclude_tools=["Read"]') from None
    return name, params


def _annotations(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check_value(key: str, value: Any, hint: Any, path: str | None) -> Any:
    origin = typing.get_origin(hint)

    def fail(expected: str) -> typing.NoReturn:
        raise ConfigError(f"{key}: expected {expected}, got {_type_name(value)} {value!r}",
                          path=path)

    if hint is bool:
        if not isinstance(value, bool):
            fail("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
        if not -2**63 <= value < 2**63:     # the lake's integer columns are 64-bit
            fail("an integer of at most 64 bits")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail("a number")
        try:
            number = float(value)
        except OverflowError:       # an integer past the float range
            number = math.inf
        if not math.isfinite(number):
            fail("a finite number")
        return number
    if hint is str:
        if not isinstance(value, str):
            fail("a string")
        return value
    if origin is tuple:
        (item_hint, _ellipsis) = typing.get_args(hint)
        if not isinstance(value, (list, tuple)):
            fail(f"a list of {_hint_name(item_hint)}")
        return tuple(_check_value(f"{key}[{i}]", v, item_hint, path) for i, v in enumerate(value))
    if origin in (dict, collections.abc.Mapping):
        key_hint, value_hint = typing.get_args(hint)
        if not isinstance(value, dict):
            fail("a table")
        return {_check_value(f"{key}", k, key_hint, path):
                _check_value(f"{key}.{k}", v, value_hint, path) for k, v in value.items()}
    raise TypeError(f"unsupported parameter type {hint!r} for {key}")


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "table"}.get(type(value), type(value).__name__)


def _hint_name(hint: Any) -> str:
    return {int: "integers", str: "strings", float: "numbers"}.get(hint, str(hint))


def build_params(policy: str, values: Mapping[str, Any], *, key_prefix: str,
                 path: str | None = None):
    """Validated params dataclass of ``policy`` from config/inline ``values``."""
    cls = REGISTRY[policy].params
    hints = _annotations(cls)
    known = {f.name for f in fields(cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{key_prefix}.{key}: unknown parameter of {policy}", path=path,
                              hint=("parameters: " + ", ".join(sorted(known))) if known
                              else f"{policy} takes no parameters")
        kwargs[key] = _check_value(f"{key_prefix}.{key}", value, hints[key], path)
    try:
        return cls(**kwargs)
    except ParamError as error:
        raise ConfigError(f"{key_prefix}.{error.key}: {error.message}", path=path) from None


def _parse_document(data: Mapping[str, Any], path: Path | None) -> Config:
    where = str(path) if path else None
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown key '{sorted(unknown)[0]}'", path=where,
                          hint="top-level keys: " + ", ".join(sorted(TOP_KEYS)))
    patterns = data.get("ignore_patterns", [])
    if not isinstance(patterns, list):
        raise ConfigError(f"ignore_patterns: expected a list of strings, got "
                          f"{_type_name(patterns)}", path=where)
    try:
        compile_patterns(patterns)
    except ParamError as error:
        raise ConfigError(f"{error.key}: {error.message}", path=where) from None

    memory_raw = data.get("memory", {})
    if not isinstance(memory_raw, dict):
        raise ConfigError(f"memory: expected a table, got {_type_name(memory_raw)}", path=where)
    memory: dict[str, tuple[str, ...]] = {}
    for key, value in memory_raw.items():
        if key not in MEMORY_KEYS:
            raise ConfigError(f"memory.{key}: unknown key", path=where,
                              hint="keys: " + ", ".join(MEMORY_KEYS))
        memory[key] = _check_value(f"memory.{key}", value, tuple[str, ...], where)
        for index, entry in enumerate(memory[key]):
            if not entry.strip():
                raise ConfigError(f"memory.{key}[{index}]: empty path", path=where)
            if ".." in entry.split("/"):
                raise ConfigError(f"memory.{key}[{index}]: a memory root may not contain '..'",
                                  path=where)

    policies: dict[str, NamedPolicy] = {}
    raw_policies = data.get("policies", {})
    if not isinstance(raw_policies, dict):
        raise ConfigError(f"policies: expected a table, got {_type_name(raw_policies)}",
                          path=where)
    for name, table in raw_policies.items():
        if not isinstance(table, dict):
            raise ConfigError(f"policies.{name}: expected a table, got {_type_name(table)}",
                              path=where)
        if not _NAME.match(name):
            raise ConfigError(f"policies.{name}: a policy name is letters, digits, _ . -",
                              path=where)
        table = dict(table)
        base = table.pop("policy", None)
        chain = table.pop("chain", None)
        if base is not None and not isinstance(base, str):
            raise ConfigError(f"policies.{name}.policy: expected a string, got "
                              f"{_type_name(base)}", path=where)
        if chain is not None:
            if base is not None or table:
                extra = "policy" if base is not None else sorted(table)[0]
                raise ConfigError(f"policies.{name}.{extra}: a chain takes no parameters "
                                  "(put them on its steps)", path=where)
            steps = _check_value(f"policies.{name}.chain", chain, tuple[str, ...], where)
            if not steps:
                raise ConfigError(f"policies.{name}.chain: empty chain", path=where)
            policies[name] = NamedPolicy(name, chain=steps)
            continue
        if base is None and name not in REGISTRY:
            raise ConfigError(f"policies.{name}: not a built-in policy; add policy = \"...\" "
                              "(a built-in) or chain = [...]", path=where,
                              hint="built-in policies: " + ", ".join(sorted(REGISTRY)))
        policy = base or name
        if policy not in REGISTRY:
            raise ConfigError(f"policies.{name}.policy: unknown policy '{policy}'", path=where,
                              hint="built-in policies: " + ", ".join(sorted(REGISTRY)))
        build_params(policy, table, key_prefix=f"policies.{name}", path=where)
        policies[name] = NamedPolicy(name, base=base, params=table)

    sweeps_raw = data.get("sweeps", {})
    if not isinstance(sweeps_raw, dict):
        raise ConfigError(f"sweeps: expected a table, got {_type_name(sweeps_raw)}", path=where)
    sweeps = {**BUILTIN_SWEEPS,
              **{name: _check_value(f"sweeps.{name}", value, tuple[str, ...], where)
                 for name, value in sweeps_raw.items()}}
    session_logging = _check_value("session_logging", data.get("session_logging", True), bool,
                                   where)
    quiet_minutes = _check_value("quiet_minutes", data.get("quiet_minutes", 60.0), float, where)
    report_raw = data.get("report", {})
    if not isinstance(report_raw, dict):
        raise ConfigError(f"report: expected a table, got {_type_name(report_raw)}", path=where)
    for key in report_raw:
        if key not in REPORT_KEYS:
            raise ConfigError(f"report.{key}: unknown key", path=where,
                              hint="keys: " + ", ".join(REPORT_KEYS))
    report_html = report_raw.get("html", False)
    if not isinstance(report_html, bool):
        raise ConfigError(f"report.html: expected true or false, got {_type_name(report_html)}",
                          path=where)
    prices = _parse_prices(data.get("prices", {}), where)
    defaults = {}
    for key, hint in (("lake", str), ("time_zone", str), ("price_as", str)):
        if key in data:
            defaults[key] = _check_value(key, data[key], hint, where)
            if not defaults[key].strip():
                raise ConfigError(f"{key}: empty string", path=where)
    for key in ("archives", "default_policies"):
        if key in data:
            defaults[key] = _check_value(key, data[key], tuple[str, ...], where)
    defaults["log_details"] = _check_value("log_details", data.get("log_details", False), bool,
                                           where)
    if "time_zone" in defaults:
        from pipeline.stages.usage import resolve_timezone

        try:
            resolve_timezone(defaults["time_zone"])
        except ConfigError:
            raise
        except Exception as error:  # an unknown zone: said with the key and the file
            raise ConfigError(f"time_zone: {getattr(error, 'message', error)}",
                              path=where) from None
    engine = _check_value("engine", data.get("engine", "local"), str, where)
    if engine not in ("local", "ray"):
        raise ConfigError(f"engine: unknown engine '{engine}'", path=where,
                          hint="engines: local, ray")
    ray_address = data.get("ray_address")
    if ray_address is not None:
        ray_address = _check_value("ray_address", ray_address, str, where)
    config = Config(path, tuple(patterns), memory, policies, sweeps, session_logging,
                    quiet_minutes, report_html=report_html, prices=prices, engine=engine,
                    ray_address=ray_address, **defaults)
    # every named chain and sweep must resolve now, not halfway through a run
    for name, named in policies.items():
        if named.chain:
            config.resolve(name)
    for name, specs in sweeps.items():
        for spec in specs:
            config.resolve(spec)
    for spec in config.default_policies:
        config.resolve(spec)
    return config


def _price_value(key: str, value: Any, where: str | None) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}: expected a number (USD), got {_type_name(value)}", path=where)
    number = Decimal(str(value))
    if not number.is_finite() or number < 0:
        raise ConfigError(f"{key}: a price must be a number >= 0, got {value}", path=where)
    return number


def _parse_prices(raw: Any, where: str | None) -> dict[str, tuple[PriceTier, ...]]:
    """``[prices."<model>"]`` tables: a base price and optional ``tiers`` (see the module doc)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"prices: expected a table, got {_type_name(raw)}", path=where)
    out: dict[str, tuple[PriceTier, ...]] = {}
    for model, table in raw.items():
        prefix = f'prices."{model}"'
        if not isinstance(table, dict):
            raise ConfigError(f"{prefix}: expected a table, got {_type_name(table)}", path=where)
        if not model.strip():
            raise ConfigError("prices: a model name may not be empty", path=where)
        unknown = set(table) - set(PRICE_KEYS) - {"tiers"}
        if unknown:
            raise ConfigError(f"{prefix}.{sorted(unknown)[0]}: unknown key", path=where,
                              hint="keys: " + ", ".join((*PRICE_KEYS, "tiers")))
        for required in ("input", "output"):
            if required not in table:
                raise ConfigError(f"{prefix}.{required}: missing (USD per million tokens)",
                                  path=where)
        values = {key: _price_value(f"{prefix}.{key}", table[key], where)
                  for key in PRICE_KEYS if key in table}
        values.setdefault("cache_write", values["input"])
        values.setdefault("cache_write_1h", values["cache_write"])
        values.setdefault("cache_read", values["input"])
        values.setdefault("request", Decimal(0))
        tiers = [PriceTier(above=-1, **values)]
        raw_tiers = table.get("tiers", [])
        if not isinstance(raw_tiers, list):
            raise ConfigError(f"{prefix}.tiers: expected a list of tables, got "
                              f"{_type_name(raw_tiers)}", path=where)
        for index, tier in enumerate(raw_tiers):
            tier_prefix = f"{prefix}.tiers[{index}]"
            if not isinstance(tier, dict):
                raise ConfigError(f"{tier_prefix}: expected a table, got {_type_name(tier)}",
                                  path=where)
            unknown = set(tier) - set(PRICE_KEYS) - {"above"}
            if unknown:
                raise ConfigError(f"{tier_prefix}.{sorted(unknown)[0]}: unknown key", path=where,
                                  hint="keys: above, " + ", ".join(PRICE_KEYS))
            above = tier.get("above")
            if isinstance(above, bool) or not isinstance(above, int) or above < 0:
                raise ConfigError(f"{tier_prefix}.above: expected a whole number of input "
                                  f"tokens >= 0, got {above!r}", path=where)
            if above <= tiers[-1].above:
                raise ConfigError(f"{tier_prefix}.above: tiers must go up ({above} after "
                                  f"{tiers[-1].above})", path=where)
            tier_values = dict(values)
            tier_values.update({key: _price_value(f"{tier_prefix}.{key}", tier[key], where)
                                for key in PRICE_KEYS if key in tier})
            tiers.append(PriceTier(above=above, **tier_values))
        out[model] = tuple(tiers)
    return out


def config_from_dict(data: Mapping[str, Any], path: Path | None = None) -> Config:
    """A Config from an already-parsed TOML document (validated like a file)."""
    return _parse_document(data, path)


def load_config(path: Path | str | None = None) -> Config:
    """The config at ``path``, else ``$CTXLAKE_CONFIG``, else ``./ctxlake.toml``, else defaults.

    A path given explicitly (argument or environment) must exist.
    """
    target = Path(path) if path is not None else default_config_path()
    if target is None:
        return Config()
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        raise ConfigError("config file not found", path=str(target),
                          hint="pass --config FILE or set CTXLAKE_CONFIG") from None
    except OSError as error:
        raise ConfigError(f"cannot read the config file: {error.strerror}",
                          path=str(target)) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("the config file is not UTF-8", path=str(target)) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"not valid TOML: {error}", path=str(target)) from None
    return _parse_document(data, target)


def _type_label(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is tuple:
        return f"list of {_type_label(typing.get_args(hint)[0])}"
    if origin in (dict, collections.abc.Mapping):
        key, value = typing.get_args(hint)
        return f"table of {_type_label(key)} -> {_type_label(value)}"
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(hint, str(hint))


@dataclass(frozen=True)
class PolicyParam:
    """A built-in policy's parameter: its type, default and value under the config."""

    name: str
    type: str
    default: Any
    value: Any
    overridden: bool


@dataclass(frozen=True)
class BuiltinPolicy:
    policy: str
    summary: str
    params: list[PolicyParam]


@dataclass(frozen=True)
class NamedPolicyEntry:
    """A variant or chain the config names, with its resolved steps (``policy``, ``params``)."""

    policy: str
    kind: str                   # variant | chain
    steps: list[dict]


@dataclass(frozen=True)
class PolicyCatalog:
    """What ``ctxlake policies`` shows; :meth:`to_dict` is its JSON form."""

    config: str | None
    builtins: list[BuiltinPolicy]
    named: list[NamedPolicyEntry]
    sweeps: dict[str, list[str]]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def policy_catalog(config: Config | None = None) -> PolicyCatalog:
    """Every built-in policy with each parameter's type, default and value under ``config``
    (a ``[policies.<built-in>]`` table overrides it), then the config's named variants,
    chains and sweeps (``ctxlake policies``)."""
    config = config or Config()
    builtins = []
    for name in sorted(REGISTRY):
        info = REGISTRY[name]
        defaults = params_dict(info.params())
        effective = params_dict(config.resolve(name).steps[0].params)
        hints = _annotations(info.params)
        builtins.append(BuiltinPolicy(name, info.summary, [
            PolicyParam(key, _type_label(hints[key]), defaults[key], effective[key],
                        effective[key] != defaults[key]) for key in sorted(defaults)]))
    named = []
    for name, entry in sorted(config.policies.items()):
        if entry.base is None and not entry.chain:
            continue    # an override of a built-in: shown in its "value" column
        named.append(NamedPolicyEntry(name, "chain" if entry.chain else "variant",
                                      config.resolve(name).describe()))
    return PolicyCatalog(config.where(), builtins, named,
                         {name: list(specs) for name, specs in sorted(config.sweeps.items())})
