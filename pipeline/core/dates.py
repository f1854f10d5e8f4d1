"""The one reader of ``--since`` / ``--until`` values (reports, plan, replay, the CLI).

Two forms: a day (``YYYY-MM-DD``, for the reports' inclusive day ranges) and a moment
(``YYYY-MM-DD`` or any ISO 8601 time, naive meaning UTC, for plan/replay's "sessions started
on/after"). Date and datetime objects pass through, so library callers may give either.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

from pipeline.core.errors import UsageError

# the first day of a week (``report weekly --start-of-week``), in ISO order (1 = Monday):
# Monday by default; ccusage's weekly report starts on Sunday unless told otherwise
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

__all__ = ["parse_since", "day_span", "from_epoch_us"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def from_epoch_us(micros: int | None) -> datetime | None:
    """The UTC moment ``micros`` microseconds after the epoch (None stays None): exact, where
    ``datetime.fromtimestamp`` goes through a float."""
    return None if micros is None else _EPOCH + timedelta(microseconds=micros)


def parse_since(value: str | date | None, option: str = "--since", *,
                moment: bool = False) -> date | datetime | None:
    """``value`` read as a day (``moment=False``: a :class:`date`) or as a moment
    (``moment=True``: an aware :class:`datetime`, UTC when no offset is given); None or ''
    is None for a moment. A value that is neither is a :class:`UsageError` naming ``option``."""
    if value is None:
        return None
    if moment:
        if value == "":
            return None
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        if isinstance(value, date):
            return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
        try:
            parsed = datetime.fromisoformat(str(value))
        except ValueError:
            raise UsageError(f"cannot read the date '{value}'",
                             hint="write YYYY-MM-DD (or an ISO 8601 time)") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{option} must be a date YYYY-MM-DD, got '{value}'") from None


def day_span(since: str | date | None, until: str | date | None) -> tuple[date | None, date | None]:
    """(first day, last day) of an inclusive ``--since``/``--until`` range, each None when
    not given; a range that ends before it starts is a :class:`UsageError`."""
    first, last = parse_since(since, "--since"), parse_since(until, "--until")
    if first and last and first > last:
        raise UsageError(f"--since {first} is after --until {last}")
    return first, last
