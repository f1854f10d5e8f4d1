"""The one --since/--until reader (pipeline/core/dates.py) and the machine's time zone."""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.dates import day_span, parse_since
from pipeline.core.errors import UsageError
from pipeline.core.lake import Lake


def test_a_day_is_read_as_a_date_and_a_date_passes_through():
    assert parse_since("2026-11-01") == date(2026, 11, 1)
    assert parse_since(date(2026, 11, 1)) == date(2026, 11, 1)
    assert parse_since(None) is None


def test_a_day_that_is_not_a_date_names_the_option():
    with pytest.raises(UsageError, match=r"^--until must be a date YYYY-MM-DD, got '1 Nov'$"):
        parse_since("1 Nov", "--until")


def test_a_moment_is_an_aware_datetime_naive_meaning_utc():
    assert parse_since("2026-11-01", moment=True) == datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert parse_since("2026-11-01T10:30:00+02:00", moment=True) == datetime(
        2026, 11, 1, 10, 30, tzinfo=timezone(timedelta(hours=2)))
    assert parse_since(date(2026, 11, 1), moment=True) == datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert parse_since(datetime(2026, 11, 1, 5), moment=True) == datetime(
        2026, 11, 1, 5, tzinfo=timezone.utc)
    assert parse_since("", moment=True) is None


def test_a_moment_that_is_not_a_date_says_how_to_write_one():
    with pytest.raises(UsageError) as caught:
        parse_since("yesterday", moment=True)
    assert (caught.value.message, caught.value.hint) == (
        "cannot read the date 'yesterday'", "write YYYY-MM-DD (or an ISO 8601 time)")


def test_a_span_that_ends_before_it_starts_is_refused():
    assert day_span("2026-11-01", None) == (date(2026, 11, 1), None)
    with pytest.raises(UsageError, match=r"^--since 2026-11-02 is after --until 2026-11-01$"):
        day_span("2026-11-02", "2026-11-01")


def test_report_tools_reads_its_dates_with_the_same_reader(tmp_path):
    lake = Lake(tmp_path / "lake")
    result = CliRunner().invoke(cli, ["--lake", str(lake.root), "report", "tools", "--since",
                                      "1 Nov"], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.output == "Error: --since must be a date YYYY-MM-DD, got '1 Nov'\n"


def test_the_machines_zone_is_tz_when_it_names_a_zone(monkeypatch):
    from pipeline.stages.usage import resolve_timezone

    monkeypatch.setenv("TZ", ":Asia/Kathmandu")
    assert resolve_timezone() == "Asia/Kathmandu"


def test_without_tz_the_machines_zone_is_the_one_localtime_links_to(monkeypatch):
    from pipeline.stages.usage import resolve_timezone

    link = Path("/etc/localtime")
    if not link.is_symlink():
        pytest.skip("/etc/localtime is not a link on this machine")
    target = os.path.realpath(link)
    expected = next((os.path.relpath(target, root) for root in ("/usr/share/zoneinfo",
                                                                  "/usr/lib/zoneinfo")
                     if target.startswith(root + "/")), None)
    if expected is None:
        pytest.skip("/etc/localtime links outside the zoneinfo folders")
    from pipeline.stages.usage import UTC_NAMES

    expected = "UTC" if expected in UTC_NAMES else expected   # Etc/UTC is named UTC
    monkeypatch.delenv("TZ", raising=False)
    assert resolve_timezone() == expected
    monkeypatch.setenv("TZ", "Not/AZone")   # not a zone: the system's configuration decides
    assert resolve_timezone() == expected


def test_every_name_of_utc_is_utc_so_that_switching_names_changes_no_setting(tmp_path, monkeypatch):
    # a machine's default is often Etc/UTC: `--tz UTC` there re-summarised every session
    from pipeline.core.lake import Lake
    from pipeline.stages.nightly import run_nightly
    from pipeline.stages.usage import resolve_timezone
    from tests.helpers.lake import copy_real

    assert {resolve_timezone(n) for n in ("UTC", "Etc/UTC", "Zulu", "Etc/Universal", "UCT")} == {"UTC"}
    monkeypatch.setenv("TZ", "Etc/UTC")
    assert resolve_timezone() == "UTC"
    assert resolve_timezone("Europe/London") == "Europe/London"    # not UTC in summer
    archive = copy_real(tmp_path, "claude_code/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl")
    lake = Lake(tmp_path / "lake")
    assert run_nightly([archive], lake=lake, tz="Etc/UTC", workers=1).exit_code == 0
    again = run_nightly([archive], lake=lake, tz="UTC", workers=1)
    assert again.warnings == [] and again.touched_sessions == 0


def test_conflicting_or_missing_configurations_mean_utc(monkeypatch):
    import tzlocal
    from zoneinfo import ZoneInfoNotFoundError

    from pipeline.stages.usage import resolve_timezone

    def conflicting():
        raise ZoneInfoNotFoundError("Multiple conflicting time zone configurations found")

    monkeypatch.delenv("TZ", raising=False)
    monkeypatch.setattr(tzlocal, "get_localzone_name", conflicting)
    assert resolve_timezone() == "UTC"
    monkeypatch.setattr(tzlocal, "get_localzone_name", lambda: None)
    assert resolve_timezone() == "UTC"
    monkeypatch.setattr(tzlocal, "get_localzone_name", lambda: "Not/AZone")
    assert resolve_timezone() == "UTC"
