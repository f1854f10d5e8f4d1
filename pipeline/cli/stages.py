"""The stage commands, one stage at a time: ``ingest``, ``correlate``, ``plan``, ``suggest``,
``apply``, ``restore``, ``verify``, ``summarize`` (the nightly ``run`` chains them)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline.cli.main import SESSION, LakeContext, cli, config_option, pass_lake, render


def _print_ingest(summary, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(summary.to_dict()))
        return
    out = render.console()
    out.print(f"ingested {summary.files} files ({summary.files_new} new, "
              f"{summary.files_appended} appended, {summary.files_reingested} re-read, "
              f"{summary.files_unchanged} unchanged) in {summary.seconds:.2f}s")
    out.print(f"lines {summary.lines:,} = records {summary.records:,} + quarantined "
              f"{summary.quarantined:,} + held back {summary.held_back:,}")
    if summary.files_unrecognized:
        out.print(f"{summary.files_unrecognized} files not recognised as a transcript (skipped; "
                  "force a reader with --format): " + render.first_few(summary.unrecognized))
    for warning in summary.warnings:
        out.print(f"[yellow]warning[/]: {warning}", highlight=False)
    if summary.compaction_note():
        out.print(summary.compaction_note())
    shown = [p for p in summary.problems if p.severity == "error"]
    for problem in shown[:20]:
        out.print(f"[yellow]warning[/]: {problem.where}: {problem.reason}")
    if len(shown) > 20:
        out.print(f"... and {len(shown) - 20} more: ctxlake sql \"SELECT * FROM quarantine\"")
    for folder in summary.own_folders:
        out.print(f"skipped: {folder}")
    out.print(f"lake: {summary.lake}")


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--format", "fmt", default=None, help="Force a format instead of auto-detection.")
@click.option("--strict", is_flag=True, help="Exit 1 when any line was quarantined, or a file "
                                             "named as PATH is not a transcript.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes (default: all cores).")
@click.option("--max-line-bytes", type=int, default=None, help="Quarantine longer lines (default 64 MiB).")
@click.option("--quiet-minutes", type=float, default=None,
              help="A file untouched this long is settled: its complete last line is read even "
                   "without a newline (default 60; negative: always hold it back).")
@pass_lake
def ingest(obj: LakeContext, paths, fmt, strict, as_json, workers, max_line_bytes,
           quiet_minutes) -> None:
    """Ingest transcript files or folders into the lake (incremental).

    With no PATH, reads whichever standard folders exist: $CLAUDE_CONFIG_DIR (a
    comma-separated list) or ~/.config/claude/projects and ~/.claude/projects,
    $CODEX_HOME/sessions or ~/.codex/sessions, and ~/.gemini/tmp. A last line without a
    newline is held back for the next run, unless the file has not been modified for
    --quiet-minutes and that line is complete JSON.

    \b
    Example:
      ctxlake ingest ~/.claude/projects --json
    """
    from pipeline.stages.ingest import DEFAULT_MAX_LINE_BYTES, DEFAULT_QUIET_MINUTES, ingest as run_ingest

    paths = list(paths) or obj.config().archive_paths()
    with render.byte_progress("ingest") as progress:
        summary = run_ingest(paths, lake=obj.lake, format=fmt, workers=workers,
                             max_line_bytes=max_line_bytes or DEFAULT_MAX_LINE_BYTES,
                             quiet_minutes=DEFAULT_QUIET_MINUTES if quiet_minutes is None
                             else quiet_minutes, progress=progress)
    if not (obj.quiet and not as_json):
        _print_ingest(summary, as_json)
    if strict and (summary.quarantined_errors or summary.unrecognized_named):
        sys.exit(1)


@cli.command("correlate")
@config_option("Config file with extra [memory] roots",
               "$CTXLAKE_CONFIG or ./ctxlake.toml when present")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@pass_lake
def correlate_command(obj: LakeContext, config_path: Path | None, as_json: bool) -> None:
    """Compute request-side paths and memory classes of every tool call (tool_links view).

    Writes the derived table tool_paths; the nightly job runs this after every ingest.

    \b
    Example:
      ctxlake correlate
      ctxlake sql "SELECT status, count(*) FROM tool_links GROUP BY ALL"
    """
    from pipeline.core.config import load_config
    from pipeline.stages.correlate import correlate

    summary = correlate(obj.lake, roots=load_config(config_path).memory_roots())
    if obj.quiet and not as_json:
        return
    if as_json:
        click.echo(render.to_json(summary.to_dict()))
        return
    out = render.console()
    out.print(f"correlated {summary.calls:,} tool calls ({summary.calls_with_paths:,} name "
              f"{summary.paths:,} paths) in {summary.seconds:.2f}s")
    out.print("links: " + ", ".join(f"{k} {v:,}" for k, v in summary.statuses.items())
              + f"; protected memory reads {summary.protected:,}")
    out.print("paths: " + ", ".join(f"{k} {v:,}" for k, v in summary.by_class.items()))


def _print_plan(summaries, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json([s.to_dict() for s in summaries]))
        return
    columns = ["policy", "sessions", "ignored", "plans", "evictions", "cleared", "pruned",
               "inputs cleared", "tokens saved", "bytes saved", "preserved"]
    rows = [(s.policy, s.sessions, s.sessions_ignored, s.plans, s.evictions, s.cleared, s.pruned,
             s.inputs_cleared, s.tokens_saved, s.bytes_saved, s.preserved) for s in summaries]
    out = render.console()
    out.print(render.table(columns, rows))
    for s in summaries:
        if s.suggestions:
            out.print(f"{s.policy}: {s.suggestions} suggestion points (ctxlake suggest SESSION)")
    out.print("rows: ctxlake sql \"SELECT * FROM plans\" / \"SELECT * FROM evictions\"")


@cli.command("plan")
@click.option("--policy", "policies", multiple=True, required=True,
              help="Policy, NAME(key=value,...) or chain A+B (repeatable).")
@click.option("--session", "session_id", type=SESSION, default=None,
              help="Only this session (id or unique prefix).")
@click.option("--since", default=None, help="Only sessions started on/after this date (YYYY-MM-DD).")
@config_option("Policy config")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes (default: up to 2).")
@click.option("--json", "as_json", is_flag=True, help="Print the per-policy summaries as JSON.")
@pass_lake
def plan_command(obj: LakeContext, policies, session_id, since, config_path, workers,
                 as_json) -> None:
    """Plan compaction: which tool results to clear or prune, when and why.

    Writes the plans and evictions tables (one file per policy) and prints, per policy, the
    sessions planned and ignored, evictions, tokens saved and preserved memory reads.

    \b
    Example:
      ctxlake plan --policy microcompact --policy payload_prune+microcompact
      ctxlake plan --policy 'observation_masking(window=5)' --since 2026-01-01 --json
    """
    from pipeline.core.config import load_config
    from pipeline.stages.plan import plan_many

    config = load_config(config_path)
    with render.step_progress("plan sessions") as progress:
        summaries = plan_many(obj.lake, policies=list(policies), config=config,
                              session_id=session_id, since=since, progress=progress,
                              workers=workers)
    if not (obj.quiet and not as_json):
        _print_plan(summaries, as_json)


@cli.command("suggest")
@click.argument("session", type=SESSION)
@click.option("--minimal", is_flag=True, help="One line per point: [Compact? 72/50 calls | ...].")
@click.option("--policy", default="strategic", show_default=True,
              help="A strategic policy (e.g. 'strategic(scenario=\"docs\")').")
@config_option("Policy config")
@click.option("--json", "as_json", is_flag=True, help="Print points and suppressed points as JSON.")
@pass_lake
def suggest_command(obj: LakeContext, session: str, minimal: bool, policy: str, config_path,
                    as_json: bool) -> None:
    """Strategic compaction points of a session, with why now (and why not elsewhere).

    \b
    Example:
      ctxlake suggest 7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9
      ctxlake suggest 7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9 --minimal
    """
    from pipeline.core.config import load_config
    from pipeline.stages.plan import suggest

    result = suggest(obj.lake, session, minimal=minimal, config=load_config(config_path),
                     policy=policy)
    if as_json:
        click.echo(render.to_json(result.to_dict()))
        return
    if result.ignored_by:
        click.echo(f"(session matches ignore pattern {result.ignored_by!r}: planning skips it)")
    if result.points:
        click.echo(result.render())
    else:
        click.echo(f"no suggestion points in {session}")
    for point in result.suppressed:
        click.echo(f"suppressed at turn {point['turn']} ({point['boundary']}, "
                   f"{point['weighted_calls']:g}/{point['threshold']:g} calls): "
                   + "; ".join(point["suppressed_by"]))


def _print_apply(summary, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(summary.to_dict()))
        return
    out = render.console()
    out.print(f"policy {summary.policy}: {summary.files} files -> {summary.out} "
              f"({summary.files_pruned} pruned, {summary.files_copied} unchanged copies, "
              f"{summary.files_failed} failed; {summary.files_written} written, "
              f"{summary.files_up_to_date} already up to date) in {summary.seconds:.2f}s")
    saved = summary.bytes_before - summary.bytes_after
    share = f" ({saved / summary.bytes_before:.1%} smaller)" if summary.bytes_before else ""
    out.print(f"bytes {summary.bytes_before:,} -> {summary.bytes_after:,}{share}; "
              f"{summary.values_replaced:,} values replaced for "
              f"{summary.evictions_applied:,}/{summary.evictions:,} evictions")
    out.print(f"store: {summary.payloads_stored:,} new payloads ({summary.store_bytes_added:,} "
              f"bytes), {summary.payloads_reused:,} already there")
    for problem in summary.problems[:20]:
        where = problem.path or "(plan)"
        sessions = f" [session {', '.join(problem.sessions)}]" if problem.sessions else ""
        out.print(f"[red]error[/]: {where}{sessions}: {problem.error}")
    if len(summary.problems) > 20:
        out.print(f"... and {len(summary.problems) - 20} more (--json lists them all)")


@cli.command("apply")
@click.option("--policy", required=True, help="Policy (or chain) whose plan to apply.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Outputs folder (default: <lake>/out); files go to <out>/<policy>/.")
@click.option("--session", "session_id", type=SESSION, default=None,
              help="Only the files of this session (id or unique prefix).")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@pass_lake
def apply_command(obj: LakeContext, policy: str, out_dir: Path | None, session_id: str | None,
                  as_json: bool) -> None:
    """Write pruned transcripts for a planned policy, every removed byte stored.

    The archive is mirrored under <out>/<policy>/ in its own formats: untouched lines are
    byte copies; cleared and pruned payloads are replaced; the original bytes go to the
    payload store (<lake>/store) first. Exit 1 when a file could not be pruned (it is then
    an unpruned copy, and the error names it).

    \b
    Example:
      ctxlake plan --policy payload_prune
      ctxlake apply --policy payload_prune --out pruned/
    """
    from pipeline.stages.apply import apply_policy

    with render.byte_progress(f"apply {policy}") as progress:
        summary = apply_policy(obj.lake, policy=policy, out=out_dir, session_id=session_id,
                               progress=progress)
    if not (obj.quiet and not as_json):
        _print_apply(summary, as_json)
    if summary.problems:
        sys.exit(1)


@cli.command("restore")
@click.argument("pruned_file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the original here (default: to standard output).")
@click.option("--store", "store_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Payload store folder (default: <lake>/store).")
@pass_lake
def restore_command(obj: LakeContext, pruned_file: Path, out_file: Path | None,
                    store_dir: Path | None) -> None:
    """Rebuild the original of a pruned transcript byte-for-byte (same sha256).

    Needs only the pruned file and the payload store.

    \b
    Example:
      ctxlake restore data/lake/out/payload_prune/proj/abc.jsonl --out abc.jsonl
    """
    from pipeline.stages.restore import restore

    result = restore(pruned_file, store=store_dir or obj.lake.store_dir, out=out_file)
    if out_file is None:
        click.echo(result.data, nl=False)
    elif not obj.quiet:
        click.echo(f"restored {out_file} ({result.original_size:,} bytes, sha256 "
                   f"{result.original_sha256}, {result.edits} values put back)")


@cli.command("verify")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Outputs folder to check (default: <lake>/out).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_lake
def verify_command(obj: LakeContext, out_dir: Path | None, as_json: bool) -> None:
    """Check the payload store and every pruned output; exit 1 on any problem.

    Recomputes the sha256 of every store file, checks each output has a restore manifest
    and rebuilds to its original, and that every compaction:// locator resolves.

    \b
    Example:
      ctxlake verify --json
    """
    from pipeline.stages.restore import verify

    report = verify(obj.lake, out=out_dir)
    if obj.quiet and not as_json:
        sys.exit(1 if report.problems else 0)
    if as_json:
        click.echo(render.to_json(report.to_dict()))
    else:
        out = render.console()
        out.print(f"store {report.store}: {report.payloads:,} payloads, {report.manifests:,} "
                  f"restore manifests")
        out.print(f"outputs {report.out}: {report.outputs:,} files, "
                  f"{report.outputs_restorable:,} restore byte-exact, {report.locators:,} "
                  f"locators")
        if report.problems:
            out.print(render.table(["kind", "path", "detail"],
                                   [(p.kind, p.path, p.detail) for p in report.problems],
                                   max_width=80))
        else:
            out.print("ok: no problems")
    if report.problems:
        sys.exit(1)


# -- summaries and usage reports (pipeline/stages/summarize.py, recover.py, usage.py) ----------
def _print_summarize(summary, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(summary.to_dict()))
        return
    out = render.console()
    out.print(f"daily logs: {summary.days_written} written, {summary.days_unchanged} unchanged, "
              f"{summary.days_removed} removed ({summary.sessions_listed} sessions listed, "
              f"time zone {summary.tz})")
    out.print(f"recovery documents: {summary.recovery_written} written, "
              f"{summary.recovery_unchanged} unchanged, {summary.recovery_removed} removed")
    out.print(f"sessions ignored by ignore_patterns: {summary.sessions_ignored}; "
              f"without any timestamp (no log line): {summary.sessions_undated}")
    out.print(f"logs: {summary.log_dir}\nrecovery: {summary.recovery_dir}")


@cli.command("summarize")
@click.option("--tz", default=None, help="Time zone of the days (IANA name; default: this machine's).")
@click.option("--session", "sessions", multiple=True, type=SESSION,
              help="Only rebuild what these sessions touch (id or unique prefix; repeatable; "
                   "default: everything).")
@config_option("Config file with ignore_patterns")
@click.option("--ignore", "extra_patterns", multiple=True,
              help="An extra ignore pattern (case-insensitive regex; repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@pass_lake
def summarize_command(obj: LakeContext, tz, sessions, config_path, extra_patterns, as_json) -> None:
    """Write the daily session logs and recovery documents (idempotent).

    Logs go to <lake>/summaries/sessions/YYYY-MM-DD.md, recovery documents to
    <lake>/summaries/recovery/. Sessions matching ignore_patterns are left out and counted.
    `session_logging = false` in the config writes no daily logs.

    \b
    Example:
      ctxlake summarize --tz Europe/Paris
      ctxlake summarize --session 7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9 --json
    """
    from pipeline.core.config import load_config
    from pipeline.stages.summarize import summarize

    config = load_config(config_path)
    patterns = [*config.ignore_patterns, *extra_patterns]
    with render.step_progress("recovery documents") as progress:
        summary = summarize(obj.lake, tz=tz or config.time_zone, ignore_patterns=patterns,
                            sessions=list(sessions) or None, progress=progress,
                            session_logging=config.session_logging,
                            log_details=config.log_details)
    if not (obj.quiet and not as_json):
        _print_summarize(summary, as_json)
