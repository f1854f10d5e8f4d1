"""Usage and cost reports: ``ctxlake report daily | monthly | session``.

Figures come from the ``usage_calls`` view (``sql/create_view_usage_calls.sql``): recorded
usage once per API call (Claude Code's split assistant lines counted once, with their final
``output_tokens``; Codex ``total_token_usage`` deltas; Gemini per message), the four token
kinds as the readers normalise them (``input`` = uncached input, ``cache write``,
``cache read``, ``output`` including reasoning), and a cost per call from ``model_prices``
(:mod:`pipeline.prices`, the genai-prices snapshot, tier- and time-aware), summed exactly in
DECIMAL and rounded to micro-dollars only when shown.

Decisions:
- Periods are days / months in the report's time zone (``--tz``, an IANA name; default: the
  machine's zone, see :func:`resolve_timezone`), or sessions. ``--since/--until`` are local
  dates, inclusive. Usage without any timestamp (e.g. SWE-agent 0.x runs) has no date: it is a
  "(no date)" row of the daily/monthly report and is left out when a date range is given.
- A model without a price is never $0: its rows have ``cost_usd = null`` and its name is in
  ``unpriced_models``; a period mixing priced and unpriced models shows the priced part and
  lists the unpriced models ("$1.23 + UNPRICED"). All-zero usage rows are not in the lake's
  usage view at all (Claude Code's ``<synthetic>`` messages).
- Run-level recorded cost: SWE-agent / mini-SWE-agent write ``model_stats.instance_cost`` per
  run (``usage_scope = 'run'``). It is shown separately as ``recorded_cost_usd`` ("Recorded
  $" column), never mixed into ``cost_usd``; the run's tokens (SWE-agent ``tokens_sent`` /
  ``tokens_received``) are counted in the token columns and priced at the base tier. A run
  row is dated at the session's last timed usage.
- Ignored sessions (``ignore_patterns``) ARE counted here: they cost money; the filter only
  keeps them out of the daily session logs and recovery documents.
- Prices: the lake's ``model_prices`` (written by ``summarize``) when it covers every model
  of the report and was computed from the installed genai-prices version; otherwise they are
  computed now, in memory, and the report runs again (nothing is written by a report).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb

from pipeline import sqlfiles
from pipeline.errors import UsageError
from pipeline.lake import Lake

PERIODS = ("day", "month", "session")
TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens")
MICRO = Decimal("0.000001")


# ---------------------------------------------------------------------------------------
# Time zones
# ---------------------------------------------------------------------------------------
def resolve_timezone(name: str | None = None) -> str:
    """An IANA time zone name: ``name`` when given (validated), else the machine's zone.

    The machine's zone is ``$TZ`` when it names a zone, else the target of ``/etc/localtime``
    (``.../zoneinfo/Europe/Paris``), else ``/etc/timezone``, else ``UTC``.
    """
    if name:
        return _checked_zone(name)
    candidates = []
    env = os.environ.get("TZ", "").lstrip(":")
    if env:
        candidates.append(env)
    try:
        target = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    try:
        candidates.append(Path("/etc/timezone").read_text(encoding="utf-8").strip())
    except OSError:
        pass
    for candidate in candidates:
        try:
            ZoneInfo(candidate)
            return candidate
        except (ZoneInfoNotFoundError, ValueError):
            continue
    return "UTC"


def _checked_zone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(f"unknown time zone '{name}'",
                         hint="use an IANA name such as Europe/Paris, America/New_York or UTC") from None
    return name


def parse_day(value: str | date | None, option: str) -> date | None:
    if value is None or isinstance(value, date):
        return value
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{option} must be a date YYYY-MM-DD, got '{value}'") from None


# ---------------------------------------------------------------------------------------
# Prices in the connection
# ---------------------------------------------------------------------------------------
def covered_models(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Model names the connection's ``model_prices`` covers at the installed price version."""
    from pipeline.prices import PRICE_SOURCE

    rows = con.execute(sqlfiles.load("select_model_price_coverage")).fetchall()
    return {model for model, source in rows if source == PRICE_SOURCE}


def use_model_prices(con: duckdb.DuckDBPyConnection, table) -> None:
    """Make ``model_prices`` in this connection read ``table`` (prices computed in memory)."""
    con.register("model_prices_fresh", table)
    con.execute(sqlfiles.load("create_view_model_prices_fresh"))


def price_models_now(con: duckdb.DuckDBPyConnection, models) -> None:
    """Replace ``model_prices`` in this connection only, with prices computed now."""
    from pipeline.prices import model_price_table

    use_model_prices(con, model_price_table(models))


# ---------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------
@dataclass
class UsageFigures:
    """Token and cost figures of one report row (a period, a model within it, or the total)."""

    sessions: int = 0
    api_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: Decimal | None = None          # the priced part; None when nothing is priced
    recorded_cost_usd: Decimal | None = None
    unpriced_models: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    session_ids: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def from_record(cls, record: dict) -> "UsageFigures":
        """The figures of one (period, model) row of ``select_usage_report``."""
        model = record["model"] or "(unknown)"
        figures = cls(
            sessions=len(record["session_ids"]), api_calls=int(record["api_calls"]),
            **{key: int(record[key] or 0) for key in (*TOKEN_KINDS, "reasoning_tokens",
                                                        "total_tokens")},
            cost_usd=record["cost_usd"], recorded_cost_usd=record["recorded_cost_usd"],
            unpriced_models=[model] if record["unpriced_rows"] else [], models=[model],
            session_ids=set(record["session_ids"]))
        return figures

    def add(self, other: "UsageFigures") -> None:
        """Add another row's figures (sessions counted once, unpriced models listed once)."""
        self.session_ids = self.session_ids | other.session_ids
        self.sessions = len(self.session_ids)
        for key in ("api_calls", *TOKEN_KINDS, "reasoning_tokens", "total_tokens"):
            setattr(self, key, getattr(self, key) + getattr(other, key))
        for key in ("cost_usd", "recorded_cost_usd"):
            if getattr(other, key) is not None:
                setattr(self, key, (getattr(self, key) or Decimal(0)) + getattr(other, key))
        self.unpriced_models = sorted(set(self.unpriced_models) | set(other.unpriced_models))
        self.models = sorted(set(self.models) | set(other.models))

    @property
    def complete(self) -> bool:
        return not self.unpriced_models

    def to_dict(self) -> dict:
        return {
            "sessions": self.sessions, "api_calls": self.api_calls,
            **{key: getattr(self, key) for key in TOKEN_KINDS},
            "reasoning_tokens": self.reasoning_tokens, "total_tokens": self.total_tokens,
            "cost_usd": usd(self.cost_usd), "cost_complete": self.complete,
            "unpriced_models": self.unpriced_models,
            "recorded_cost_usd": usd(self.recorded_cost_usd),
            "models": self.models,
        }


@dataclass
class UsageRow:
    period: str | None                       # YYYY-MM-DD, YYYY-MM or a session id; None = no date
    figures: UsageFigures
    breakdown: list[tuple[str, UsageFigures]] = field(default_factory=list)
    session: dict[str, Any] = field(default_factory=dict)   # session reports: project, start...


@dataclass
class UsageReport:
    period: str
    tz: str
    since: date | None
    until: date | None
    project: str | None
    breakdown: bool
    price_source: str
    rows: list[UsageRow]
    totals: UsageFigures

    @property
    def key(self) -> str:
        return {"day": "date", "month": "month", "session": "session_id"}[self.period]

    def to_dict(self) -> dict:
        rows = []
        for row in self.rows:
            item = {self.key: row.period, **row.figures.to_dict(), **row.session}
            if self.breakdown:
                item["breakdown"] = [{"model": model, **figures.to_dict()}
                                     for model, figures in row.breakdown]
            rows.append(item)
        totals = self.totals.to_dict()
        return {
            "report": {"day": "daily", "month": "monthly", "session": "session"}[self.period],
            "tz": self.tz, "since": _iso(self.since), "until": _iso(self.until),
            "project": self.project, "breakdown": self.breakdown,
            "price_source": self.price_source, "rows": rows, "totals": totals,
            "unpriced_models": totals["unpriced_models"],
        }


def usd(value: Decimal | None) -> float | None:
    return None if value is None else float(value.quantize(MICRO))


def _iso(value: date | None) -> str | None:
    return None if value is None else value.isoformat()


def usage_report(lake: Lake, *, period: str, tz: str | None = None, since: str | date | None = None,
                 until: str | date | None = None, project: str | None = None,
                 breakdown: bool = False) -> UsageReport:
    """Tokens and cost per day, month or session (and per model with ``breakdown``)."""
    if period not in PERIODS:
        raise UsageError(f"unknown report period '{period}'", hint="one of: day, month, session")
    zone = resolve_timezone(tz)
    since_day, until_day = parse_day(since, "--since"), parse_day(until, "--until")
    if since_day and until_day and since_day > until_day:
        raise UsageError(f"--since {since_day} is after --until {until_day}")
    from pipeline.prices import PRICE_SOURCE

    params = {"tz": zone, "period": period, "since": since_day, "until": until_day,
              "project": project}
    con = lake.connect()
    try:
        covered = covered_models(con)
        records = _report_records(con, params)
        models = {r["model"] for r in records if r["model"] is not None}
        if not models <= covered:
            # the lake's price table (written by summarize) misses a model or is from another
            # genai-prices version: price now, in this connection only, and report again
            price_models_now(con, sorted(models))
            records = _report_records(con, params)
    finally:
        con.close()
    return _assemble(records, period=period, tz=zone, since=since_day, until=until_day,
                     project=project, breakdown=breakdown, price_source=PRICE_SOURCE)


def _report_records(con: duckdb.DuckDBPyConnection, params: dict) -> list[dict]:
    try:
        cursor = con.execute(sqlfiles.load("select_usage_report"), params)
    except duckdb.Error as exc:
        if "time zone" in str(exc).lower() or "timezone" in str(exc).lower():
            raise UsageError(f"the time zone '{params['tz']}' is not known to DuckDB",
                             hint="use another IANA name, e.g. UTC") from None
        raise
    return sqlfiles.fetch_dicts(cursor)


def _assemble(records: list[dict], *, period: str, tz: str, since, until, project, breakdown,
              price_source) -> UsageReport:
    """Period rows and the total from the (period, model) rows of ``select_usage_report``."""
    rows: dict[str | None, UsageRow] = {}
    totals = UsageFigures()
    for record in records:
        figures = UsageFigures.from_record(record)
        key = record["period"]
        row = rows.get(key)
        if row is None:
            row = rows[key] = UsageRow(key, UsageFigures())
            if period == "session":
                row.session = {"project": record["project"], "format": record["format"],
                               "parent_session_id": record["parent_session_id"],
                               "first_at": _time(record["first_at"]),
                               "last_at": _time(record["last_at"])}
        elif period == "session":
            row.session["first_at"] = _extreme(min, row.session["first_at"], _time(record["first_at"]))
            row.session["last_at"] = _extreme(max, row.session["last_at"], _time(record["last_at"]))
        row.figures.add(figures)
        row.breakdown.append((figures.models[0], figures))
        totals.add(figures)
    ordered = list(rows.values())
    for row in ordered:
        row.breakdown.sort(key=lambda item: item[0])
    if period == "session":
        ordered.sort(key=lambda r: (r.session["first_at"] is None, r.session["first_at"] or "",
                                    r.period or ""))
    else:
        ordered.sort(key=lambda r: (r.period is None, r.period or ""))
    return UsageReport(period, tz, since, until, project, breakdown, price_source, ordered, totals)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _extreme(pick, a: str | None, b: str | None) -> str | None:
    """min/max of two ISO times (same zone), ignoring missing ones."""
    present = [v for v in (a, b) if v is not None]
    return pick(present) if present else None


# ---------------------------------------------------------------------------------------
# Table form (the CLI renders these rows with render.table)
# ---------------------------------------------------------------------------------------
def cost_cell(figures: UsageFigures) -> str:
    """``$1.2346``; ``UNPRICED`` when nothing is priced; ``$1.2346 + UNPRICED`` when partly."""
    if figures.cost_usd is None:
        return "UNPRICED" if figures.unpriced_models else "-"
    text = f"${figures.cost_usd.quantize(Decimal('0.0001')):,}"
    return f"{text} + UNPRICED" if figures.unpriced_models else text


def table_rows(report: UsageReport) -> tuple[list[str], list[tuple]]:
    label = {"day": "Date", "month": "Month", "session": "Session"}[report.period]
    show_recorded = report.totals.recorded_cost_usd is not None
    columns = [label, "Models" if not report.breakdown else "Model", "Input", "Output",
               "Cache write", "Cache read", "Total tokens", "Cost (USD)"]
    if show_recorded:
        columns.append("Recorded $")

    def cells(first: str, second: str, figures: UsageFigures) -> tuple:
        out = [first, second, f"{figures.input_tokens:,}", f"{figures.output_tokens:,}",
               f"{figures.cache_write_tokens:,}", f"{figures.cache_read_tokens:,}",
               f"{figures.total_tokens:,}", cost_cell(figures)]
        if show_recorded:
            recorded = figures.recorded_cost_usd
            out.append("" if recorded is None else f"${recorded.quantize(Decimal('0.0001')):,}")
        return tuple(out)

    out_rows: list[tuple] = []
    for row in report.rows:
        name = row.period if row.period is not None else "(no date)"
        if report.breakdown:
            out_rows.append(cells(name, "(all)", row.figures))
            for model, figures in row.breakdown:
                out_rows.append(cells("", f"└ {model}", figures))
        else:
            out_rows.append(cells(name, ", ".join(sorted(row.figures.models)), row.figures))
    out_rows.append(cells("Total", "", report.totals))
    return columns, out_rows
