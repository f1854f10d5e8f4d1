"""``ctxlake report ...``: the estimator, tools, usage (daily, weekly, monthly, session,
blocks) and HTML reports."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from pipeline.cli.main import LakeContext, cli, config_option, pass_lake, render
from pipeline.core.dates import WEEKDAYS


@cli.group()
def report() -> None:
    """Reports over the lake (each takes --json).

    \b
    Example:
      ctxlake report daily --since 2026-11-01 --json
    """


def _pct(summary) -> str:
    if summary.median_pct is None:
        return "-"
    return f"{summary.median_pct:.1f} / {summary.p90_pct:.1f}"


def _print_estimator(result, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(result.to_dict()))
        return
    columns = ["model", "direction", "basis", "calls", "scored", "sessions", "heuristic % med/p90",
               "calibrated % med/p90", "target", "transcript share %", "evaluation"]
    rows = []
    notes: dict[str, int] = {}  # each distinct evaluation text once, below the table
    for row in result.models:
        gap = row.gap_pct
        target = "-" if gap is None else (f"met ({-gap:.1f} under)" if gap <= 0 else f"missed by {gap:.1f}")
        share = row.transcript_share_pct
        note = notes.setdefault(row.evaluation, len(notes) + 1)
        rows.append((row.model, row.direction, row.basis, row.n_calls, row.n_scored,
                     row.n_sessions, _pct(row.heuristic), _pct(row.calibrated), target,
                     "-" if share is None else f"{share:.0f}", f"({note})"))
    out = render.console()
    out.print(render.table(columns, rows, title=f"token estimator vs recorded usage "
                                                f"(target: calibrated median <= {result.target_pct:g}%)"))
    for text, note in notes.items():
        out.print(f"({note}) {text}", markup=False, highlight=False)
    out.print(f"method: {result.method}", markup=False, highlight=False)


@report.command("estimator")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_lake
def report_estimator(obj: LakeContext, as_json: bool) -> None:
    """Error of the token heuristic and of its calibration against recorded usage, per model.

    Median and p90 absolute % error per model over the API calls with recorded usage,
    evaluated leave-one-session-out, and how far the calibrated median is from the 5% target.

    \b
    Example:
      ctxlake report estimator
      ctxlake report estimator --json
    """
    from pipeline.stages.calibrate import estimator_report

    _print_estimator(estimator_report(obj.lake), as_json)


def _print_tool_usage(result, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(result.to_dict()))
        return
    from pipeline.reports.report_tools import USAGE_FIELDS as fields

    out = render.console()
    span = f"{result.since or 'start'} .. {result.until or 'now'}"
    out.print(render.table(["tool_family", *fields, "share"],
                           [(r["tool_family"], *[r[f] for f in fields], f"{r['share']:.1%}")
                            for r in result.by_family], title=f"tools by family ({span})"))
    out.print(render.table(["tool_family", "tool_name", *fields, "share"],
                           [(r["tool_family"], r["tool_name"], *[r[f] for f in fields],
                             f"{r['share']:.1%}") for r in result.by_tool], title="tools"))
    out.print(render.table(["day", "project", "tool_family", "tool_name", *fields],
                           [(r["day"], r["project"], r["tool_family"], r["tool_name"],
                             *[r[f] for f in fields]) for r in result.daily],
                           title="per day and project"))


@report.command("tools")
@click.option("--since", default=None, help="First day (UTC, inclusive), YYYY-MM-DD.")
@click.option("--until", default=None, help="Last day (UTC, inclusive), YYYY-MM-DD.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_lake
def report_tools(obj: LakeContext, since, until, as_json: bool) -> None:
    """Which tools eat the context: tokens by tool and tool family, per day and project.

    Calls, results, estimated tokens of inputs and results, result bytes and errors, from
    the tool_links view.

    \b
    Example:
      ctxlake report tools
      ctxlake report tools --since 2026-11-01 --until 2026-11-30 --json
    """
    from pipeline.reports.report_tools import tool_usage

    result = tool_usage(obj.lake, since=since, until=until)
    _print_tool_usage(result, as_json)


def _usage_options(command, *, breakdown: bool = True):
    options = [
        click.option("--since", default=None, help="First local day, YYYY-MM-DD (inclusive)."),
        click.option("--until", default=None, help="Last local day, YYYY-MM-DD (inclusive)."),
        click.option("--tz", default=None, help="Time zone of the days (IANA name; default: this machine's)."),
        click.option("--project", default=None, help="Only sessions whose project path contains this text."),
    ]
    if breakdown:
        options.append(click.option(
            "--breakdown", type=click.Choice(["model", "agent", "project", "format"]),
            is_flag=False, flag_value="model", default=None,
            help="Rows per model (the default of a bare --breakdown), agent (main thread vs "
                 "each sub-agent type), project or format within each period."))
    options += [
        click.option("--order", type=click.Choice(["asc", "desc"]), default="asc", show_default=True,
                     help="Oldest first (asc) or newest first (desc)."),
        click.option("--limit", type=click.IntRange(min=1), default=None,
                     help="Show only the first N rows of that order (the total covers them)."),
        click.option("--compact", is_flag=True,
                     help="The narrow layout (fits 80 columns; automatic when the wide one does not fit the terminal)."),
        config_option("Config file with [prices]"),
        click.option("--json", "as_json", is_flag=True, help="Print the report as JSON."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _price_config(config_path: Path | None):
    """The config file (its prices, its time zone), loading the config module only when there
    is a file."""
    from pipeline.core.locations import default_config_path

    if config_path is None and default_config_path() is None:
        return None
    from pipeline.core.config import load_config
    return load_config(config_path)


def _usage_layout(requested_compact: bool, build, *, text_columns: int = 2):
    """(console, table): the wide table when it fits the terminal (or output is not a
    terminal), else the compact one; ``--compact`` forces it. ``build(compact)`` returns the
    (columns, rows) of a layout."""
    out = render.console()
    if not requested_compact:
        table = render.usage_table(*build(False), text_columns=text_columns)
        needed = out.measure(table, options=out.options.update(max_width=10_000)).maximum
        if not sys.stdout.isatty() or needed <= out.width:
            return out, table
    return out, render.usage_table(*build(True), compact=True, text_columns=text_columns)


def _usage_footer(out, result) -> None:
    if result.totals.unpriced_models:
        out.print("UNPRICED: no price for " + ", ".join(result.totals.unpriced_models)
                  + " (their tokens are counted, their cost is not)", markup=False)
    if getattr(result, "rows_omitted", 0):
        out.print(f"{result.rows_omitted} more rows not shown (--limit)")
    out.print(f"prices: {result.price_source}; time zone {result.tz}", markup=False)


def _run_usage_report(obj: LakeContext, period: str, *, since, until, tz, project, breakdown,
                      order, limit, compact, config_path, as_json, start_of_week="monday") -> None:
    from pipeline.stages.usage import table_rows, usage_report

    config = _price_config(config_path)
    result = usage_report(obj.root, period=period,
                          tz=tz or (config.time_zone if config is not None else None),
                          since=since, until=until,
                          project=project, breakdown=breakdown, order=order, limit=limit,
                          config=config, start_of_week=start_of_week)
    if as_json:
        click.echo(render.to_json(result.to_dict()))
        return
    out, table = _usage_layout(compact, lambda narrow: table_rows(result, compact=narrow))
    out.print(table)
    flagged = [row.period for row in result.rows if row.figures.cost_mismatch]
    if flagged:
        out.print("!: the recorded cost differs from the computed cost by more than 5% ("
                  + render.first_few([p or "(no date)" for p in flagged]) + ")", markup=False)
    _usage_footer(out, result)


@report.command("daily")
@_usage_options
@pass_lake
def report_daily(obj: LakeContext, **options) -> None:
    """Tokens (input, output, cache write, cache read) and cost per day.

    \b
    Example:
      ctxlake report daily --since 2025-12-01 --tz Europe/Paris --breakdown
      ctxlake report daily --breakdown agent --order desc --limit 7
    """
    _run_usage_report(obj, "day", **options)


@report.command("weekly")
@_usage_options
@click.option("--start-of-week", type=click.Choice(WEEKDAYS), default="monday", show_default=True,
              help="The first day of a week (ccusage's weekly starts on sunday by default).")
@pass_lake
def report_weekly(obj: LakeContext, **options) -> None:
    """Tokens and cost per week (Monday first unless --start-of-week says otherwise; a week is
    named by its first day).

    \b
    Example:
      ctxlake report weekly --breakdown project --json
      ctxlake report weekly --start-of-week sunday   # the weeks of ccusage weekly
    """
    _run_usage_report(obj, "week", **options)


@report.command("monthly")
@_usage_options
@pass_lake
def report_monthly(obj: LakeContext, **options) -> None:
    """Tokens (input, output, cache write, cache read) and cost per month.

    \b
    Example:
      ctxlake report monthly --json
    """
    _run_usage_report(obj, "month", **options)


@report.command("session")
@_usage_options
@pass_lake
def report_session(obj: LakeContext, **options) -> None:
    """Tokens (input, output, cache write, cache read) and cost per session.

    \b
    Example:
      ctxlake report session --project myapp --breakdown
      ctxlake report session --order desc --limit 10 --breakdown format
    """
    _run_usage_report(obj, "session", **options)


@report.command("blocks")
@click.option("--active", "active_only", is_flag=True, help="Only the active block, with its projection.")
@functools.partial(_usage_options, breakdown=False)
@pass_lake
def report_blocks(obj: LakeContext, active_only, since, until, tz, project, order, limit, compact,
                  config_path, as_json) -> None:
    """5-hour billing windows: tokens and cost per block, the active block's burn rate and
    its projected usage at the end of the block (as ccusage shows them).

    A block starts at the hour of its first call (UTC) and lasts 5 hours; a pause of more
    than 5 hours is a gap.

    \b
    Example:
      ctxlake report blocks --order desc --limit 4
      ctxlake report blocks --active --json
    """
    from pipeline.stages.usage import block_table_rows, blocks_report

    result = blocks_report(obj.root, tz=tz, since=since, until=until, project=project,
                           active_only=active_only, order=order, limit=limit,
                           config=_price_config(config_path))
    if as_json:
        click.echo(render.to_json(result.to_dict()))
        return
    out, table = _usage_layout(compact, lambda narrow: block_table_rows(result, compact=narrow),
                               text_columns=3)
    out.print(table)
    active = result.active
    if active is None:
        out.print("no active block (no call in the last 5 hours)")
    else:
        rate, projection = active.burn_rate, active.projection
        if rate:
            cost = "-" if rate.cost_usd_per_hour is None else f"${rate.cost_usd_per_hour:,.4f}/h"
            out.print(f"burn rate: {rate.tokens_per_minute:,.0f} tokens/min, {cost}", markup=False)
        if projection:
            cost = "-" if projection.cost_usd is None else f"${projection.cost_usd:,.4f}"
            out.print(f"projected at block end: {projection.total_tokens:,} tokens, {cost} "
                      f"({projection.remaining_minutes} min left)", markup=False)
    _usage_footer(out, result)


@report.command("html")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder (default: <lake>/html).")
@click.option("--since", default=None, help="First day (UTC, inclusive), YYYY-MM-DD.")
@click.option("--until", default=None, help="Last day (UTC, inclusive), YYYY-MM-DD.")
@click.option("--project", default=None, help="Only the sessions of this project (its cwd).")
@click.option("--policy", default=None,
              help="Policy whose evictions the session pages show (default: payload_prune+microcompact).")
@click.option("--tz", default=None,
              help="Time zone of the daily-log entries shown, as given to `summarize` "
                   "(default: the machine's zone).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@pass_lake
def report_html(obj: LakeContext, out_dir, since, until, project, policy, tz, as_json) -> None:
    """A static HTML report (overview, sessions, transcripts, policies) to open in a browser.

    Self-contained pages: they open from file:// with no network. Only files whose bytes
    change are rewritten.

    \b
    Example:
      ctxlake report html
      ctxlake report html --out /tmp/report --since 2026-11-01 --project /srv/app
      xdg-open data/lake/html/index.html
    """
    from pipeline.reports.html import render_html

    summary = render_html(obj.lake, out_dir, since=since, until=until, project=project,
                          policy=policy, tz=tz)
    if as_json:
        click.echo(render.to_json(summary.to_dict()))
        return
    click.echo(f"report: {Path(summary.out) / 'index.html'} ({summary.sessions:,} sessions; "
               f"{summary.pages_written:,} pages written, {summary.pages_unchanged:,} unchanged, "
               f"{summary.pages_removed:,} removed) in {summary.seconds:.2f}s")
