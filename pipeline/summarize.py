"""The summarize stage: daily session logs, recovery documents and the lake's price table.

``summarize(lake, tz=..., ignore_patterns=..., sessions=None)`` writes, under
``<lake>/summaries/``:

- ``sessions/YYYY-MM-DD.md``, one per local day (``tz``), exactly::

      # Session Log — 2025-12-09

      ### 19:47
      - **Topic:** add myapp directory and create myapp/hoge.py ...
      - **Messages:** 2 user / 6 assistant
      - **Est. tokens:** ~842

  Sessions in start-time order (ties by id), each listed once, on the local day it started.
  Only top-level sessions are listed: a sub-agent session (its own file, ``parent_session_id``
  set) is part of its parent's work. The three figures come from the ``session_summary``
  view and cover the session's main thread (inline sidechains and SWE-agent demonstrations
  left out):

  * Topic: the first line of the first human prompt that has one after injected metadata is
    removed (``<system-reminder>``, ``<environment_context>``, slash-command wrappers, ...;
    :func:`pipeline.recover.meaningful_text`), whitespace collapsed, at most 120 characters
    (a longer line is cut to 119 and ends with "…"); ``(no topic)`` when there is none.
  * Messages: N user = human prompts (``is_prompt``: not meta, not tool results, not slash-
    command wrappers), one per source message; M assistant = assistant responses, one per
    API call id (Claude Code ``message.id:requestId``, Gemini message id) or, where the
    format has none, one per run of consecutive assistant rows (Codex, SWE-agent, ...).
  * Est. tokens: the sum of ``est_tokens`` of every main-thread message (prompts, replies,
    thinking, tool calls and results), written ``~12,345``.

- ``recovery/<session id>.md``: the recovery document (:mod:`pipeline.recover`) of every
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

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable
from zoneinfo import ZoneInfo

import pyarrow.parquet as pq

from pipeline import sqlfiles
from pipeline.errors import ConfigError
from pipeline.lake import Lake, atomic_write_bytes, holds_lake_lock, refuse_symlinks, remove_own_file
from pipeline.recover import build_documents, clip, first_line, recovery_file_name
from pipeline.usage import resolve_timezone, use_model_prices

TOPIC_CHARS = 120
NO_TOPIC = "(no topic)"
PROMPTS_PER_SESSION = 10
RECOVERY_BATCH = 1000
LOG_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")


@dataclass
class LogEntry:
    session_id: str
    started_at: datetime
    local_time: str
    topic: str
    n_user: int
    n_assistant: int
    est_tokens: int


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

    def to_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


# ---------------------------------------------------------------------------------------
# Pure parts (tested directly)
# ---------------------------------------------------------------------------------------
def topic_of(prompts: Iterable[str | None]) -> str:
    """The log topic from a session's prompts in order (see the module docstring)."""
    for text in prompts:
        line = first_line(text)
        if line:
            return clip(line, TOPIC_CHARS)
    return NO_TOPIC


def render_day(day: str, entries: list[LogEntry]) -> str:
    """The text of one daily log (entries already in order)."""
    parts = [f"# Session Log — {day}"]
    for entry in entries:
        parts.append("\n".join([
            f"### {entry.local_time}",
            f"- **Topic:** {entry.topic}",
            f"- **Messages:** {entry.n_user} user / {entry.n_assistant} assistant",
            f"- **Est. tokens:** ~{entry.est_tokens:,}",
        ]))
    return "\n\n".join(parts) + "\n"


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
    atomic_write_bytes(path, data)   # a rename: a symlink planted at ``path`` is replaced, not followed
    return True


# ---------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------
@holds_lake_lock
def summarize(lake: Lake, *, tz: str | None = None, ignore_patterns: Iterable[str] = (),
              sessions: Iterable[str] | None = None,
              progress: Callable[[int, int], None] | None = None) -> SummarizeSummary:
    """Write daily logs, recovery documents and model prices (see the module docstring).

    Holds the lake's lock (re-entrant: the nightly run already holds it)."""
    return _summarize(lake, tz=tz, ignore_patterns=ignore_patterns, sessions=sessions,
                      progress=progress)


def _summarize(lake: Lake, *, tz, ignore_patterns, sessions, progress) -> SummarizeSummary:
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
    con = lake.connect()
    try:
        summary.prices_written = _write_model_prices(lake, con)
        rows = _query(con, "select_session_log_rows", {})
        by_id = {row["session_id"]: row for row in rows}
        touched = None if sessions is None else _roots(con, sorted(set(sessions)))

        day_of: dict[str, str | None] = {}
        time_of: dict[str, str] = {}
        for row in rows:
            if row["started_at"] is None:
                day_of[row["session_id"]] = None
                continue
            local = row["started_at"].astimezone(zone)
            day_of[row["session_id"]] = local.strftime("%Y-%m-%d")
            time_of[row["session_id"]] = local.strftime("%H:%M")

        if touched is None:
            days = {d for d in day_of.values() if d is not None}
            considered = sorted(by_id)
        else:
            days = {day_of[s] for s in touched if day_of.get(s)}
            considered = sorted(s for s in by_id if s in touched or day_of.get(s) in days)

        prompts = _prompts(con, considered)
        ignored = set()
        from pipeline.policies.ignore_patterns import matching_pattern
        for session_id in considered:
            texts = prompts.get(session_id, [])
            if compiled and matching_pattern(texts[0] if texts else None, compiled):
                ignored.add(session_id)
        summary.sessions_considered = len(considered)
        summary.sessions_ignored = len(ignored)
        summary.ignored_session_ids = sorted(ignored)
        summary.sessions_undated = sum(1 for s in considered if day_of.get(s) is None)

        # daily logs
        per_day: dict[str, list[LogEntry]] = {day: [] for day in days}
        for session_id in considered:
            day = day_of.get(session_id)
            if session_id in ignored or day not in per_day:
                continue
            row = by_id[session_id]
            per_day[day].append(LogEntry(
                session_id, row["started_at"], time_of[session_id],
                topic_of(prompts.get(session_id, [])), int(row["n_user"]),
                int(row["n_assistant"]), int(row["est_tokens"] or 0)))
        for day in sorted(per_day):
            entries = sorted(per_day[day], key=lambda e: (e.started_at, e.session_id))
            path = log_dir / f"{day}.md"
            if not entries:
                if remove_own_file(path, LOG_PREFIX):
                    summary.days_removed += 1
                continue
            summary.sessions_listed += len(entries)
            if write_if_changed(path, render_day(day, entries)):
                summary.days_written += 1
            else:
                summary.days_unchanged += 1
        if touched is None and log_dir.exists():
            for path in sorted(log_dir.iterdir()):
                if LOG_NAME.match(path.name) and path.stem not in per_day \
                        and remove_own_file(path, LOG_PREFIX):
                    summary.days_removed += 1

        # recovery documents
        wanted = sorted(s for s in (by_id if touched is None else touched)
                        if s in by_id and s not in ignored)
        expected_names = set()
        for start in range(0, len(wanted), RECOVERY_BATCH):
            batch = wanted[start:start + RECOVERY_BATCH]
            for session_id, document in build_documents(con, batch).items():
                name = recovery_file_name(session_id)
                expected_names.add(name)
                if write_if_changed(recovery_dir / name, document.to_markdown()):
                    summary.recovery_written += 1
                else:
                    summary.recovery_unchanged += 1
            if progress:
                progress(min(start + RECOVERY_BATCH, len(wanted)), len(wanted))
        stale = ({recovery_file_name(s) for s in ignored} if touched is not None else None)
        if recovery_dir.exists():
            for path in sorted(recovery_dir.glob("*.md")):
                gone = path.name not in expected_names if stale is None else path.name in stale
                if gone and remove_own_file(path, RECOVERY_PREFIX):
                    summary.recovery_removed += 1
    finally:
        con.close()
    summary.seconds = time.perf_counter() - started
    return summary


def _query(con, name: str, params: dict) -> list[dict]:
    cursor = con.execute(sqlfiles.load(name), params)
    return sqlfiles.fetch_dicts(cursor)


def _roots(con, session_ids: list[str]) -> set[str]:
    """The top-level sessions of these sessions (a sub-agent stands for its parent)."""
    if not session_ids:
        return set()
    rows = _query(con, "select_session_parents", {"sessions": session_ids})
    return {row["root_session_id"] for row in rows}


def _prompts(con, session_ids: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if not session_ids:
        return out
    rows = _query(con, "select_session_prompts", {"sessions": session_ids, "limit": PROMPTS_PER_SESSION})
    for row in rows:
        out.setdefault(row["session_id"], []).append(row["text"])
    return out


def _write_model_prices(lake: Lake, con) -> bool:
    """Write ``derived/model_prices/all.parquet`` when it changed; use it in ``con``."""
    from pipeline.prices import model_price_table
    models = [row[0] for row in con.execute(sqlfiles.load("select_usage_models")).fetchall()]
    table = model_price_table(models)
    target = lake.derived_dir / "model_prices" / "all.parquet"
    changed = True
    if target.exists():
        try:
            changed = not pq.read_table(target).equals(table)
        except Exception:  # an unreadable file is replaced
            changed = True
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


def session_log_tail(lake: Lake, day: str, *, lines: int = TAIL_LINES) -> LogTail:
    """The last ``lines`` lines of one day's log; a clear error when there is none."""
    from datetime import date as _date

    from pipeline.errors import CtxlakeError, UsageError
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
    shown = all_lines[-lines:] if lines > 0 else []
    return LogTail(day, str(path), shown, len(all_lines) - len(shown))
