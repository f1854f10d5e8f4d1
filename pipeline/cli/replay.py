"""``ctxlake replay``: sessions replayed under several policies, compared side by side."""

from __future__ import annotations

import math
from pathlib import Path

import click

from pipeline.cli.main import SESSION, LakeContext, cli, config_option, pass_lake, render


def _print_replay(result, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(result.to_dict()))
        return
    from pipeline.reports.replay_report import CLI_KEYS, comparison_table

    headers, rows = comparison_table(result.summary, keys=CLI_KEYS, short=True)
    out = render.console()
    ttl = "no expiry" if result.cache_ttl_minutes is None else f"TTL {result.cache_ttl_minutes:g} min"
    prices = f"priced as {result.price_model}" if result.price_model else "recorded models' prices"
    out.print(render.table(headers, rows,
                           title=f"{result.sessions} sessions replayed (cache {ttl}, {prices}; "
                                 f"replay {result.replay_id})"))
    if result.sessions_ignored:
        out.print(f"{result.sessions_ignored} sessions skipped by ignore_patterns")
    for warning in result.warnings:
        out.print(f"warning: {warning}", markup=False, highlight=False)
    if result.report:
        out.print(f"report: {result.report.report}")
        if result.report.charts_skipped:
            out.print(f"charts skipped: {result.report.charts_skipped}", markup=False)
    out.print(f"rows: ctxlake sql \"SELECT * FROM policy_eval WHERE replay_id = '{result.replay_id}'\" "
              "(replay_turns alike; each policy and settings keep their latest replay)",
              markup=False, highlight=False)


@cli.command("replay")
@click.option("--policy", "policies", multiple=True,
              help="Policy, NAME(key=value,...) or chain A+B (repeatable); none is always added.")
@click.option("--sweep", "sweeps", multiple=True,
              help="A sweep (list of policies) from the config's [sweeps] table (repeatable).")
@click.option("--session", "session_id", type=SESSION, default=None,
              help="Only this session (id or unique prefix).")
@click.option("--since", default=None, help="Only sessions started on/after this date (YYYY-MM-DD).")
@config_option("Policy config")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Write report.md and PNG charts into this folder.")
@click.option("--chart-session", type=SESSION, default=None,
              help="Session of the per-turn chart, id or unique prefix (default: the longest one "
                   "with evictions).")
@click.option("--price-as", "price_model", default=None,
              help="Price every call as this model (e.g. qwen/qwen3-coder) instead of the recorded one.")
@click.option("--cache-ttl", "cache_ttl", default="5", show_default=True,
              help="Prompt-cache lifetime in minutes between turns, or 'off' (never expires).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes (default: up to 2).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@pass_lake
def replay_command(obj: LakeContext, policies, sweeps, session_id, since, config_path,
                   report_dir, chart_session, price_model, cache_ttl, workers, as_json) -> None:
    """Replay sessions under several policies and compare them side by side.

    Every session is walked turn by turn (API call by API call) under `none` and each policy:
    context tokens, peak, cost with prompt caching, evictions, at-risk evictions (a proxy for
    regret) and protected violations. Writes the policy_eval and replay_turns tables.

    \b
    Example:
      ctxlake replay --policy microcompact --policy context_editing --report out/replay
      ctxlake replay --policy 'observation_masking(window=5)' --policy 'observation_masking(window=10)'
      ctxlake replay --sweep masking --price-as qwen/qwen3-coder --json
    """
    from pipeline.core.config import load_config
    from pipeline.stages.replay import replay

    if not policies and not sweeps:
        raise click.UsageError("give at least one --policy or --sweep")
    if cache_ttl.strip().lower() in ("off", "none"):
        ttl = None
    else:
        try:
            ttl = float(cache_ttl)
        except ValueError:
            raise click.BadParameter("minutes (e.g. 5 or 60) or 'off'",
                                     param_hint="--cache-ttl") from None
        if not 0 <= ttl < math.inf:     # nan fails both sides
            raise click.BadParameter("a number of minutes >= 0 (not inf or nan), or 'off'",
                                     param_hint="--cache-ttl")
    config = load_config(config_path)
    with render.step_progress("replay sessions") as progress:
        result = replay(obj.lake, policies=list(policies), sweeps=list(sweeps),
                        config=config, session_id=session_id, since=since,
                        progress=progress, workers=workers,
                        cache_ttl_minutes=ttl,
                        price_model=price_model or config.price_as, report_dir=report_dir,
                        chart_session=chart_session)
    if not (obj.quiet and not as_json):
        _print_replay(result, as_json)
