"""The nightly job and what it leaves: ``run``, ``demo`` (a demo archive, then ``run``),
``status``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline.cli.main import LakeContext, cli, config_option, pass_lake, render


# -- the nightly job (pipeline/stages/nightly.py) -----------------------------------------------
def _print_nightly(summary, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(summary.to_dict()))
        return
    out = render.console()
    ing = summary.ingest
    out.print(f"[bold]ingest[/]    {ing.files} files ({ing.files_new} new, {ing.files_appended} "
              f"appended, {ing.files_reingested} re-read, {ing.files_unchanged} unchanged, "
              f"{len(ing.removed)} removed); "
              f"lines {ing.lines:,} = records {ing.records:,} + quarantined "
              f"{ing.quarantined:,} + held back {ing.held_back:,}")
    for problem in [p for p in ing.problems if p.severity == "error"][:10]:
        out.print(f"  [yellow]warning[/]: {problem.where}: {problem.reason}")
    for folder in ing.own_folders:
        out.print(f"  skipped: {folder}")
    if ing.unrecognized:
        out.print(f"  {len(ing.unrecognized)} files not recognised as a transcript (skipped; "
                  "force a reader with ctxlake ingest --format): "
                  + render.first_few(ing.unrecognized))
    for warning in ing.warnings:
        out.print(f"  [yellow]warning[/]: {warning}", highlight=False)
    if ing.compaction_note():
        out.print(f"  {ing.compaction_note()}")
    out.print(render.table(["stage", "done", "up to date", "failed", "removed", "seconds", "status"],
                           [(s.stage, s.done, s.skipped, s.failed, s.removed, f"{s.seconds:.2f}",
                             s.status) for s in summary.stages]))
    for plan in summary.plans:
        out.print(f"[bold]plan[/]      {plan.policy}: {plan.sessions:,} sessions "
                  f"({plan.sessions_ignored} ignored), {plan.evictions:,} evictions, "
                  f"{plan.tokens_saved:,} tokens saved, {plan.preserved:,} preserved")
    for policy, applied in summary.applied.items():
        out.print(f"[bold]apply[/]     {policy}: {applied.files_written:,} files written, "
                  f"{applied.bytes_before:,} -> {applied.bytes_after:,} bytes, "
                  f"{len(applied.problems)} problems")
        for problem in applied.problems[:10]:
            out.print(f"  [yellow]problem[/]: {problem.path}: {problem.error}")
    summ = summary.summaries
    if summ:
        out.print(f"[bold]summarize[/] {summ.days_written} daily logs written, "
                  f"{summ.recovery_written} recovery documents, "
                  f"{summ.sessions_ignored} sessions ignored")
    html = summary.html
    if html:
        out.print(f"[bold]html[/]      {html.sessions_rendered} session pages rendered, "
                  f"{html.pages_written} pages written: {html.out}/index.html")
    for warning in summary.warnings:
        out.print(f"[yellow]warning[/]: {warning}")
    if summary.interrupted_runs:
        out.print(f"finished what {len(summary.interrupted_runs)} interrupted run(s) left undone: "
                  + ", ".join(summary.interrupted_runs))
    out.print(f"{summary.status} in {summary.seconds:.1f}s ({summary.touched_sessions} sessions "
              f"touched), run {summary.run_id}")
    lake = Path(summary.lake)
    out.print(f"lake:      {summary.lake}\nlogs:      {lake / 'summaries' / 'sessions'}\n"
              f"recovery:  {lake / 'summaries' / 'recovery'}\npruned:    {summary.out_dir}")


@cli.command("run")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--policy", "policies", multiple=True,
              help="Policy (or chain) to plan and apply (repeatable; default payload_prune+microcompact).")
@config_option()
@click.option("--tz", default=None, help="Time zone of the daily logs (default: this machine's).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where pruned transcripts go (default: <lake>/out).")
@click.option("--strict", is_flag=True, help="Exit 1 when any line was quarantined, or a file "
                                             "named as PATH is not a transcript.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@pass_lake
def run_command(obj: LakeContext, paths, policies, config_path, tz, out_dir, strict, as_json) -> None:
    """The nightly job: ingest, correlate, calibrate, plan, apply, summarize (incremental).

    With no PATH, reads whichever standard folders exist: $CLAUDE_CONFIG_DIR (a
    comma-separated list) or ~/.config/claude/projects and ~/.claude/projects,
    $CODEX_HOME/sessions or ~/.codex/sessions, and ~/.gemini/tmp. One run at a time per lake.

    \b
    Example:
      ctxlake run ~/.claude/projects ~/.codex/sessions
      ctxlake --lake /srv/lake run /archive --policy payload_prune+microcompact --json
    """
    from pipeline.stages.nightly import run_nightly

    config = obj.config(config_path)
    with render.stage_progress() as stage:
        summary = run_nightly(list(paths) or config.archive_paths(), lake=obj.lake,
                              config_path=config_path,
                              policies=tuple(policies) or config.default_policies or None,
                              tz=tz or config.time_zone, out=out_dir, progress=stage)
    if not (obj.quiet and not as_json):
        _print_nightly(summary, as_json)
    if summary.exit_code or (strict and (summary.ingest.quarantined_errors
                                         or summary.ingest.unrecognized_named)):
        sys.exit(1)


def _print_demo(archive, result, lake, as_json: bool) -> None:
    """The archive written, then the nightly run's summary (``result`` is None with --no-run)."""
    if as_json:
        click.echo(render.to_json({"archive": archive.to_dict(),
                                   "run": result.to_dict() if result is not None else None}))
        return
    out = render.console()
    out.print(f"demo archive: {archive.out} ({archive.size_bytes:,} bytes, {archive.files:,} files, "
              f"{archive.sessions:,} sessions + {archive.subagent_sessions:,} sub-agent sessions, "
              f"seed {archive.seed})")
    out.print("formats: " + ", ".join(f"{name} {stats.files}" for name, stats
                                      in sorted(archive.formats.items())))
    if result is None:
        out.print(f"not run (--no-run): ctxlake run {archive.out}")
        return
    out.print(f"held back on purpose (a session still being written): "
              f"{', '.join(archive.held_back_files) or 'none'}")
    _print_nightly(result, False)
    out.print("next: ctxlake sessions | ctxlake report daily | ctxlake report tools | "
              "ctxlake replay --policy microcompact --policy payload_prune --report out/replay")


@cli.command("demo")
@click.option("--size", default="200MB", show_default=True,
              help="Archive size target: 500KB, 20MB, 1GB (decimal) or 64MiB (binary).")
@click.option("--seed", type=int, default=1, show_default=True,
              help="Random seed: the same seed and size give byte-identical files.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("data/demo-archive"), show_default=True,
              help="Archive folder (a previous demo archive there is replaced).")
@click.option("--no-run", is_flag=True, help="Only write the archive.")
@click.option("--json", "as_json", is_flag=True, help="Print the archive and run summary as JSON.")
@pass_lake
def demo_command(obj: LakeContext, size: str, seed: int, out_dir: Path, no_run: bool,
                 as_json: bool) -> None:
    """Write a realistic, deterministic demo archive in every format, then run the nightly job.

    The archive mimics ~/.claude/projects, ~/.gemini/tmp and ~/.codex/sessions plus OpenAI /
    Anthropic message logs and SWE-agent trajectories: long sessions, sub-agents, CJK and emoji,
    payloads up to several MB, memory-file reads, idle gaps, tool errors, several models (one
    deliberately unpriced). One transcript ends mid-line on purpose (a session still being
    written): its last line is held back, never quarantined.

    \b
    Example:
      ctxlake demo --size 20MB
      ctxlake --lake /tmp/lake demo --size 1GB --seed 7 --out /tmp/archive
      ctxlake demo --no-run --out /tmp/archive
    """
    from pipeline.demo.archive import parse_size, write_demo_archive

    with render.byte_progress("demo archive") as progress:
        archive = write_demo_archive(out_dir, size_bytes=parse_size(size), seed=seed,
                                     progress=progress)
    result = None
    if not no_run:
        from pipeline.stages.nightly import run_nightly

        with render.stage_progress() as stage:
            result = run_nightly([out_dir], lake=obj.lake, progress=stage)
    if not (obj.quiet and not as_json):
        _print_demo(archive, result, obj.lake, as_json)


@cli.command("status")
@config_option()
@click.option("--policy", "policies", multiple=True,
              help="Nightly policies to report pending work for (default payload_prune+microcompact).")
@click.option("--tz", default=None, help="Time zone the next run would use (default: this machine's).")
@click.option("--runs", "n_runs", default=5, show_default=True, help="How many recent runs to list.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@pass_lake
def status_command(obj: LakeContext, config_path, policies, tz, n_runs, as_json) -> None:
    """Where the lake is, its size, the last runs, what each stage owes, and any table part
    gone from the lake (its rows missing until the next run).

    \b
    Example:
      ctxlake status
      ctxlake --lake /srv/lake status --json
      ctxlake --lake s3://team-bucket/agents status   # the URL, and the mirror folder
    """
    from pipeline.reports.status import lake_status

    config = obj.config(config_path)
    lake = obj.lake              # resolved first: an object-store lake's mirror is pulled here
    status = lake_status(lake, config_path=config_path,
                         policies=tuple(policies) or config.default_policies or None,
                         tz=tz or config.time_zone, runs=n_runs, remote=obj.remote)
    if as_json:
        click.echo(render.to_json(status.to_dict()))
        return
    out = render.console()
    out.print(f"lake:     {status.lake} ({render.human_bytes(status.size_bytes)}, "
              f"{status.files:,} files, {status.sessions:,} sessions)")
    if status.mirror is not None:
        out.print(f"mirror:   {status.mirror}", markup=False, highlight=False)
    out.print(f"config:   {config.where() or '(none: built-in defaults)'}", markup=False,
              highlight=False)
    out.print(f"settings: time zone {status.settings.time_zone}, policies "
              f"{', '.join(status.settings.policies)}")
    changed = status.settings_changed()
    if changed is not None:
        out.print("          [yellow]differs from the last run[/]: "
                  + ", ".join(f"{k} {before!r}" for k, before in changed.items()))
    parts = status.table_parts
    out.print(f"parts:    {parts['files']:,} table part files, {parts['small_sets']} small part sets "
              f"(a run merges them past {parts['merged_past']})")
    if status.lost_parts:
        out.print(f"[yellow]missing[/]:  {len(status.lost_parts)} table part(s) deleted from tables/ "
                  f"({render.first_few(status.lost_parts, 3)}): "
                  "their rows are not in the tables until the next `ctxlake run` reads their files again")
    out.print(render.table(["run", "command", "status", "started", "seconds", "done", "failed"],
                           [(r.run_id, r.command, r.status, r.started_at, r.seconds,
                             r.sessions_done, r.sessions_failed) for r in status.runs],
                           title="last runs"))
    out.print(render.table(["transcripts", "path", "found", "from"],
                           [(loc.kind, loc.path, "yes" if loc.found else "no", loc.origin)
                            for loc in status.locations], title="where a run without PATH reads"))
    out.print(render.table(["stage", "owed", "removed", "all (settings changed)"],
                           [(name, p.todo, p.removed, "yes" if p.full else "")
                            for name, p in status.pending.items()], title="pending"))
