"""``ctxlake report tools``: which tools eat the context, by tool and family, per day and project.

Rows come from ``sql/select_tool_usage.sql`` over ``tool_links`` (one row per session and call
id): ``calls`` counts request-side calls, ``results`` tool results, ``input_est_tokens`` the
estimate of the call inputs, ``result_est_tokens`` of the results, ``est_tokens`` their sum,
``payload_bytes`` the UTF-8 bytes of the results and ``errors`` the ids with an error result.
A row's day is the UTC date of its call (of its result for an orphan result). Totals by tool
and by family are sums of those rows, sorted by ``est_tokens`` (largest first), with
``share`` = the fraction of all tool tokens in the range.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import date
from typing import Any

from pipeline.core import sqlfiles
from pipeline.core.dates import day_span
from pipeline.core.lake import Lake

__all__ = ["ToolUsage", "tool_usage", "USAGE_FIELDS"]

USAGE_FIELDS = ("calls", "results", "input_est_tokens", "result_est_tokens", "est_tokens",
                "payload_bytes", "errors")


def _totals(rows: list[dict], keys: tuple[str, ...], grand: int) -> list[dict]:
    groups: dict[tuple, dict] = {}
    for row in rows:
        key = tuple(row[k] for k in keys)
        group = groups.setdefault(key, {**{k: row[k] for k in keys},
                                        **{f: 0 for f in USAGE_FIELDS}})
        for field in USAGE_FIELDS:
            group[field] += row[field]
    out = sorted(groups.values(), key=lambda g: (-g["est_tokens"], *[str(g[k]) for k in keys]))
    for group in out:
        group["share"] = round(group["est_tokens"] / grand, 4) if grand else 0.0
    return out


@dataclass
class ToolUsage:
    """What ``ctxlake report tools`` shows: the range, the totals, the rows by family and by
    tool (largest first, with ``share``) and the daily rows (one per day, project, family and
    tool); :meth:`to_dict` is its JSON form."""

    since: date | None
    until: date | None
    totals: dict[str, int]
    by_family: list[dict]
    by_tool: list[dict]
    daily: list[dict]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def tool_usage(lake: Lake, *, since: str | date | None = None, until: str | date | None = None,
               project: str | None = None) -> ToolUsage:
    """Tool usage between ``since`` and ``until`` (inclusive UTC dates; None: unbounded), of
    every project or of ``project`` (its cwd) only."""
    since, until = day_span(since, until)
    with lake.connect() as con:
        cur = con.execute(sqlfiles.load("select_tool_usage"), {"since": since, "until": until})
        daily = sqlfiles.fetch_dicts(cur)
    if project is not None:
        daily = [row for row in daily if row["project"] == project]
    totals = {field: sum(row[field] for row in daily) for field in USAGE_FIELDS}
    grand = totals["est_tokens"]
    return ToolUsage(since=since, until=until, totals=totals,
                     by_family=_totals(daily, ("tool_family",), grand),
                     by_tool=_totals(daily, ("tool_family", "tool_name"), grand), daily=daily)
