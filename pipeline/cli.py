"""The ``ctxlake`` command: a thin shell over the library.

Each command parses its options, calls one library function and renders the result. Library
errors (``CtxlakeError``) become ``click.ClickException`` in one place (:func:`main`).
Exit codes: 0 ok, 1 data errors reported, 2 usage error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline import render
from pipeline.errors import CtxlakeError
from pipeline.lake import Lake, default_lake


class LakeContext:
    def __init__(self, lake: Lake):
        self.lake = lake


pass_lake = click.make_pass_decorator(LakeContext)


class CtxlakeClickError(click.ClickException):
    def __init__(self, error: CtxlakeError):
        super().__init__(str(error))
        self.exit_code = error.exit_code


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--lake", "lake_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Lake directory (default: $CTXLAKE_HOME or ./data/lake).")
@click.version_option(package_name="ctxlake")
@click.pass_context
def cli(ctx: click.Context, lake_dir: Path | None) -> None:
    """ctxlake: ingest, analyse, compact and replay AI coding-agent transcripts.

    \b
    Example:
      ctxlake ingest ~/.claude/projects
      ctxlake sql "SELECT format, count(*) FROM sessions GROUP BY ALL"
    """
    ctx.obj = LakeContext(Lake(lake_dir or default_lake()))


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
        out.print(f"{summary.files_unrecognized} files not recognised as a transcript (skipped)")
    shown = [p for p in summary.problems if p["severity"] == "error"]
    for problem in shown[:20]:
        where = f"{problem['path']}:{problem['line_no']}" if problem["line_no"] else problem["path"]
        out.print(f"[yellow]warning[/]: {where}: {problem['reason']}")
    if len(shown) > 20:
        out.print(f"... and {len(shown) - 20} more: ctxlake sql \"SELECT * FROM quarantine\"")
    out.print(f"lake: {summary.lake}")


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--format", "fmt", default=None, help="Force a format instead of auto-detection.")
@click.option("--strict", is_flag=True, help="Exit 1 when any line was quarantined.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@click.option("--workers", type=int, default=None, help="Worker processes (default: all cores).")
@click.option("--max-line-bytes", type=int, default=None, help="Quarantine longer lines (default 64 MiB).")
@pass_lake
def ingest(obj: LakeContext, paths, fmt, strict, as_json, workers, max_line_bytes) -> None:
    """Ingest transcript files or folders into the lake (incremental).

    With no PATH, reads whichever of ~/.claude/projects, ~/.gemini/tmp and ~/.codex/sessions
    exist.

    \b
    Example:
      ctxlake ingest ~/.claude/projects --json
    """
    from pipeline.ingest import DEFAULT_MAX_LINE_BYTES, ingest as run_ingest

    with render.byte_progress("ingest") as progress:
        summary = run_ingest(list(paths), lake=obj.lake, format=fmt, workers=workers,
                             max_line_bytes=max_line_bytes or DEFAULT_MAX_LINE_BYTES,
                             progress=progress)
    _print_ingest(summary, as_json)
    if strict and summary.quarantined_errors:
        sys.exit(1)


@cli.command()
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help="Print rows as a JSON list of objects.")
@click.option("--csv", "as_csv", is_flag=True, help="Print rows as CSV.")
@pass_lake
def sql(obj: LakeContext, query: str, as_json: bool, as_csv: bool) -> None:
    """Run a SQL query over the lake's views.

    \b
    Example:
      ctxlake sql "SELECT role, count(*) FROM messages GROUP BY role ORDER BY role"
    """
    from pipeline.query import run_query

    columns, rows = run_query(obj.lake, query)
    if as_json:
        click.echo(render.to_json(render.rows_to_dicts(columns, rows)))
    elif as_csv:
        click.echo(render.to_csv(columns, rows), nl=False)
    else:
        render.console().print(render.table(columns, rows))


@cli.group()
def report() -> None:
    """Reports over the lake (each takes --json).

    \b
    Example:
      ctxlake report daily --since 2026-11-01 --json
    """


# --- commands of later stages are added above this line -------------------------------


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except CtxlakeError as error:
        exc = CtxlakeClickError(error)
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
