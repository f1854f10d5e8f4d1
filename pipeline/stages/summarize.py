"""The summarize stage: daily session logs, recovery documents and the lake's price table.

``summarize(lake, tz=..., ignore_patterns=..., sessions=None)`` writes, under
``<lake>/summaries/``:

- ``sessions/YYYY-MM-DD.md``, one per local day (``tz``), exactly as the specification's
  ``writeSessionLog`` writes it: the header and a blank line, then one entry per session,
  entries directly one after the other (no blank line between them)::

      # Session Log — 2025-12-09

      ### 19:47
      - **Topic:** add myapp directory and create myapp/hoge.py ...
      - **Messages:** 2 user / 6 assistant
      - **Est. tokens:** ~842
      ### 20:03
      - **Topic:** ...

  The specification appends an entry when the session ends (``agent_end``, ``new Date()``):
  the file's day and the ``HH:MM`` are the session's end (its last timestamp) in ``tz``, and
  entries are in end-time order (ties by id), each session listed once. Only top-level
  sessions are listed: a sub-agent session (``parent_session_id`` set) is part of its
  parent's work. The figures cover the session's main thread (SWE-agent demonstrations left
  out):

  * Topic: the first user message a person typed (a human prompt, or a slash command, whose
    text is its arguments) whose cleaned text (injected metadata removed, ``<system-reminder>``,
    ``<environment_context>``, ...: :func:`pipeline.stages.recover.meaningful_text`, then trimmed)
    is longer than 10 characters: its first line, first 120 characters (cut, no ellipsis);
    ``(no topic)`` when there is none.
  * Messages: N user = human prompts (``is_prompt``: not meta, not tool results, not slash-
    command wrappers), one per source message; M assistant = assistant responses, one per
    API call id (Claude Code ``message.id:requestId``, Gemini message id) or, where the
    format has none, one per run of consecutive assistant rows (Codex, SWE-agent, ...).
  * Est. tokens: the specification's ``estimateTokens`` of the session's text messages
    joined (the ``text`` of every user and assistant text row, concatenated without a
    separator; thinking, tool calls and tool results are not text messages), written ``~T``
    without a thousands separator.

  ``session_logging = false`` in the config turns the daily logs off: none is written or
  removed (recovery documents are still written).
  ``log_details = true`` adds, after each entry's specified lines, a follow-up line a person
  can act on: ``- **Session:** `<id>` · <project> · $<cost> · recovery: <path>`` (the cost
  includes its sub-agents'; an unpriced model is said, never $0).

- ``recovery/<session id>.md``: the recovery document (:mod:`pipeline.stages.recover`) of every
  top-level session the run touched (all of them when ``sessions`` is None).
- ``derived/model_prices``: the price rows of every model with recorded usage, so the
  ``usage_calls``/``daily_usage``/``session_summary`` views carry costs in ``ctxlake sql``.

Idempotent: a file is rewritten (atomically) only when its bytes change, so a re-run changes
nothing. With ``sessions`` given, only the days those sessions started on and their recovery
documents are rebuilt (each day from everything the lake holds for it); with ``sessions=None``
every day and document is rebuilt and logs/documents of days or sessions that no longer
qualify are removed.

Sessions whose first real user message matches one of ``ignore_patterns`` (case-insensitive
regexes, the same rule as planning: :mod:`pipeline.policies.ignore_patterns`) are left out of
logs and recovery documents and counted in the summary. Sessions without any timestamp cannot
be placed on a day: they get a recovery document but no log line (counted as undated).
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Callable, Iterable
from zoneinfo import ZoneInfo

import pyarrow as pa

from pipeline.core import sqlfiles
from pipeline.core.batching import contiguous_runs
from pipeline.core.errors import ConfigError
from pipeline.core.lake import (
    Lake, atomic_write_bytes, holds_lake_lock, read_parquet, refuse_symlinks, remove_own_file,
)
from pipeline.stages.recover import (
    meaningful_text, recovery_file_name, render_documents, session_families,
)
from pipeline.stages.session_activity import read_session_facts
from pipeline.core.store import sync_files
from pipeline.stages.usage import resolve_timezone, use_model_prices

TOPIC_CHARS = 120
NO_TOPIC = "(no topic)"
PROMPTS_PER_SESSION = 10
TOPIC_MESSAGES_PER_SESSION = 50     # user messages read per session to find the topic
# recovery documents are built from evidence read this many bytes of it at a time (message
# texts and tool inputs: its Python objects take about 3x that): each batch's queries scan the
# lake's tables whole, so batches are as large as memory allows (the 500 MB demo: one)
RECOVERY_BATCH_BYTES = 96 * 1024 * 1024
LOG_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")


@dataclass
class LogEntry:
    session_id: str
    logged_at: datetime
    local_time: str
    topic: str
    n_user: int
    n_assistant: int
    est_tokens: int
    # the optional follow-up line (config ``log_details = true``), beside the specified ones
    project: str | None = None
    cost_usd: Decimal | None = None
    unpriced: bool = False
    recovery: str | None = None          # path of the session's recovery document


@dataclass
class SummarizeSummary:
    lake: str
    tz: str
    sessions_considered: int = 0
    sessions_listed: int = 0
    sessions_ignored: int = 0
    sessions_undated: int = 0
    ignored_session_ids: list[str] = field(default_factory=list)
    days_written: int = 0
    days_unchanged: int = 0
    days_removed: int = 0
    recovery_written: int = 0
    recovery_unchanged: int = 0
    recovery_removed: int = 0
    prices_written: bool = False
    seconds: float = 0.0
    log_dir: str = ""
    recovery_dir: str = ""
    # per session asked for: {"root", "day", "doc"} (where its log line and document are; the
    # stage ledger keeps it to find them again), not part of the printed summary
    placed: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()
                if k != "placed"}


# ---------------------------------------------------------------------------------------
# Pure parts (tested directly)
# ---------------------------------------------------------------------------------------
TOPIC_MIN_CHARS = 10
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)


def typed_text(text: str | None, is_command: bool = False) -> str:
    """What a person typed in a user message: a slash command's arguments, else the text."""
    if not is_command:
        return text or ""
    return "\n".join(m.group(1) for m in _COMMAND_ARGS.finditer(text or ""))


def topic_of(messages: Iterable[str | None | tuple[str | None, bool]]) -> str:
    """The log topic from a session's user messages in order: ``text`` or ``(text,
    is_command)`` (see the module docstring)."""
    for message in messages:
        text, is_command = message if isinstance(message, tuple) else (message, False)
        cleaned = meaningful_text(typed_text(text, is_command)).strip()
        if len(cleaned) > TOPIC_MIN_CHARS:
            return cleaned.split("\n")[0][:TOPIC_CHARS]
    return NO_TOPIC


def detail_line(entry: LogEntry) -> str:
    """The optional follow-up line of a log entry: session id, project, cost, recovery doc."""
    if entry.cost_usd is None:
        cost = "unpriced" if entry.unpriced else "no recorded usage"
    else:
        cost = f"${entry.cost_usd:.4f}" + (" + unpriced" if entry.unpriced else "")
    return (f"- **Session:** `{entry.session_id}` · {entry.project or '(no project)'} · {cost}"
            f" · recovery: {entry.recovery or '(none)'}")


def render_day(day: str, entries: list[LogEntry], *, details: bool = False) -> str:
    """The text of one daily log (entries already in order); ``details``: each entry also
    gets :func:`detail_line` after the specified lines."""
    return f"# Session Log — {day}\n\n" + "".join(
        "\n".join([
            f"### {entry.local_time}",
            f"- **Topic:** {entry.topic}",
            f"- **Messages:** {entry.n_user} user / {entry.n_assistant} assistant",
            f"- **Est. tokens:** ~{entry.est_tokens}",
            *([detail_line(entry)] if details else []),
            "",
        ]) for entry in entries)


def compile_ignore_patterns(patterns: Iterable[str]) -> list[re.Pattern]:
    from pipeline.policies.base import ParamError
    from pipeline.policies.ignore_patterns import compile_patterns
    try:
        return compile_patterns(list(patterns))
    except ParamError as error:
        raise ConfigError(str(error), hint="ignore_patterns are Python regular expressions") from None


# the first bytes of what summarize writes: only such files are ever deleted
LOG_PREFIX = "# Session Log — ".encode()
RECOVERY_PREFIX = b"# Recovery ID: "


def write_if_changed(path: Path, text: str) -> bool:
    """Atomically write ``text`` unless the file already holds exactly these bytes."""
    data = text.encode("utf-8")
    if not path.is_symlink():
        try:
            if path.read_bytes() == data:
                return False
        except FileNotFoundError:
            pass
    # a rename: a symlink planted at ``path`` is replaced, not followed; one flush per run:
    # see _summarize
    atomic_write_bytes(path, data, fsync=False)
    return True


# ---------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------
@holds_lake_lock
def summarize(lake: Lake, *, tz: str | None = None, ignore_patterns: Iterable[str] = (),
              sessions: Iterable[str] | None = None,
              progress: Callable[[int, int], None] | None = None,
              days: Iterable[str] = (), removed: Iterable[str] = (),
              session_logging: bool = True, log_details: bool = False,
              ledger: bool = False) -> SummarizeSummary:
    """Write daily logs, recovery documents and model prices (see the module docstring).

    ``days``: more days to rebuild (where the nightly job's owed sessions were listed
    before); ``removed``: sessions gone from the lake, whose recovery documents go.
    ``session_logging=False`` (the config's ``session_logging = false``) writes no daily log;
    ``log_details=True`` (``log_details = true``) adds a follow-up line per entry.
    Holds the lake's lock (re-entrant: the nightly run already holds it).

    ``ledger=True``: the caller (the nightly job's summarize stage) records this work in its
    stage ledger. Otherwise (the ``summarize`` command) the files written may follow other
    settings than the ledger's (no ignore patterns, another zone), so the nightly job's
    summarize stage is made to owe every session again: the next night rewrites them under
    its own settings instead of keeping what this call wrote."""
    from pipeline.core.ledger import Ledger

    summary = _summarize(lake, tz=tz, ignore_patterns=ignore_patterns, sessions=sessions,
                         progress=progress, extra_days=set(days), removed=set(removed),
                         session_logging=session_logging, log_details=log_details)
    if not ledger:
        Ledger(lake).reset("summarize")
    return summary


def _summarize(lake: Lake, *, tz, ignore_patterns, sessions, progress, extra_days=frozenset(),
               removed=frozenset(), session_logging: bool = True,
               log_details: bool = False) -> SummarizeSummary:
    started = time.perf_counter()
    zone_name = resolve_timezone(tz)
    zone = ZoneInfo(zone_name)
    compiled = compile_ignore_patterns(ignore_patterns)
    log_dir = lake.summaries_dir / "sessions"
    recovery_dir = lake.summaries_dir / "recovery"
    summary = SummarizeSummary(lake=str(lake.root), tz=zone_name, log_dir=str(log_dir),
                               recovery_dir=str(recovery_dir))
    for folder in (log_dir, recovery_dir):
        refuse_symlinks(lake.root, folder, what="summaries folder")
    written: list[str] = []   # files written without their own fsync
    with lake.connect() as con, contextlib.ExitStack() as stack:
        facts = read_session_facts(lake, con, incremental=sessions is not None)
        summary.prices_written = _write_model_prices(lake, con, facts.models,
                                                     reuse=sessions is not None)
        rows = facts.top_level
        by_id = {row["session_id"]: row for row in rows}
        asked = None if sessions is None else sorted(set(sessions))
        root_of = {} if asked is None else _root_map(con, asked)
        touched = None if asked is None else set(root_of.values())

        day_of: dict[str, str | None] = {}
        time_of: dict[str, str] = {}
        for row in rows:
            logged_at = row["ended_at"] or row["started_at"]    # the session's end (agent_end)
            if logged_at is None:
                day_of[row["session_id"]] = None
                continue
            local = logged_at.astimezone(zone)
            day_of[row["session_id"]] = local.strftime("%Y-%m-%d")
            time_of[row["session_id"]] = local.strftime("%H:%M")

        if touched is None:
            days = {d for d in day_of.values() if d is not None}
            considered = sorted(by_id)
        else:
            # a touched session may have ended on a later day than at the last run: every day
            # from its start to its end is rebuilt (its old entry is on one of them)
            days = set(extra_days)
            for s in touched:
                if s in by_id and day_of.get(s):
                    days.update(_days_between(by_id[s]["started_at"], by_id[s]["ended_at"], zone))
                    days.add(day_of[s])
            considered = sorted(s for s in by_id if s in touched or day_of.get(s) in days)

        # the log figures of the sessions on the days rebuilt (all of them on a full run):
        # the stored entry of a session not asked for whose sources are those it was made
        # of, else read from the lake now
        entries_fp = _entries_settings(log_details)
        kept = _read_entries(lake) if touched is not None and session_logging else {}
        stored = {s: kept[s] for s in considered if s in kept and s not in touched
                  and kept[s]["settings_fp"] == entries_fp
                  and by_id[s]["log_key"] is not None and kept[s]["log_key"] == by_id[s]["log_key"]}
        fresh = [s for s in considered if s not in stored] if session_logging else []
        # the queries of these sessions alone read only their family's files when a few are
        # asked (pipeline.core.scope); those over every session above and below keep `con`
        local = con if touched is None else stack.enter_context(
            lake.connect(scope=set(fresh) | touched | facts.id_shifted, within=con))
        scope = {"sessions": None if touched is None else fresh}
        figures = {row["session_id"]: row for row in _query(local, "select_session_log_rows", scope)} \
            if fresh else {}
        costs = {row["session_id"]: row for row in _query(local, "select_session_log_costs", {
            "sessions": None if touched is None else session_families(local, fresh)})} \
            if fresh and log_details else {}
        from pipeline.stages.flags import ignored_sessions
        ignored = set(ignored_sessions(lake, con, ignore_patterns, compiled, considered))
        summary.sessions_considered = len(considered)
        summary.sessions_ignored = len(ignored)
        summary.ignored_session_ids = sorted(ignored)
        summary.sessions_undated = sum(1 for s in considered if day_of.get(s) is None)

        # daily logs
        if session_logging:
            topics = _topic_texts(local, fresh)
            for session_id in fresh:
                row = figures[session_id]
                cost = costs.get(session_id) or {"cost_usd": None, "unpriced": False}
                stored[session_id] = {
                    "session_id": session_id, "log_key": by_id[session_id]["log_key"],
                    "settings_fp": entries_fp, "topic": topic_of(topics.get(session_id, [])),
                    "n_user": int(row["n_user"]), "n_assistant": int(row["n_assistant"]),
                    "est_tokens": int(row["est_tokens"] or 0), "project": row["project"],
                    "cost_usd": None if cost["cost_usd"] is None else str(cost["cost_usd"]),
                    "unpriced": bool(cost["unpriced"])}
            gone = set(removed) | (set(kept) - set(by_id))
            lake.write_session_rows(
                LOG_ENTRIES, "all", pa.Table.from_pylist([stored[s] for s in fresh],
                                                         schema=LOG_ENTRIES_SCHEMA),
                None if touched is None else sorted(set(fresh) | gone), sort_by=["session_id"])
        per_day: dict[str, list[LogEntry]] = {day: [] for day in days} if session_logging else {}
        for session_id in considered:
            day = day_of.get(session_id)
            if session_id in ignored or day not in per_day:
                continue
            entry = stored[session_id]
            per_day[day].append(LogEntry(
                session_id, by_id[session_id]["ended_at"] or by_id[session_id]["started_at"],
                time_of[session_id], entry["topic"], entry["n_user"], entry["n_assistant"],
                entry["est_tokens"], entry["project"],
                None if entry["cost_usd"] is None else Decimal(entry["cost_usd"]),
                entry["unpriced"], str(recovery_dir / recovery_file_name(session_id))))
        for day in sorted(per_day):
            entries = sorted(per_day[day], key=lambda e: (e.logged_at, e.session_id))
            path = log_dir / f"{day}.md"
            if not entries:
                if remove_own_file(path, LOG_PREFIX):
                    summary.days_removed += 1
                continue
            summary.sessions_listed += len(entries)
            if write_if_changed(path, render_day(day, entries, details=log_details)):
                written.append(str(path))
                summary.days_written += 1
            else:
                summary.days_unchanged += 1
        if session_logging and touched is None and log_dir.exists():
            for path in sorted(log_dir.iterdir()):
                if LOG_NAME.match(path.name) and path.stem not in per_day \
                        and remove_own_file(path, LOG_PREFIX):
                    summary.days_removed += 1

        # recovery documents
        # (and those whose recovery id another session's change may have changed)
        wanted = sorted(s for s in (by_id if touched is None else touched | facts.id_shifted)
                        if s in by_id and s not in ignored)
        expected_names = set()
        memory_ids = facts.memory_ids
        done = 0
        for batch in _evidence_batches(local, wanted, all_sessions=touched is None):
            for session_id, text in render_documents(local, batch, memory_ids).items():
                name = recovery_file_name(session_id)
                expected_names.add(name)
                if write_if_changed(recovery_dir / name, text):
                    written.append(str(recovery_dir / name))
                    summary.recovery_written += 1
                else:
                    summary.recovery_unchanged += 1
            done += len(batch)
            if progress:
                progress(done, len(wanted))
        stale = ({recovery_file_name(s) for s in ignored | set(removed)} - expected_names
                 if touched is not None else None)
        for session_id in (asked if asked is not None else sorted(by_id)):
            root = root_of.get(session_id, session_id)
            listed = root in by_id and root not in ignored
            summary.placed[session_id] = {
                "root": root, "day": day_of.get(root) if listed else None,
                "doc": recovery_file_name(root) if listed else None}
        if recovery_dir.exists():
            for path in sorted(recovery_dir.glob("*.md")):
                gone = path.name not in expected_names if stale is None else path.name in stale
                if gone and remove_own_file(path, RECOVERY_PREFIX):
                    summary.recovery_removed += 1
    # durability barrier for every file written above (per file for a few, else one flush)
    sync_files(written, [lake.summaries_dir])
    summary.seconds = time.perf_counter() - started
    return summary


# The log figures of each top-level session as the last run wrote them, so that rebuilding a
# day for one changed session reads only that session from the lake (not every session of
# the day): ``derived/session_log_entries`` (per session bucket). An entry is used only when
# its ``log_key`` (its sources' and its sub-agents' sources' generation, lines and digest:
# ``sql/select_session_source_keys.sql``) and ``settings_fp`` (the figures' version, and the
# price snapshot when costs are shown) are those of now.
LOG_ENTRIES = "session_log_entries"
LOG_ENTRIES_LAYOUT = 1
LOG_ENTRIES_SCHEMA = pa.schema([
    ("session_id", pa.string()), ("log_key", pa.string()), ("settings_fp", pa.string()),
    ("topic", pa.string()), ("n_user", pa.int64()), ("n_assistant", pa.int64()),
    ("est_tokens", pa.int64()), ("project", pa.string()),
    ("cost_usd", pa.string()),        # exact: the DECIMAL sum as text (None: no cost)
    ("unpriced", pa.bool_())])


def _entries_settings(log_details: bool) -> str:
    from pipeline import __version__
    from pipeline.core.ledger import fingerprint

    if not log_details:
        return fingerprint([LOG_ENTRIES_LAYOUT, __version__])
    from pipeline.reports.prices import PRICE_SOURCE
    return fingerprint([LOG_ENTRIES_LAYOUT, __version__, "costs", PRICE_SOURCE])


def _read_entries(lake: Lake) -> dict[str, dict]:
    """Every stored log entry, by session id."""
    table = lake.read_derived(LOG_ENTRIES, "all", LOG_ENTRIES_SCHEMA)
    return {row["session_id"]: row for row in table.to_pylist()}


def _evidence_batches(con, wanted: list[str], *, all_sessions: bool) -> list[list[str]]:
    """``wanted`` (top-level session ids, sorted) in runs of about ``RECOVERY_BATCH_BYTES`` of
    evidence (``select_recovery_evidence_bytes``; one session needs no sizing)."""
    if len(wanted) <= 1:
        return [wanted] if wanted else []
    sizes = dict(con.execute(sqlfiles.load("select_recovery_evidence_bytes"),
                             {"sessions": None if all_sessions else wanted}).fetchall())
    return contiguous_runs(wanted, lambda sid: int(sizes.get(sid) or 0), RECOVERY_BATCH_BYTES)


def _query(con, name: str, params: dict) -> list[dict]:
    cursor = con.execute(sqlfiles.load(name), params)
    return sqlfiles.fetch_dicts(cursor)


def _root_map(con, session_ids: list[str]) -> dict[str, str]:
    """The top-level session of each of these sessions (a sub-agent stands for its parent)."""
    if not session_ids:
        return {}
    rows = _query(con, "select_session_parents", {"sessions": session_ids})
    return {row["session_id"]: row["root_session_id"] for row in rows}


def _days_between(start: datetime | None, end: datetime | None, zone) -> set[str]:
    """The local days from ``start`` to ``end`` (inclusive)."""
    from datetime import timedelta
    if start is None or end is None:
        return set()
    day, last = start.astimezone(zone).date(), end.astimezone(zone).date()
    out = set()
    while day <= last:
        out.add(day.isoformat())
        day += timedelta(days=1)
    return out


def _topic_texts(con, session_ids: list[str]) -> dict[str, list[tuple[str, bool]]]:
    """Per session: its first user messages a person typed, as ``(text, is_command)``."""
    from pipeline.formats.base import COMMAND_WRAPPER

    out: dict[str, list[tuple[str, bool]]] = {}
    if not session_ids:
        return out
    rows = _query(con, "select_session_topic_texts", {
        "sessions": session_ids, "limit": TOPIC_MESSAGES_PER_SESSION,
        "command_pattern": COMMAND_WRAPPER.pattern})
    for row in rows:
        out.setdefault(row["session_id"], []).append((row["text"], bool(row["is_command"])))
    return out


def _write_model_prices(lake: Lake, con, models: list[str], *, reuse: bool = False) -> bool:
    """Write ``derived/model_prices/all.parquet`` for ``models`` (those carrying recorded
    usage in the lake, sorted) when it changed; use it in ``con``.

    ``reuse`` (an incremental run: the settings, hence the ctxlake version, are those of the
    run that wrote the file): the file is kept, without loading the price snapshot (~0.1 s),
    when it prices exactly the lake's models from the same genai-prices snapshot."""
    from pipeline.reports.prices import PRICE_SOURCE, model_price_table
    target = lake.derived_dir / "model_prices" / "all.parquet"
    existing = None
    if target.exists():
        try:
            existing = read_parquet(target)
        except Exception:  # an unreadable file is replaced
            existing = None
    if reuse and existing is not None \
            and set(existing.column("model").to_pylist()) == {m for m in models if m} \
            and set(existing.column("price_source").to_pylist()) - {None} <= {PRICE_SOURCE}:
        use_model_prices(con, existing)
        return False
    table = model_price_table(models)
    changed = existing is None or not existing.equals(table)
    if changed:
        lake.write_derived("model_prices", "all", table)
    use_model_prices(con, table)
    return changed


# ---------------------------------------------------------------------------------------
# Reading the logs back (``ctxlake sessions``)
# ---------------------------------------------------------------------------------------
LIST_DAYS = 14
TAIL_LINES = 50


@dataclass
class LogIndex:
    log_dir: str
    days: list[tuple[str, int]]         # (YYYY-MM-DD, sessions), newest first, at most LIST_DAYS
    total_days: int

    @property
    def more_days(self) -> int:
        return self.total_days - len(self.days)

    def to_dict(self) -> dict:
        return {"log_dir": self.log_dir, "total_days": self.total_days, "more_days": self.more_days,
                "days": [{"date": day, "sessions": count} for day, count in self.days]}


@dataclass
class LogTail:
    day: str
    path: str
    lines: list[str]
    omitted: int                         # earlier lines not shown

    def to_dict(self) -> dict:
        return {"date": self.day, "path": self.path, "omitted": self.omitted, "lines": self.lines}


def session_log_index(lake: Lake, *, limit: int = LIST_DAYS) -> LogIndex:
    """The most recent ``limit`` daily logs with their session counts (``### `` headings)."""
    log_dir = lake.summaries_dir / "sessions"
    names = sorted((p for p in log_dir.glob("*.md") if LOG_NAME.match(p.name)), reverse=True) \
        if log_dir.is_dir() else []
    days = []
    for path in names[:limit]:
        count = sum(1 for line in path.read_text(encoding="utf-8").splitlines()
                    if line.startswith("### "))
        days.append((path.stem, count))
    return LogIndex(str(log_dir), days, len(names))


def session_log_tail(lake: Lake, day: str, *, lines: int | None = TAIL_LINES) -> LogTail:
    """The last ``lines`` lines of one day's log (None: all of it); a clear error when there
    is none."""
    from datetime import date as _date

    from pipeline.core.errors import CtxlakeError, UsageError
    try:
        _date.fromisoformat(day)
    except ValueError:
        raise UsageError(f"DATE must be YYYY-MM-DD, got '{day}'",
                         hint="list the days with logs: ctxlake sessions") from None
    path = lake.summaries_dir / "sessions" / f"{day}.md"
    if not path.is_file():
        index = session_log_index(lake, limit=1)
        hint = (f"the latest log is {index.days[0][0]}; list them with: ctxlake sessions"
                if index.days else "no logs yet: run `ctxlake summarize` first")
        raise CtxlakeError(f"no session log for {day}", path=str(path), hint=hint)
    all_lines = path.read_text(encoding="utf-8").splitlines()
    shown = all_lines if lines is None else (all_lines[-lines:] if lines > 0 else [])
    return LogTail(day, str(path), shown, len(all_lines) - len(shown))
