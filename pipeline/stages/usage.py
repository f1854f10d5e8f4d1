"""Usage and cost: ``ctxlake report daily | weekly | monthly | session | blocks``.

Figures come from the ``usage_calls`` view (``sql/create_view_usage_calls.sql``) over the
per-session call rows ``usage_call_rows``:

- **Per-session call rows** (``sql/create_view_usage_call_rows_live.sql``): recorded usage
  once per API call within a session (Claude Code's split assistant lines counted once, with
  their final ``output_tokens``; Codex ``total_token_usage`` deltas; Gemini per message), the
  token kinds as the readers normalise them (``input`` = uncached input, ``cache write`` (of
  which ``cache_write_1h``), ``cache read``, ``output`` including reasoning), dated, with the
  session's project, format, parent and agent (``main``, or the sub-agent type its parent's
  ``Task`` call named, else ``sub-agent``). :func:`refresh_usage` materialises them as
  ``derived/usage_call_rows`` (the nightly job calls it for the sessions that changed);
  a lake without them computes them from the messages on the fly.
- **Once across the lake**: Claude Code copies earlier calls (same ``message.id`` and
  ``requestId``) into a resumed or forked session's file; Gemini CLI keeps a message's UUID
  in its copies. ``usage_calls`` keeps one row per such call key: its fullest row (most
  tokens in all, as ccusage keeps), copies being equal the one of the session that recorded
  it first (the call's own time, then the session's first call, then the file path).
  Session rows and transcripts stay whole; only usage is deduplicated. Codex
  ``token_count`` events carry no call id (their usage is a delta of running totals inside
  one rollout file), so nothing identifies a copied Codex call: they are not deduplicated.
- **Cost** per call from ``model_prices`` (:mod:`pipeline.reports.prices`, the genai-prices snapshot,
  tier- and time-aware; 1-hour cache writes at the 1-hour price), with the config file's
  ``[prices]`` replacing the snapshot for the models it names; summed exactly in DECIMAL and
  rounded to micro-dollars only when shown.

Decisions:
- Periods are days / weeks (Monday first unless ``start_of_week`` says otherwise, named by
  their first day; ccusage's weekly starts on Sunday unless told ``-w monday``) / months in
  the report's time zone (``--tz``, an IANA name; default: the machine's zone, see
  :func:`resolve_timezone`), or sessions. ``--since/--until`` are local dates, inclusive.
  Usage without any timestamp (e.g. SWE-agent 0.x runs) has no date: it is a "(no date)" row
  and is left out when a date range is given.
- ``--order asc|desc`` orders the periods (sessions by their first call); ``--limit N``
  keeps the first N rows of that order, and the total is the total of the rows shown
  (``rows_omitted`` says how many were left out).
- A model without a price is never $0: its rows have ``cost_usd = null`` and its name is in
  ``unpriced_models``; a period mixing priced and unpriced models shows the priced part and
  lists the unpriced models ("$1.23 + UNPRICED").
- Recorded cost: SWE-agent / mini-SWE-agent write ``model_stats.instance_cost`` per run
  (``usage_scope = 'run'``) and older Claude Code versions a ``costUSD`` per line. It is shown
  beside the computed cost ("Recorded $"), never mixed into it, and compared with the
  computed cost of the same sessions: a difference over 5% is flagged (``cost_mismatch``).
- Ignored sessions (``ignore_patterns``) ARE counted here: they cost money.
- Prices: the lake's ``model_prices`` (written by ``summarize``) when it covers every model
  of the report at the installed genai-prices version; otherwise they are computed now, in
  memory (nothing is written by a report).
- Speed: a period report on a lake whose usage is materialised and current (and no config
  prices) reads ``derived/usage_summary/*.json`` in pure Python (no DuckDB, no pyarrow; see
  "The stored 15-minute sums as JSON" below): the day sums of UTC and the machine's zone
  rolled up per group with their session counts (a report without filters), or the day rows
  (filters), or the 15-minute rows (other zones, the session report). Otherwise DuckDB reads
  ``sources.parquet``, ``derived/usage_call_sources`` and ``derived/usage_buckets`` (the
  calls' sums per 15-minute UTC bucket, session, model and group keys: every time zone's days
  are whole buckets, as today's zone offsets are multiples of 15 minutes), or
  ``derived/usage_calls_priced`` for blocks; else it opens the whole lake.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pipeline.core import sqlfiles
from pipeline.core.dates import WEEKDAYS, day_span, from_epoch_us
from pipeline.core.errors import UsageError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from pipeline.core.lake import Lake

PERIODS = ("day", "week", "month", "session")
GROUPS = ("model", "agent", "project", "format")
TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens")
COUNTED = ("api_calls", *TOKEN_KINDS, "cache_write_1h_tokens", "reasoning_tokens", "total_tokens")
MICRO = Decimal("0.000001")
# the formats whose call without a readable time is a "(no date)" row in every report, the
# session report too (sql/create_macro_usage_call_rows_of.sql dates the others' calls): bound
# as $undated_formats by usage_report, read by the JSON fast path (_summary_periods)
UNDATED_FORMATS = ("claude_code", "codex_cli")
MISMATCH = Decimal("0.05")            # recorded vs computed cost: flagged above 5%
CALL_ROWS = "usage_call_rows"         # derived/usage_call_rows: per-session call rows
CALL_ROWS_ORDER = ["session_id", "source_id", "seq"]
LISTED_COLUMNS = ["session_id", "source_id", "call_key"]   # what a night reads of every row
CALL_SOURCES = "usage_call_sources"   # derived/usage_call_sources: the sources they cover
PRICED_CALLS = "usage_calls_priced"   # derived/usage_calls_priced: usage_calls as of the refresh
BUCKETS = "usage_buckets"             # derived/usage_buckets: their 15-minute sums (the reports')
# the order of sql/select_usage_buckets_to_store.sql (nulls last; change both together): a
# night merges its sessions' sums with the stored ones in it
BUCKETS_ORDER = ["bucket", "session_id", "model", "agent", "project", "format", "parent_session_id"]
SUMMARY = Path("usage_summary")       # derived/usage_summary/{buckets,days}.json: the same sums
SUMMARY_LAYOUT = 3                    # as JSON, for the reports' pure-Python path
# the SHA-256 of the sources.parquet they cover (beside the covered sources: run state, not
# results, so that the summary itself is the same bytes for the same lake content)
SUMMARY_COMMIT = Path(CALL_SOURCES) / "summary-commit.txt"
BLOCK_HOURS = 5


# ---------------------------------------------------------------------------------------
# Time zones
# ---------------------------------------------------------------------------------------
def resolve_timezone(name: str | None = None) -> str:
    """An IANA time zone name: ``name`` when given (validated), else the machine's zone.

    The machine's zone is ``$TZ`` when it names a zone, else the one the system is configured
    with as :func:`tzlocal.get_localzone_name` finds it (the ``/etc/localtime`` link,
    ``/etc/timezone``, ...), else ``UTC`` (none configured, or conflicting configurations).
    The IANA names of UTC (``Etc/UTC``, ``Zulu``, ...; a machine's default is often
    ``Etc/UTC``) are given as ``UTC``: one zone, one name, so that ``--tz UTC`` on such a
    machine is not a change of setting that rewrites every day file.
    """
    if name:
        return _canonical(_checked_zone(name))
    env = os.environ.get("TZ", "").lstrip(":")
    if env and _is_zone(env):
        return _canonical(env)
    import tzlocal

    try:
        configured = tzlocal.get_localzone_name()
    except ZoneInfoNotFoundError:   # conflicting configurations
        configured = None
    return _canonical(configured) if configured and _is_zone(configured) else "UTC"


# IANA links to UTC (tzdata's "backward" file)
UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal",
                       "Etc/Zulu", "Zulu"})


def _canonical(name: str) -> str:
    return "UTC" if name in UTC_NAMES else name


def _is_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _checked_zone(name: str) -> str:
    if not _is_zone(name):
        raise UsageError(f"unknown time zone '{name}'",
                         hint="use an IANA name such as Europe/Paris, America/New_York or UTC")
    return name


@functools.cache
def price_source() -> str:
    """The bundled price table's name (what :data:`pipeline.reports.prices.PRICE_SOURCE` says),
    without importing the price machinery: the version is read from the installed package's
    ``dist-info`` folder name beside it (a metadata scan costs ~25 ms), else from metadata."""
    import importlib.util

    spec = importlib.util.find_spec("genai_prices")
    if spec is not None and spec.origin:
        site = Path(spec.origin).parent.parent
        found = sorted(site.glob("genai_prices-*.dist-info"))
        if len(found) == 1:
            version = found[0].name[len("genai_prices-"):-len(".dist-info")]
            return f"genai-prices {version} (bundled snapshot)"
    from importlib.metadata import version as installed
    return f"genai-prices {installed('genai-prices')} (bundled snapshot)"


# ---------------------------------------------------------------------------------------
# Materialised call rows (the nightly job's usage stage)
# ---------------------------------------------------------------------------------------
@dataclass
class UsageRefresh:
    sessions: int | None      # sessions recomputed (None: all)
    rows: int                 # call rows stored in all
    path: str

    def to_dict(self) -> dict:
        return {"sessions": self.sessions, "rows": self.rows, "path": self.path}


def refresh_usage(lake: "Lake", *, sessions=None) -> UsageRefresh:
    """Recompute the per-session usage call rows of ``sessions`` (ids; None = all) and store
    every session's rows as ``derived/usage_call_rows`` (per session bucket: only the buckets
    of ``sessions`` are rewritten, rows of other sessions kept as they are), the sources'
    state they cover (``derived/usage_call_sources``), and the calls once across the lake
    with their cost (``derived/usage_calls_priced``, what a report reads).

    The call rows are before the cross-lake dedup, which ``usage_calls`` applies over them,
    so a session's rows depend on its own files only: the caller passes the sessions whose
    files changed (every one of them: the coverage is recorded for all sources); the other
    sessions' stored rows are kept as they are (never recomputed from the messages). The
    dedup and prices are then computed again for the calls those sessions can change (see
    :func:`price_call_rows`'s ``reuse``), the others' priced rows kept as stored, and so are
    the 15-minute sums of the sessions whose priced rows stay the same (sums are per
    session): all in memory, no pass over the lake.
    """
    lake.require()
    wanted = None if sessions is None else sorted(set(sessions))
    import duckdb
    import pyarrow as pa

    from pipeline.core.lake import rows_of_sessions

    with lake.lock():
        commit = _commit_stamp(lake.root)   # the lake state these tables cover (under the lock)
        _remove_summary(lake.root)   # never older than the tables
        # the other sessions' rows: the stored ones as they are (the caller names every
        # session whose files changed). Without stored rows (a first refresh), all of them
        # are computed.
        partial = wanted is not None and _has_parts(lake.derived_dir / CALL_ROWS)
        with lake.connect() as con:
            con.execute("SET enable_progress_bar = false")   # a nightly stage: no bar on stdout
            if partial:
                # the rows of the sessions asked for, from their messages (read from their
                # files only); the others' as stored (per session bucket: only the buckets of
                # these sessions are written)
                with lake.connect(scope=wanted, within=con) as scoped:
                    fresh = scoped.sql(sqlfiles.load("select_usage_call_rows_of_sessions"),
                                       params={"sessions": wanted}).to_arrow_table()
                # combined, not pa.array(): no rows (every file gone) keeps the string type
                present = con.sql(sqlfiles.load("select_source_ids")).to_arrow_table() \
                    .column(0).combine_chunks()
            else:
                fresh = con.sql(sqlfiles.load("select_usage_call_rows_refreshed"),
                                params={"sessions": wanted}).to_arrow_table()
            covered = con.sql(sqlfiles.load("select_usage_call_sources")).to_arrow_table()
        if partial:
            import pyarrow.compute as pc

            # every stored row's session, source and call (three columns, not the rows)
            listed = lake.read_derived(CALL_ROWS, "all", fresh.schema, columns=LISTED_COLUMNS)
            # rows of sources gone from the lake go, and their sessions' buckets are rewritten
            in_lake = pc.is_in(listed.column("source_id"), present)
            stale = set(listed.column("session_id").filter(pc.invert(in_lake)).to_pylist()) - set(wanted)
            if stale:
                left = lake.read_session_rows(CALL_ROWS, "all", fresh.schema, stale)
                fresh = pa.concat_tables([fresh, left.filter(pc.is_in(left.column("source_id"), present))],
                                         promote_options="permissive")
            rewrite = set(wanted) | stale
            # the calls these sessions had and have: only those can change owner or price
            keys = pa.concat_tables([rows_of_sessions(listed, rewrite).select(["call_key"]),
                                     fresh.select(["call_key"])], promote_options="permissive").column(0)
            reuse = PricedReuse(*_stored_priced(lake), frozenset(rewrite), pc.unique(keys.drop_null()))
            lake.write_session_rows(CALL_ROWS, "all", fresh, sorted(rewrite), sort_by=CALL_ROWS_ORDER)
            # every session's rows as now stored: the three columns known without reading them
            table = StoredCallRows(lake, fresh.schema, pa.concat_tables(
                [rows_of_sessions(listed, rewrite, keep=False), fresh.select(LISTED_COLUMNS)],
                promote_options="permissive"))
        else:
            lake.write_session_rows(CALL_ROWS, "all", fresh, None, sort_by=CALL_ROWS_ORDER)
            table = CallRows(fresh)
            reuse = None
        # not sorted (~70 ms for 35k rows): price_call_rows does not depend on their order
        path = lake.derived_dir / CALL_ROWS
        lake.write_derived(CALL_SOURCES, "all", covered)
        # dedup, price and sum the rows just computed, in memory (no second pass over the lake)
        with duckdb.connect() as con:
            priced, buckets, redone = price_call_rows(con, table, lake.root, reuse=reuse)
            # the sums first: a run killed before the priced calls are all written leaves
            # stored calls that the next night's check finds short (then priced whole)
            lake.write_derived(BUCKETS, "all", buckets)
            # per session bucket, as the call rows: a night rewrites the buckets it changed
            lake.write_session_rows(PRICED_CALLS, "all", priced,
                                    None if redone is None else sorted(redone),
                                    sort_by=CALL_ROWS_ORDER)
            con.register(BUCKETS, buckets)
            write_summary(lake.root, con, commit)
    return UsageRefresh(None if wanted is None else len(wanted), table.listed().num_rows, str(path))


class CallRows:
    """The usage call rows :func:`price_call_rows` prices, as it needs them: every row's
    session and call key (:meth:`listed`), the whole rows of a few sessions
    (:meth:`of_sessions`), or all of them (:meth:`whole`). This one holds them in memory."""

    def __init__(self, table: "pa.Table"):
        self.table = table

    def listed(self) -> "pa.Table":
        return self.table

    def of_sessions(self, sessions: set[str]) -> "pa.Table":
        from pipeline.core.lake import rows_of_sessions

        return rows_of_sessions(self.table, sessions)

    def whole(self) -> "pa.Table":
        return self.table


class StoredCallRows(CallRows):
    """The lake's stored call rows (``derived/usage_call_rows``; ``listed``: their
    :data:`LISTED_COLUMNS`, which the night already holds), whole rows read as asked: the
    files of a few sessions' buckets, or every file (a night that reprices a few sessions
    reads ~1/16 of the rows whole)."""

    def __init__(self, lake: "Lake", schema: "pa.Schema", listed: "pa.Table"):
        super().__init__(listed)
        self.lake, self.schema = lake, schema

    def of_sessions(self, sessions: set[str]) -> "pa.Table":
        return self.lake.read_session_rows(CALL_ROWS, "all", self.schema, sessions)

    def whole(self) -> "pa.Table":
        return self.lake.read_derived(CALL_ROWS, "all", self.schema)


@dataclass(frozen=True)
class PricedReuse:
    """What a night's :func:`price_call_rows` may keep of the stored priced calls and their
    sums: ``stored`` and ``buckets`` (``derived/usage_calls_priced`` and
    ``derived/usage_buckets`` as the last refresh wrote them, None when missing or
    unreadable), the sessions whose call rows this refresh replaces (``changed``) and the
    call keys those sessions had or have now (``keys``)."""

    stored: "pa.Table | None"
    buckets: "pa.Table | None"
    changed: frozenset[str]
    keys: "pa.Array"


def _stored_priced(lake: "Lake") -> tuple["pa.Table | None", "pa.Table | None"]:
    """``derived/usage_calls_priced`` and ``derived/usage_buckets`` as stored (each None when
    missing or unreadable: then every call is priced)."""
    import pyarrow as pa

    from pipeline.core.errors import CorruptPartError

    def read(name: str) -> "pa.Table | None":
        try:
            table = lake.read_derived(name, "all", None)
        except (CorruptPartError, OSError, pa.ArrowException):
            return None
        return table if table.num_columns else None

    return read(PRICED_CALLS), read(BUCKETS)


def price_call_rows(con, table: "pa.Table | CallRows", root: Path, *,
                    reuse: PricedReuse | None = None
                    ) -> tuple["pa.Table", "pa.Table", "set[str] | None"]:
    """In ``con`` (a plain in-memory connection): the calls of ``table`` (usage call rows of
    every session, in any order; or a :class:`CallRows`, read as needed) once across the
    lake with their cost, their 15-minute
    sums (what ``refresh_usage`` stores as ``usage_calls_priced`` and ``usage_buckets``) and
    the sessions whose priced calls may differ from the stored ones (None: all). The
    order of ``table`` does not matter (every window orders by a total key and every query
    ends in an ORDER BY), so a night passes its stored rows as read, unsorted.

    ``reuse`` (a night that replaced the rows of ``reuse.changed`` sessions): the dedup and
    prices are computed again only for the rows of those sessions and for every row sharing
    a call key with them (``reuse.keys``), over the rows of every session holding one (its
    whole rows: a session's first call and recorded cost are its own); the other stored
    priced rows stand: a call's owner depends on its key's rows only, and its cost on its
    own row and its session's. The priced calls returned are then those of the sessions
    that may have gained or lost a call (the third value), the sums every session's (the
    stored sums of the others, which are per session). The stored rows are used only when
    their price source is this one and their count is the one ``table`` gives; else every
    row is priced (the same bytes, only slower: ``tests/test_usage.py`` compares both)."""
    con.execute("SET enable_progress_bar = false")
    con.execute("SET TimeZone = 'UTC'")
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = table if isinstance(table, CallRows) else CallRows(table)
    outside = _reusable_priced(rows.listed(), reuse)
    if outside is not None:
        listed = rows.listed()
        sharing = listed.column("session_id").filter(_touched(listed, reuse))
        con.register(CALL_ROWS, rows.of_sessions(reuse.changed | set(sharing.to_pylist())))
    else:
        con.register(CALL_ROWS, rows.whole())
    con.execute(sqlfiles.load("create_view_usage_call_rows_stored"))
    _base_prices(con, root)
    _custom_prices(con, None)
    con.execute(sqlfiles.load("create_macro_price_regimes"))
    con.execute(sqlfiles.load("create_view_usage_calls"))
    models = {row[0] for row in con.execute(sqlfiles.load("select_usage_call_models")).fetchall()}
    _ensure_prices(con, models, None)
    priced = con.sql(sqlfiles.load("select_usage_calls_to_store"),
                     params={"price_source": price_source()}).to_arrow_table()
    redone = None
    if outside is not None:
        # of the rows priced now, those the change decides (the others are of a key whose
        # rows were not all in this pass: their stored row stands)
        decided = priced.filter(_touched(priced, reuse))
        # the sessions that may have gained or lost a call: the change's, and those holding
        # one of its keys before or now; their priced calls are what was kept and decided
        stored = reuse.stored
        redone = set(reuse.changed) | set(decided.column("session_id").to_pylist()) | \
            set(stored.column("session_id").filter(pc.invert(outside)).to_pylist())
        redone_ids = pa.array(sorted(redone), pa.string())
        kept = stored.filter(pc.and_(outside, pc.is_in(stored.column("session_id"), redone_ids)))
        priced = _merged(kept, decided, [(name, "ascending") for name in CALL_ROWS_ORDER])
    con.register(PRICED_CALLS, priced)
    con.execute(sqlfiles.load("create_view_usage_calls_priced"))
    con.execute(sqlfiles.load("create_view_usage_report_rows"))
    buckets = con.sql(sqlfiles.load("select_usage_buckets_to_store"),
                      params={"price_source": price_source()}).to_arrow_table()
    if redone is not None:
        others = reuse.buckets.filter(pc.invert(pc.is_in(reuse.buckets.column("session_id"), redone_ids)))
        buckets = _merged(others, buckets, [(name, "ascending", "at_end") for name in BUCKETS_ORDER])
    return priced, buckets, redone


def _merged(stored: "pa.Table", computed: "pa.Table", order: list[tuple]) -> "pa.Table":
    """Stored rows kept (in ``computed``'s columns and types) with the rows computed now, in
    the order the SQL that computes them all gives (``order``: :meth:`pyarrow.Table.sort_by`)."""
    import pyarrow as pa

    return pa.concat_tables([stored.select(computed.schema.names).cast(computed.schema), computed]) \
        .sort_by(order).combine_chunks()


def _reusable_priced(table: "pa.Table", reuse: PricedReuse | None) -> "pa.ChunkedArray | None":
    """Which stored priced rows ``reuse`` lets a night keep (see :func:`price_call_rows`):
    those of the sessions not changed whose call key is none of ``reuse.keys`` (a mask over
    ``reuse.stored``); None when every row is to be priced (no ``reuse``, no stored rows or
    sums, another price source, or stored rows that do not match ``table``: as many kept
    rows as ``table`` has calls outside the change, each key once)."""
    if reuse is None or reuse.stored is None or reuse.buckets is None \
            or "call_key" not in reuse.stored.column_names:
        return None
    import pyarrow.compute as pc

    source = price_source()
    for stored in (reuse.stored, reuse.buckets):
        if stored.num_rows and pc.any(pc.not_equal(stored.column("price_source"),
                                                   source)).as_py() is not False:
            return None
    outside = pc.invert(_touched(reuse.stored, reuse))
    keys = table.column("call_key").filter(pc.invert(_touched(table, reuse)))
    calls = keys.null_count + pc.count_distinct(keys, mode="only_valid").as_py()
    return outside if (pc.sum(outside).as_py() or 0) == calls else None


def _touched(rows: "pa.Table", reuse: PricedReuse) -> "pa.ChunkedArray":
    """Which of ``rows`` (call rows or priced calls) a night's change may alter: those of a
    changed session, and those of one of the change's call keys."""
    import pyarrow as pa
    import pyarrow.compute as pc

    changed = pa.array(sorted(reuse.changed), pa.string())
    return pc.or_(pc.fill_null(pc.is_in(rows.column("session_id"), changed), False),
                  pc.fill_null(pc.is_in(rows.column("call_key"), reuse.keys), False))


# ---------------------------------------------------------------------------------------
# The stored 15-minute sums as JSON: the period reports without DuckDB
# ---------------------------------------------------------------------------------------
# ``derived/usage_summary/buckets.json`` holds the rows of ``derived/usage_buckets`` (a few
# thousand on a 500 MB archive) and ``days.json`` their day sums in UTC and the machine's
# zone, in a form read with orjson alone, so that a period report on
# a current lake imports neither DuckDB nor pyarrow (~60 ms of a ~100 ms process). It is
# current while ``sources.parquet`` (the lake's commit point: every ingest replaces it) has
# the content it was written against (its SHA-256), the price source and the
# ctxlake version are the same, and no config prices apply; otherwise the report takes the
# DuckDB path, which gives the same bytes (tests/test_usage_fast.py compares them).
# ``select_usage_report`` stays the definition of the aggregation: ``_summary_records`` is
# its transcription over the same rows (columns below in the order of SUMMARY_COLUMNS).
SUMMARY_COLUMNS = ("bucket", "session_ids", "model", "agent", "project", "format",
                   "parent_session_id", "api_calls", "input_tokens", "output_tokens",
                   "cache_write_tokens", "cache_write_1h_tokens", "cache_read_tokens",
                   "reasoning_tokens", "total_tokens", "unpriced_rows", "cost_usd",
                   "recorded_cost_usd", "compared_cost_usd", "compared_unpriced_rows",
                   "first_at", "last_at")
_INT_SUMS = SUMMARY_COLUMNS[7:16]                 # api_calls .. unpriced_rows: integers


def _commit_stamp(root: Path) -> str | None:
    """The SHA-256 of ``sources.parquet`` (a few hundred kB: ~1 ms): what the summary covers.
    A content hash, not the file's stat, so that the same lake state gives the same bytes
    (a lake built elsewhere, on Ray or copied, has the same summary)."""
    import hashlib

    try:
        data = (Path(root) / "sources.parquet").read_bytes()
    except FileNotFoundError:
        return None
    return hashlib.sha256(data).hexdigest()


def write_summary(root: Path, con, commit: str | None, zones=None) -> Path | None:
    """``derived/usage_summary/buckets.json`` (the rows of ``usage_buckets`` in ``con``, the
    table just stored) and ``days.json`` (the same summed per local day of each of ``zones``:
    UTC and the machine's zone by default, what most reports ask for; a small file, so that
    their work does not grow with the archive). None are written (old ones removed) when a
    cost has more than 12 decimals."""
    import orjson

    from pipeline import __version__
    from pipeline.core.lake import atomic_write_bytes

    folder = Path(root) / "derived" / SUMMARY
    rows = con.execute(sqlfiles.load("select_usage_summary_rows")).fetchall()
    days = {zone: con.execute(sqlfiles.load("select_usage_summary_days"), {"tz": zone}).fetchall()
            for zone in sorted(set(zones or ("UTC", resolve_timezone())))}
    if not all(row[-1] for table in (rows, *days.values()) for row in table):
        _remove_summary(root)
        return None
    header = {"layout": SUMMARY_LAYOUT, "version": __version__,
              "price_source": price_source(), "columns": list(SUMMARY_COLUMNS)}
    atomic_write_bytes(folder / "buckets.json", orjson.dumps({**header, "rows": [row[:-1] for row in rows]}))
    numbers: dict[str, int] = {}   # day rows name their sessions by number (counted, never shown)
    day_rows = {zone: [[row[0], [numbers.setdefault(sid, len(numbers)) for sid in row[1]], *row[2:-1]]
                       for row in table] for zone, table in days.items()}
    rolled = {zone: {group: _rolled_up(rows_, column) for group, column in _GROUP_COLUMNS.items()}
              for zone, rows_ in day_rows.items()}
    atomic_write_bytes(folder / "day_rows.json", orjson.dumps({**header, "days": day_rows}))
    atomic_write_bytes(folder / "days.json", orjson.dumps({**header, "days": rolled}))
    if commit is not None:   # written last: the files above are complete and current
        atomic_write_bytes(Path(root) / "derived" / SUMMARY_COMMIT, commit.encode())
    return folder


_GROUP_COLUMNS = {"model": 2, "agent": 3, "project": 4, "format": 5}


def _rolled_up(rows: list[list], column: int) -> dict:
    """Day rows summed per (day, the group's column, model), the other keys left out, with
    their distinct sessions counted per (period, group), per period and in all, for days,
    weeks and months: what a report without ``--project``, ``--since``, ``--until`` or
    ``--limit`` reads (a few hundred rows, no session lists: its work does not grow with the
    archive)."""
    missing = {2: "(unknown)", 4: "(no project)"}.get(column)
    out: dict[tuple, list] = {}
    members: dict[str, dict] = {kind: {} for kind in ("day", "week", "month")}
    names: dict = {}
    for row in rows:
        key = (row[0], row[column], row[2])
        acc = out.get(key)
        if acc is None:
            acc = out[key] = [row[0], [], row[2], None, None, None, None, *row[7:20], None, None]
            acc[column] = row[column]
        else:
            for i in range(7, 16):
                acc[i] += row[i]
            for i in (16, 17, 18):
                if row[i] is not None:
                    acc[i] = row[i] if acc[i] is None else acc[i] + row[i]
            acc[19] += row[19]
        grp = row[column] if row[column] is not None else missing
        if row[0] not in names:
            day = None if row[0] is None else date.fromisoformat(row[0])
            names[row[0]] = {kind: _period_name(day, kind) for kind in members}
        for kind, found in members.items():
            found.setdefault((names[row[0]][kind], grp), set()).update(row[1])
    counts: dict = {}
    everyone: set = set()
    for kind, found in members.items():
        periods: dict = {}
        for (period, grp), ids in found.items():
            periods.setdefault(period, set()).update(ids)
        counts[kind] = {"group": sorted([[period, grp, len(ids)] for (period, grp), ids in found.items()],
                                        key=lambda r: (_nulls_last(r[0]), _nulls_last(r[1]))),
                        "period": sorted([[period, len(ids)] for period, ids in periods.items()],
                                         key=lambda r: _nulls_last(r[0]))}
        if kind == "day":
            everyone = set().union(*periods.values())
    counts["total"] = len(everyone)
    ordered = sorted(out.items(), key=lambda item: [_nulls_last(v) for v in item[0]])
    return {"rows": [acc for _, acc in ordered], "sessions": counts}


def _period_name(day: date | None, period: str, week_start: int = 1) -> str | None:
    """A local day's period name, as ``select_usage_report`` names it (``week_start``: the
    ISO number of a week's first day, 1 = Monday ... 7 = Sunday)."""
    if day is None:
        return None
    if period == "day":
        return day.isoformat()
    if period == "week":
        return (day - timedelta(days=(day.isoweekday() - week_start) % 7)).isoformat()
    return day.isoformat()[:7]


def _remove_summary(root: Path) -> None:
    (Path(root) / "derived" / SUMMARY_COMMIT).unlink(missing_ok=True)
    for name in ("buckets.json", "day_rows.json", "days.json"):
        (Path(root) / "derived" / SUMMARY / name).unlink(missing_ok=True)


def _summary_committed(root: Path) -> bool:
    try:
        stamp = (Path(root) / "derived" / SUMMARY_COMMIT).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return False
    return stamp == _commit_stamp(root)


def _read_summary_file(root: Path, name: str) -> dict | None:
    path = Path(root) / "derived" / SUMMARY / name
    try:
        data = path.read_bytes()
    except OSError:
        return None
    import orjson

    from pipeline import __version__

    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if document.get("layout") != SUMMARY_LAYOUT or document.get("version") != __version__ \
            or document.get("columns") != list(SUMMARY_COLUMNS) \
            or document.get("price_source") != price_source():
        return None
    return document


class Summary:
    """The stored sums of a lake, each file read when first needed (None: not current)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._days = self._day_rows = self._rows = False
        if not _summary_committed(self.root):   # sources changed since (or no refresh)
            self._days = self._day_rows = self._rows = None

    @property
    def day_rows(self) -> dict | None:
        if self._day_rows is False:
            document = _read_summary_file(self.root, "day_rows.json")
            self._day_rows = None if document is None else document["days"]
        return self._day_rows

    @property
    def days(self) -> dict | None:
        if self._days is False:
            document = _read_summary_file(self.root, "days.json")
            self._days = None if document is None else document["days"]
        return self._days

    @property
    def rows(self) -> list | None:
        if self._rows is False:
            document = _read_summary_file(self.root, "buckets.json")
            self._rows = None if document is None else document["rows"]
        return self._rows

    def serves(self, params: dict) -> bool:
        """Whether it answers this report (the file :func:`_summary_rows` will read is here)."""
        if params["period"] != "session":
            if _unfiltered(params):
                if self.days is not None and params["tz"] in self.days:
                    return True
            elif self.day_rows is not None and params["tz"] in self.day_rows:
                return True
        return self.rows is not None


def _unfiltered(params: dict) -> bool:
    """No filter, no limit and Monday weeks: the report whose session counts are stored."""
    return params["project"] is None and params["since"] is None and params["until"] is None \
        and not params.get("limited") and params.get("week_start", 1) == 1


def read_summary(root: Path) -> Summary | None:
    """The lake's current stored sums, or None when neither file is current (see above)."""
    summary = Summary(root)
    return summary if summary.days is not None or summary.rows is not None else None


def _summary_rows(summary: Summary, params: dict) -> tuple[list[list], dict, dict | None]:
    """The rows a report reads, their local days and, when stored for exactly this report,
    its distinct-session counts: the rolled-up day sums of the report's zone and group (no
    filter, no limit), else the day rows of its zone, for a day/week/month report; else the
    15-minute rows (days computed here)."""
    rows = counts = None
    if params["period"] != "session":
        if _unfiltered(params):
            if summary.days is not None and params["tz"] in summary.days:
                rolled = summary.days[params["tz"]][params["group"]]
                rows, counts = rolled["rows"], rolled["sessions"]
        elif summary.day_rows is not None and params["tz"] in summary.day_rows:
            rows = summary.day_rows[params["tz"]]
    if rows is not None:
        days = {None: None}
        for row in rows:
            if row[0] not in days:
                days[row[0]] = date.fromisoformat(row[0])
        return rows, days, counts
    rows = summary.rows
    tzinfo = ZoneInfo(params["tz"])
    days = {None: None}
    for row in rows:
        if row[0] not in days:
            days[row[0]] = from_epoch_us(row[0]).astimezone(tzinfo).date()
    return rows, days, None


def _summary_periods(summary: Summary, params: dict):
    """(row, period) of the rows a report keeps: ``select_usage_report``'s ``calls`` and
    ``in_range`` (project substring, local-day range, period names)."""
    rows, days, _counts = _summary_rows(summary, params)
    period, project = params["period"], params["project"]
    since, until = params["since"], params["until"]
    names: dict = {}
    for row in rows:
        if project is not None and (row[4] is None or project not in row[4]):
            continue
        day = days[row[0]]
        if (since is not None or until is not None) and day is None:
            continue
        if since is not None and day < since or until is not None and day > until:
            continue
        if period == "session":
            # a Claude Code call or Codex token_count whose time cannot be read: "(no date)",
            # as in the SQL
            yield row, row[1][0] if row[0] is not None or row[5] not in UNDATED_FORMATS else None
            continue
        name = names.get(day, names)
        if name is names:
            name = names[day] = _period_name(day, period, params.get("week_start", 1))
        yield row, name


def _nulls_last(value):
    return (value is None, value or "")


def _summary_records(summary: Summary, params: dict) -> list[dict]:
    """``select_usage_report`` over the summary rows: the same records, in the same order."""
    from operator import add

    grp_index = {"agent": 3, "project": 4, "format": 5}.get(params["group"], 2)
    missing = {2: "(unknown)", 4: "(no project)"}.get(grp_index)
    counts = _summary_rows(summary, params)[2]
    cells: dict = {}
    sessions: dict = {}   # (period, grp) -> session ids; the other levels are their unions
    for row, period in _summary_periods(summary, params):
        grp = row[grp_index]
        if grp is None:
            grp = missing
        key = (period, grp, row[2])
        cell = cells.get(key)
        if cell is None:
            cells[key] = [row, row[7:16], *row[16:22]]
        else:
            cell[1] = list(map(add, cell[1], row[7:16]))
            for slot in (2, 3, 4):
                value = row[14 + slot]
                if value is not None:
                    cell[slot] = value if cell[slot] is None else cell[slot] + value
            cell[5] += row[19]
            first_at, last_at = row[20], row[21]
            if first_at is not None and (cell[6] is None or first_at < cell[6]):
                cell[6] = first_at
            if last_at is not None and (cell[7] is None or last_at > cell[7]):
                cell[7] = last_at
        if counts is not None:
            continue
        found = sessions.get((period, grp))
        if found is None:
            sessions[(period, grp)] = set(row[1])
        else:
            found.update(row[1])
    money = lambda value: None if value is None else Decimal(value).scaleb(-12)  # noqa: E731
    records = []
    for (period, grp, model), (first, sums, cost, recorded, compared, compared_unpriced,
                               first_at, last_at) in cells.items():
        records.append({
            "level": "cell", "period": period, "grp": grp, "model": model,
            **dict(zip(_INT_SUMS, sums)),
            "cost_usd": money(cost), "recorded_cost_usd": money(recorded),
            "compared_cost_usd": money(compared), "compared_unpriced_rows": compared_unpriced,
            "project": first[4], "format": first[5], "parent_session_id": first[6],
            "first_at": from_epoch_us(first_at), "last_at": from_epoch_us(last_at)})
    if counts is not None:   # stored for exactly this report (no filter, no limit)
        stored = counts[params["period"]]
        records.extend({"level": "group", "period": period, "grp": grp, "sessions": n}
                       for period, grp, n in stored["group"])
        records.extend({"level": "period", "period": period, "grp": None, "sessions": n}
                       for period, n in stored["period"])
        records.append({"level": "total", "period": None, "grp": None, "sessions": counts["total"]})
    else:
        periods: dict = {}
        for (period, grp), found in sessions.items():
            records.append({"level": "group", "period": period, "grp": grp, "sessions": len(found)})
            periods.setdefault(period, set()).update(found)
        for period, found in periods.items():
            records.append({"level": "period", "period": period, "grp": None, "sessions": len(found)})
        records.append({"level": "total", "period": None, "grp": None,
                        "sessions": len(set().union(*periods.values()))})
    records.sort(key=lambda r: (r["level"], _nulls_last(r["period"]), _nulls_last(r["grp"]),
                                _nulls_last(r.get("model"))))
    return records


def _summary_sessions(summary: Summary, params: dict, periods: list[str]) -> int:
    """``select_usage_report_sessions`` over the summary rows."""
    wanted = set(periods)
    found: set = set()
    for row, period in _summary_periods(summary, params):
        if (period if period is not None else "(no date)") in wanted:
            found.update(row[1])
    return len(found)


# ---------------------------------------------------------------------------------------
# The report's connection and prices
# ---------------------------------------------------------------------------------------
def _root(lake) -> Path:
    """The lake folder of a Lake or of a path (a Path's own ``.root`` is not a lake's)."""
    return Path(lake) if isinstance(lake, (str, os.PathLike)) else Path(lake.root)


def _has_parts(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("*.parquet"))


def usage_connection(lake, *, overrides=None, need: str = "calls") -> tuple["duckdb.DuckDBPyConnection", str]:
    """A connection with ``usage_calls`` (``need="calls"``: blocks) or ``usage_report_rows``
    (``need="rows"``: the period reports) and its prices: ``(con, mode)``.

    ``mode`` says what the connection reads: ``stored`` (nothing changed since the last
    :func:`refresh_usage` and no config prices: the stored priced calls or their 15-minute
    sums, a few small files), ``rows`` (the stored call rows, deduplicated and priced now)
    or ``messages`` (the whole lake's views, the call rows computed from the messages).
    ``overrides``: the config file's prices (model -> tiers) replacing the lake's.
    """
    import duckdb

    from pipeline.core.lake import Lake

    root = _root(lake)
    checked = Lake(root)
    checked.require()
    checked.check_intact()
    derived = root / "derived"
    stored = BUCKETS if need == "rows" else PRICED_CALLS
    parts = lambda name: sqlfiles.literal_path(derived / name / "*.parquet")  # noqa: E731
    if not overrides and _has_parts(derived / CALL_SOURCES) and _has_parts(derived / stored):
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        changed, stale = con.execute(sqlfiles.render(
            "select_usage_stored_state", sources=sqlfiles.literal_path(root / "sources.parquet"),
            covered=parts(CALL_SOURCES), stored=parts(stored)),
            {"price_source": price_source()}).fetchall()[0]
        if changed == 0 and stale == 0:
            con.execute(sqlfiles.render("create_view_derived", name=sqlfiles.ident(stored),
                                        glob=parts(stored)))
            con.execute(sqlfiles.load("create_view_usage_report_rows_stored" if need == "rows"
                                      else "create_view_usage_calls_priced"))
            return con, "stored"
        con.close()
    if _has_parts(derived / CALL_ROWS) and _has_parts(derived / CALL_SOURCES):
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute(sqlfiles.render("create_view_sources",
                                    glob=sqlfiles.literal_path(root / "sources.parquet")))
        for name in (CALL_ROWS, CALL_SOURCES):
            con.execute(sqlfiles.render("create_view_derived", name=sqlfiles.ident(name),
                                        glob=parts(name)))
        if con.execute(sqlfiles.load("select_usage_call_sources_changed")).fetchall()[0][0] == 0:
            _base_prices(con, root)
            _custom_prices(con, overrides)
            con.execute(sqlfiles.load("create_view_usage_call_rows_stored"))
            con.execute(sqlfiles.load("create_macro_price_regimes"))
            con.execute(sqlfiles.load("create_view_usage_calls"))
            con.execute(sqlfiles.load("create_view_usage_report_rows"))
            return con, "rows"
        con.close()
    from pipeline.core.lake import Lake

    con = Lake(root).connect()   # usage_call_rows_current: computed (sources changed)
    _base_prices(con, root)
    _custom_prices(con, overrides)
    con.execute(sqlfiles.load("create_view_usage_report_rows"))
    return con, "messages"


def _base_prices(con, root: Path) -> None:
    """``model_prices_base``: the lake's ``derived/model_prices``, else an empty table."""
    folder = Path(root) / "derived" / "model_prices"
    if _has_parts(folder):
        con.execute(sqlfiles.render("create_view_model_prices_base",
                                    glob=sqlfiles.literal_path(folder / "*.parquet")))
    else:
        con.execute(sqlfiles.load("create_view_model_prices_base_empty"))


def _custom_prices(con, overrides) -> None:
    """``model_prices`` = the base prices, with the config file's prices for the models it names."""
    con.execute(sqlfiles.load("create_table_price_overrides"))
    insert = sqlfiles.load("insert_price_override")
    for model, tiers in sorted((overrides or {}).items()):
        for index, tier in enumerate(tiers):
            upto = tiers[index + 1].above if index + 1 < len(tiers) else None
            con.execute(insert, {
                "model": model, "input_above": tier.above, "input_upto": upto,
                "request_usd": str(tier.request), "input_usd": str(tier.input),
                "cache_write_usd": str(tier.cache_write),
                "cache_write_1h_usd": str(tier.cache_write_1h),
                "cache_read_usd": str(tier.cache_read), "output_usd": str(tier.output),
                "price_source": "config"})
    con.execute(sqlfiles.load("create_view_model_prices_custom"))


def covered_models(con: "duckdb.DuckDBPyConnection") -> set[str]:
    """Model names the connection's base prices cover at the installed price version."""
    source = price_source()
    rows = con.execute(sqlfiles.load("select_model_price_coverage")).fetchall()
    return {model for model, found in rows if found == source}


def use_model_prices(con: "duckdb.DuckDBPyConnection", table) -> None:
    """Make ``model_prices`` in this connection read ``table`` (prices computed in memory),
    with the config prices already loaded in the connection (if any) still on top."""
    con.register("model_prices_fresh", table)
    con.execute(sqlfiles.load("create_view_model_prices_fresh"))
    if not con.execute(sqlfiles.load("select_price_overrides_present")).fetchall()[0][0]:
        con.execute(sqlfiles.load("create_table_price_overrides"))
    con.execute(sqlfiles.load("create_view_model_prices_custom"))


def price_models_now(con: "duckdb.DuckDBPyConnection", models) -> None:
    """Replace the base prices in this connection only, with prices computed now."""
    from pipeline.reports.prices import model_price_table

    use_model_prices(con, model_price_table(models))


def _ensure_prices(con, models: set[str], overrides) -> bool:
    """Price now (in this connection) when the lake's prices miss a model; True if it did."""
    missing = {m for m in models if m is not None} - covered_models(con) - set(overrides or {})
    if not missing:
        return False
    price_models_now(con, sorted({m for m in models if m is not None}))
    return True


def _config_prices(config) -> dict:
    return dict(getattr(config, "prices", None) or {})


def _price_label(overrides) -> str:
    label = price_source()
    if overrides:
        label += "; config prices for " + ", ".join(sorted(overrides))
    return label


# ---------------------------------------------------------------------------------------
# Period reports
# ---------------------------------------------------------------------------------------
@dataclass
class UsageFigures:
    """Token and cost figures of one report row (a period, a group within it, or the total)."""

    sessions: int = 0
    api_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: Decimal | None = None          # the priced part; None when nothing is priced
    recorded_cost_usd: Decimal | None = None
    compared_cost_usd: Decimal | None = None  # computed cost of the sessions that record one
    compared_complete: bool = True            # ... every row of it priced
    unpriced_models: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)

    @classmethod
    def from_record(cls, record: dict) -> "UsageFigures":
        """The figures of one (period, group, model) row of ``select_usage_report``."""
        model = record["model"] or "(unknown)"
        return cls(
            sessions=int(record.get("sessions") or 0),
            **{key: int(record[key] or 0) for key in COUNTED},
            cost_usd=record["cost_usd"], recorded_cost_usd=record["recorded_cost_usd"],
            compared_cost_usd=record["compared_cost_usd"],
            compared_complete=not record["compared_unpriced_rows"],
            unpriced_models=[model] if record["unpriced_rows"] else [], models=[model])

    def add(self, other: "UsageFigures") -> None:
        """Add another row's figures (unpriced models listed once). Distinct sessions do not
        add up: the caller sets ``sessions`` (the report's SQL counts them per level)."""
        for key in COUNTED:
            setattr(self, key, getattr(self, key) + getattr(other, key))
        for key in ("cost_usd", "recorded_cost_usd", "compared_cost_usd"):
            if getattr(other, key) is not None:
                setattr(self, key, (getattr(self, key) or Decimal(0)) + getattr(other, key))
        self.compared_complete = self.compared_complete and other.compared_complete
        self.unpriced_models = sorted(set(self.unpriced_models) | set(other.unpriced_models))
        self.models = sorted(set(self.models) | set(other.models))

    @property
    def complete(self) -> bool:
        return not self.unpriced_models

    @property
    def cost_difference(self) -> Decimal | None:
        """(recorded - computed) / computed for the sessions that record their cost; None
        when nothing is recorded, or the computed side is unpriced (partly) or zero."""
        if self.recorded_cost_usd is None or self.compared_cost_usd is None \
                or not self.compared_complete or self.compared_cost_usd == 0:
            return None
        return (self.recorded_cost_usd - self.compared_cost_usd) / self.compared_cost_usd

    @property
    def cost_mismatch(self) -> bool:
        difference = self.cost_difference
        return difference is not None and abs(difference) > MISMATCH

    def to_dict(self) -> dict:
        difference = self.cost_difference
        return {
            "sessions": self.sessions, "api_calls": self.api_calls,
            **{key: getattr(self, key) for key in TOKEN_KINDS},
            "cache_write_1h_tokens": self.cache_write_1h_tokens,
            "reasoning_tokens": self.reasoning_tokens, "total_tokens": self.total_tokens,
            "cost_usd": usd(self.cost_usd), "cost_complete": self.complete,
            "unpriced_models": self.unpriced_models,
            "recorded_cost_usd": usd(self.recorded_cost_usd),
            "computed_cost_of_recorded_usd": usd(self.compared_cost_usd)
            if self.recorded_cost_usd is not None else None,
            "cost_difference_pct": None if difference is None
            else float((difference * 100).quantize(Decimal("0.01"))),
            "cost_mismatch": self.cost_mismatch,
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
    breakdown: str | None                    # model | agent | project | format
    price_source: str
    rows: list[UsageRow]
    totals: UsageFigures
    order: str = "asc"
    rows_omitted: int = 0
    source: str = "messages"                 # what was read: stored | rows | messages
    start_of_week: str = "monday"            # a weekly report's first day of the week

    @property
    def key(self) -> str:
        return {"day": "date", "week": "week", "month": "month", "session": "session_id"}[self.period]

    def to_dict(self) -> dict:
        rows = []
        for row in self.rows:
            item = {self.key: row.period, **row.figures.to_dict(), **row.session}
            if self.breakdown:
                item["breakdown"] = [{self.breakdown: name, **figures.to_dict()}
                                     for name, figures in row.breakdown]
            rows.append(item)
        totals = self.totals.to_dict()
        return {
            "report": REPORT_NAMES[self.period],
            "tz": self.tz, "since": _iso(self.since), "until": _iso(self.until),
            "project": self.project, "breakdown": self.breakdown, "order": self.order,
            **({"start_of_week": self.start_of_week} if self.period == "week" else {}),
            "rows_omitted": self.rows_omitted, "usage_source": self.source,
            "price_source": self.price_source, "rows": rows, "totals": totals,
            "unpriced_models": totals["unpriced_models"],
        }


REPORT_NAMES = {"day": "daily", "week": "weekly", "month": "monthly", "session": "session"}


def usd(value: Decimal | None) -> float | None:
    return None if value is None else float(value.quantize(MICRO))


def _iso(value: date | None) -> str | None:
    return None if value is None else value.isoformat()


def _group(breakdown) -> str | None:
    if breakdown in (None, False, ""):
        return None
    if breakdown is True:
        return "model"
    if breakdown not in GROUPS:
        raise UsageError(f"unknown breakdown '{breakdown}'", hint="one of: " + ", ".join(GROUPS))
    return breakdown


def _order(order: str | None) -> str:
    order = order or "asc"
    if order not in ("asc", "desc"):
        raise UsageError(f"--order must be asc or desc, got '{order}'")
    return order


def _limit(limit: int | None) -> int | None:
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be 1 or more, got {limit}")
    return limit


def usage_report(lake, *, period: str, tz: str | None = None, since: str | date | None = None,
                 until: str | date | None = None, project: str | None = None,
                 breakdown: str | bool | None = None, order: str = "asc",
                 limit: int | None = None, config=None,
                 start_of_week: str = "monday") -> UsageReport:
    """Tokens and cost per day, week, month or session, optionally broken down by model,
    agent, project or format. ``lake``: a :class:`~pipeline.core.lake.Lake` or its folder;
    ``config``: a :class:`~pipeline.core.config.Config` whose ``prices`` apply;
    ``start_of_week``: the first day of a week (a week is named by it)."""
    if period not in PERIODS:
        raise UsageError(f"unknown report period '{period}'", hint="one of: " + ", ".join(PERIODS))
    if start_of_week not in WEEKDAYS:
        raise UsageError(f"unknown start of week '{start_of_week}'", hint="one of: " + ", ".join(WEEKDAYS))
    group, order, limit = _group(breakdown), _order(order), _limit(limit)
    zone = resolve_timezone(tz)
    since_day, until_day = day_span(since, until)
    overrides = _config_prices(config)
    params = {"tz": zone, "period": period, "since": since_day, "until": until_day,
              "project": project, "group": group or "model",
              "week_start": WEEKDAYS.index(start_of_week) + 1}
    summary = None if overrides else Summary(_root(lake))
    # --limit sums the sessions of the rows it keeps: session lists needed
    summary_params = {**params, "limited": limit is not None}
    if summary is not None and summary.serves(summary_params):   # current stored sums: no DuckDB
        return _assemble(_summary_records(summary, summary_params), period=period, tz=zone,
                         since=since_day, until=until_day, project=project, breakdown=group,
                         price_source=_price_label(overrides), order=order, limit=limit,
                         source="stored", start_of_week=start_of_week,
                         sessions_of=lambda periods: _summary_sessions(summary, summary_params, periods))
    params["undated_formats"] = list(UNDATED_FORMATS)     # the SQL reports bind them
    con, source = usage_connection(lake, overrides=overrides, need="rows")
    with con:
        records = _report_records(con, params)
        if source != "stored" and _ensure_prices(con, {r["model"] for r in records}, overrides):
            records = _report_records(con, params)

        def sessions_of(periods: list[str]) -> int:
            wanted = {k: v for k, v in params.items() if k != "group"}
            found = _report_records(con, {**wanted, "periods": periods}, "select_usage_report_sessions")
            return int(found[0]["sessions"])

        return _assemble(records, period=period, tz=zone, since=since_day, until=until_day,
                         project=project, breakdown=group, price_source=_price_label(overrides),
                         order=order, limit=limit, source=source, sessions_of=sessions_of,
                         start_of_week=start_of_week)


def _report_records(con, params: dict, name: str = "select_usage_report") -> list[dict]:
    import duckdb

    try:
        cursor = con.execute(sqlfiles.load(name), params)
    except duckdb.Error as exc:
        if "time zone" in str(exc).lower() or "timezone" in str(exc).lower():
            raise UsageError(f"the time zone '{params.get('tz')}' is not known to DuckDB",
                             hint="use another IANA name, e.g. UTC") from None
        raise
    return sqlfiles.fetch_dicts(cursor)


def _assemble(records: list[dict], *, period: str, tz: str, since, until, project, breakdown,
              price_source, order="asc", limit=None, source="messages", sessions_of=None,
              start_of_week="monday") -> UsageReport:
    """Period rows and the total from the rows of ``select_usage_report``: the (period,
    group, model) cells are summed; distinct sessions come from their own level's row."""
    rows: dict[str | None, UsageRow] = {}
    groups: dict[tuple, UsageFigures] = {}
    sessions: dict[tuple, int] = {}
    for record in records:
        if record["level"] != "cell":
            sessions[(record["level"], record["period"], record["grp"])] = int(record["sessions"])
            continue
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
        name = record["grp"] or "(unknown)"
        if (key, name) not in groups:
            groups[(key, name)] = UsageFigures()
            row.breakdown.append((name, groups[(key, name)]))
        groups[(key, name)].add(figures)
    for (key, name), figures in groups.items():
        figures.sessions = sessions.get(("group", key, None if name == "(unknown)" else name),
                                        sessions.get(("group", key, name), 0))
    ordered = list(rows.values())
    for row in ordered:
        row.figures.sessions = sessions.get(("period", row.period, None), 0)
        row.breakdown.sort(key=lambda item: item[0])
    if period == "session":
        ordered.sort(key=lambda r: (r.session["first_at"] is None, r.session["first_at"] or "",
                                    r.period or ""))
    else:
        ordered.sort(key=lambda r: (r.period is None, r.period or ""))
    if order == "desc":
        # newest first; undated rows stay last
        dated = [r for r in ordered if (r.session.get("first_at") if period == "session" else r.period)]
        ordered = dated[::-1] + [r for r in ordered if r not in dated]
    omitted = 0
    if limit is not None and len(ordered) > limit:
        omitted = len(ordered) - limit
        ordered = ordered[:limit]
    totals = UsageFigures()
    for row in ordered:
        totals.add(row.figures)
    if omitted and sessions_of is not None:
        totals.sessions = sessions_of([r.period if r.period is not None else "(no date)" for r in ordered])
    else:
        totals.sessions = sessions.get(("total", None, None), 0)
    return UsageReport(period, tz, since, until, project, breakdown, price_source, ordered,
                       totals, order=order, rows_omitted=omitted, source=source,
                       start_of_week=start_of_week)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _extreme(pick, a: str | None, b: str | None) -> str | None:
    """min/max of two ISO times (same zone), ignoring missing ones."""
    present = [v for v in (a, b) if v is not None]
    return pick(present) if present else None


# ---------------------------------------------------------------------------------------
# 5-hour billing blocks
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BurnRate:
    """Tokens per minute and USD per hour between a block's first and last call (ccusage)."""

    tokens_per_minute: float
    input_output_tokens_per_minute: float
    cost_usd_per_hour: float | None       # None: nothing in the block is priced

    def to_dict(self) -> dict:
        return {"tokens_per_minute": self.tokens_per_minute,
                "input_output_tokens_per_minute": self.input_output_tokens_per_minute,
                "cost_usd_per_hour": self.cost_usd_per_hour}


@dataclass(frozen=True)
class Projection:
    """A block's usage at its end if its burn rate holds (ccusage's projection)."""

    total_tokens: int
    cost_usd: float | None
    remaining_minutes: int

    def to_dict(self) -> dict:
        return {"total_tokens": self.total_tokens, "cost_usd": self.cost_usd,
                "remaining_minutes": self.remaining_minutes}


@dataclass
class UsageBlock:
    """A billing window as ccusage shows it: it starts at the hour of its first call (UTC) and
    lasts ``BLOCK_HOURS``; a call after the window, or after ``BLOCK_HOURS`` without any call,
    starts the next one. A gap block stands for a pause longer than a window."""

    start: datetime
    end: datetime
    is_gap: bool = False
    first_at: datetime | None = None
    last_at: datetime | None = None
    entries: int = 0
    figures: UsageFigures = field(default_factory=UsageFigures)
    is_active: bool = False
    burn_rate: BurnRate | None = None       # the active block's (None: one call so far)
    projection: Projection | None = None
    session_ids: set[str] = field(default_factory=set, repr=False)

    def to_dict(self, zone: ZoneInfo) -> dict:
        local = lambda t: None if t is None else t.astimezone(zone).isoformat()  # noqa: E731
        figures = self.figures.to_dict()
        return {"id": ("gap-" if self.is_gap else "") + self.start.astimezone(timezone.utc).isoformat(),
                "start": local(self.start), "end": local(self.end),
                "first_at": local(self.first_at), "last_at": local(self.last_at),
                "is_gap": self.is_gap, "is_active": self.is_active, "entries": self.entries,
                **figures, "burn_rate": None if self.burn_rate is None else self.burn_rate.to_dict(),
                "projection": None if self.projection is None else self.projection.to_dict()}


@dataclass
class BlocksReport:
    tz: str
    since: date | None
    until: date | None
    project: str | None
    now: datetime
    price_source: str
    blocks: list[UsageBlock]
    totals: UsageFigures
    order: str = "asc"
    rows_omitted: int = 0

    @property
    def active(self) -> UsageBlock | None:
        return next((b for b in self.blocks if b.is_active), None)

    def to_dict(self) -> dict:
        zone = ZoneInfo(self.tz)
        return {"report": "blocks", "tz": self.tz, "since": _iso(self.since),
                "until": _iso(self.until), "project": self.project,
                "now": self.now.astimezone(zone).isoformat(), "block_hours": BLOCK_HOURS,
                "order": self.order, "rows_omitted": self.rows_omitted,
                "price_source": self.price_source,
                "blocks": [b.to_dict(zone) for b in self.blocks],
                "totals": self.totals.to_dict(),
                "unpriced_models": self.totals.unpriced_models}


def blocks_report(lake, *, tz: str | None = None, since=None, until=None, project=None,
                  now: datetime | None = None, active_only: bool = False, order: str = "asc",
                  limit: int | None = None, config=None) -> BlocksReport:
    """The 5-hour billing blocks, with the active block's burn rate and projection."""
    order, limit = _order(order), _limit(limit)
    zone = resolve_timezone(tz)
    since_day, until_day = day_span(since, until)
    overrides = _config_prices(config)
    now = now or datetime.now(timezone.utc)
    if now.tzinfo is None:
        raise UsageError("'now' must carry a time zone")
    con, source = usage_connection(lake, overrides=overrides)
    with con:
        params = {"project": project}
        calls = _report_records(con, params, "select_usage_block_calls")
        if source != "stored" and _ensure_prices(con, {c["model"] for c in calls}, overrides):
            calls = _report_records(con, params, "select_usage_block_calls")
    blocks = _blocks(calls, now)
    local = ZoneInfo(zone)
    if since_day or until_day:
        blocks = [b for b in blocks if (not since_day or b.start.astimezone(local).date() >= since_day)
                  and (not until_day or b.start.astimezone(local).date() <= until_day)]
    if active_only:
        blocks = [b for b in blocks if b.is_active]
    if order == "desc":
        blocks = blocks[::-1]
    omitted = 0
    if limit is not None and len(blocks) > limit:
        omitted, blocks = len(blocks) - limit, blocks[:limit]
    totals = UsageFigures()
    for block in blocks:
        totals.add(block.figures)
    totals.sessions = len(set().union(*(b.session_ids for b in blocks)))
    return BlocksReport(zone, since_day, until_day, project, now, _price_label(overrides), blocks,
                        totals, order=order, rows_omitted=omitted)


def _blocks(calls: list[dict], now: datetime) -> list[UsageBlock]:
    """ccusage's session blocks over time-ordered calls (see :class:`UsageBlock`)."""
    window = timedelta(hours=BLOCK_HOURS)
    blocks: list[UsageBlock] = []
    current: UsageBlock | None = None
    for call in calls:
        at = call["timestamp"]
        if current is not None and (at - current.start > window or at - current.last_at > window):
            blocks.append(current)
            if at - current.last_at > window:
                blocks.append(UsageBlock(start=current.last_at + window, end=at, is_gap=True))
            current = None
        if current is None:
            start = at.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)
            current = UsageBlock(start=start, end=start + window, first_at=at)
        current.last_at = at
        current.entries += 1
        current.session_ids.add(call["session_id"])
        record = {"sessions": 1, "api_calls": 1 if call["usage_scope"] == "call" else 0,
                  **{key: call[key] for key in (*TOKEN_KINDS, "total_tokens")},
                  "cache_write_1h_tokens": 0, "reasoning_tokens": 0,
                  "cost_usd": call["cost_usd"], "recorded_cost_usd": None,
                  "compared_cost_usd": None, "compared_unpriced_rows": 0,
                  "unpriced_rows": 1 if call["cost_usd"] is None else 0, "model": call["model"]}
        current.figures.add(UsageFigures.from_record(record))
    if current is not None:
        blocks.append(current)
    for block in blocks:
        block.figures.sessions = len(block.session_ids)
        if block.is_gap:
            continue
        block.is_active = now - block.last_at < window and now < block.end
        if block.is_active:
            block.burn_rate = _burn_rate(block)
            block.projection = _projection(block, now)
    return blocks


def _burn_rate(block: UsageBlock) -> BurnRate | None:
    """Tokens per minute and USD per hour between the block's first and last call (ccusage)."""
    minutes = Decimal((block.last_at - block.first_at).total_seconds()) / 60
    if minutes <= 0:
        return None
    figures = block.figures
    cost_per_hour = None if figures.cost_usd is None else figures.cost_usd / minutes * 60
    return BurnRate(
        tokens_per_minute=float((Decimal(figures.total_tokens) / minutes).quantize(Decimal("0.01"))),
        input_output_tokens_per_minute=float(
            (Decimal(figures.input_tokens + figures.output_tokens) / minutes).quantize(Decimal("0.01"))),
        cost_usd_per_hour=usd(cost_per_hour))


def _projection(block: UsageBlock, now: datetime) -> Projection | None:
    """The block's usage at its end if the burn rate holds (ccusage's projection)."""
    seconds = Decimal((block.last_at - block.first_at).total_seconds())
    if seconds <= 0:
        return None
    remaining = max(Decimal(0), Decimal((block.end - now).total_seconds()))
    figures = block.figures
    tokens = Decimal(figures.total_tokens) + Decimal(figures.total_tokens) / seconds * remaining
    cost = None if figures.cost_usd is None else figures.cost_usd + figures.cost_usd / seconds * remaining
    return Projection(total_tokens=int(tokens.quantize(Decimal(1))), cost_usd=usd(cost),
                      remaining_minutes=int((remaining / 60).quantize(Decimal(1))))


# ---------------------------------------------------------------------------------------
# Table form (the CLI renders these rows with render.table)
# ---------------------------------------------------------------------------------------
def cost_cell(figures: UsageFigures) -> str:
    """``$1.2346``; ``UNPRICED`` when nothing is priced; ``$1.2346 + UNPRICED`` when partly."""
    if figures.cost_usd is None:
        return "UNPRICED" if figures.unpriced_models else "-"
    text = f"${figures.cost_usd.quantize(Decimal('0.0001')):,}"
    return f"{text} + UNPRICED" if figures.unpriced_models else text


def recorded_cell(figures: UsageFigures) -> str:
    """``$1.2346``, with ``!`` when it differs from the computed cost by more than 5%."""
    recorded = figures.recorded_cost_usd
    if recorded is None:
        return ""
    return f"${recorded.quantize(Decimal('0.0001')):,}" + (" !" if figures.cost_mismatch else "")


def short_model(name: str) -> str:
    """A model name for the compact layout: ``claude-`` and a trailing date dropped
    (``claude-sonnet-4-5-20250929`` -> ``sonnet-4-5``), a provider prefix dropped."""
    import re

    short = name.split("/")[-1]
    short = re.sub(r"^claude-", "", short)
    short = re.sub(r"-\d{8}$", "", short)
    return short


def _short_models(names: list[str]) -> list[str]:
    """Shortened model names, each once, in order."""
    return list(dict.fromkeys(short_model(n) for n in names))


def table_rows(report: UsageReport, *, compact: bool = False) -> tuple[list[str], list[tuple]]:
    """Column names and rows of the report's table (``compact``: under 80 columns: label,
    models, input, output, cost; models one per line, shortened)."""
    label = {"day": "Date", "week": "Week", "month": "Month", "session": "Session"}[report.period]
    show_recorded = report.totals.recorded_cost_usd is not None and not compact
    group = report.breakdown
    second = (group.capitalize() if group else "Models")
    if compact:
        columns = [label, second, "Input", "Output", "Cost (USD)"]
    else:
        columns = [label, second, "Input", "Output", "Cache write", "Cache read",
                   "Total tokens", "Cost (USD)"]
    if show_recorded:
        columns.append("Recorded $")

    def models_cell(figures: UsageFigures) -> str:
        names = sorted(figures.models)
        return "\n".join(_short_models(names)) if compact else ", ".join(names)

    def cells(first: str, second_cell: str, figures: UsageFigures) -> tuple:
        if compact:
            out = [first, second_cell, f"{figures.input_tokens:,}", f"{figures.output_tokens:,}",
                   cost_cell(figures).replace(" + UNPRICED", "+?")]
        else:
            out = [first, second_cell, f"{figures.input_tokens:,}", f"{figures.output_tokens:,}",
                   f"{figures.cache_write_tokens:,}", f"{figures.cache_read_tokens:,}",
                   f"{figures.total_tokens:,}", cost_cell(figures)]
        if show_recorded:
            out.append(recorded_cell(figures))
        return tuple(out)

    out_rows: list[tuple] = []
    for row in report.rows:
        name = row.period if row.period is not None else "(no date)"
        if compact and report.period == "session" and row.period:
            name = row.period[:13] + ("…" if len(row.period) > 13 else "")
        if group:
            out_rows.append(cells(name, "(all)", row.figures))
            for value, figures in row.breakdown:
                shown = short_model(value) if compact and group == "model" else value
                out_rows.append(cells("", f"└ {shown}", figures))
        else:
            out_rows.append(cells(name, models_cell(row.figures), row.figures))
    out_rows.append(cells("Total", "", report.totals))
    return columns, out_rows


def block_table_rows(report: BlocksReport, *, compact: bool = False) -> tuple[list[str], list[tuple]]:
    """Column names and rows of the blocks table (times in the report's zone)."""
    zone = ZoneInfo(report.tz)
    columns = ["Block start", "Status", "Models", "Tokens", "Cost (USD)"]
    if not compact:
        columns[3:3] = ["Input", "Output"]
    out: list[tuple] = []
    for block in report.blocks:
        start = block.start.astimezone(zone).strftime("%Y-%m-%d %H:%M")
        if block.is_gap:
            hours = (block.end - block.start).total_seconds() / 3600
            status = f"gap {_duration(block.end - block.start)}" if hours else "gap"
            row = [start, status, "", "", "-"]
        else:
            if block.is_active:
                status = f"ACTIVE ({_duration(block.end - report.now)} left)"
            else:
                status = _duration(block.last_at - block.first_at)
            names = sorted(block.figures.models)
            models = "\n".join(_short_models(names)) if compact else ", ".join(names)
            row = [start, status, models, f"{block.figures.total_tokens:,}", cost_cell(block.figures)]
        if not compact:
            if block.is_gap:
                row[3:3] = ["", ""]
            else:
                row[3:3] = [f"{block.figures.input_tokens:,}", f"{block.figures.output_tokens:,}"]
        out.append(tuple(row))
    total = ["Total", "", "", f"{report.totals.total_tokens:,}", cost_cell(report.totals)]
    if not compact:
        total[3:3] = [f"{report.totals.input_tokens:,}", f"{report.totals.output_tokens:,}"]
    out.append(tuple(total))
    return columns, out


def _duration(delta: timedelta) -> str:
    minutes = max(0, int(delta.total_seconds() // 60))
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {minutes:02d}m"
