"""The ``ctxlake`` command: a thin shell over the library.

Each command parses its options, calls one library function and renders the result. Library
errors (``CtxlakeError``) become ``click.ClickException`` in one place (:func:`main`).
Exit codes: 0 ok, 1 data errors reported, 2 usage error.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import warnings
from pathlib import Path

import click

from pipeline import __version__
from pipeline.core.errors import CtxlakeError, IgnorePatternWarning


class _Lazy:
    """A module imported on first use: ``ctxlake --version`` and a report load only what they
    need (rich, pyarrow and the stages stay unimported until a command uses them)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


render = _Lazy("pipeline.reports.render")


class LakeContext:
    """What every command shares: the lake (resolved on first use, so ``--help`` never reads
    a config, and imported on first use), ``--quiet`` and the config that holds the defaults."""

    def __init__(self, lake_dir: Path | None = None, quiet: bool = False):
        self.lake_dir = lake_dir
        self.quiet = quiet
        self._root: Path | None = None
        self._lake = None

    @property
    def root(self) -> Path:
        """The lake's folder: --lake, else $CTXLAKE_HOME, else the config's ``lake``, else the
        per-user data folder (:func:`pipeline.core.locations.default_lake`)."""
        if self._root is None:
            from pipeline.stages.engine import check_lake_location
            from pipeline.core.locations import default_config_path, default_lake

            if self.lake_dir is not None:
                check_lake_location(self.lake_dir)      # an s3:// lake: a clear error
                self._root = Path(os.path.abspath(os.path.expanduser(str(self.lake_dir))))
            else:
                configured = None
                if not os.environ.get("CTXLAKE_HOME") and default_config_path() is not None:
                    configured = self.config().lake
                for where in (os.environ.get("CTXLAKE_HOME"), configured):
                    if where:
                        check_lake_location(where)
                self._root = default_lake(configured)
        return self._root

    @property
    def lake(self):
        """The :class:`~pipeline.core.lake.Lake` (imported on first use)."""
        if self._lake is None:
            from pipeline.core.lake import Lake
            self._lake = Lake(self.root)
        return self._lake

    def config(self, path: Path | None = None):
        from pipeline.core.config import load_config

        return load_config(path)


pass_lake = click.make_pass_decorator(LakeContext)


class SessionParam(click.ParamType):
    """A session id or a unique prefix, resolved against the lake by the one resolver
    (:func:`pipeline.reports.sessions.resolve_session`): ambiguous or unknown is a usage error
    listing the candidates."""

    name = "SESSION"

    def convert(self, value, param, ctx):
        from pipeline.reports.sessions import resolve_session

        if value is None or ctx is None or ctx.resilient_parsing:
            return value
        return resolve_session(ctx.find_object(LakeContext).lake, value)


SESSION = SessionParam()


def _error_json(message: str, *, kind: str, exit_code: int, path=None, line=None,
                hint=None) -> str:
    return render.to_json({"error": {"kind": kind, "message": message, "path": path,
                                     "line": line, "hint": hint, "exit_code": exit_code}})


class CtxlakeClickError(click.ClickException):
    def __init__(self, error: CtxlakeError, as_json: bool = False):
        super().__init__(str(error))
        self.exit_code = error.exit_code
        self.error = error
        self.as_json = as_json

    def show(self, file=None) -> None:
        if not self.as_json:
            return super().show(file)
        e = self.error
        click.echo(_error_json(e.message, kind=type(e).__name__, exit_code=e.exit_code,
                               path=e.path, line=e.line, hint=e.hint), err=True)


class JsonUsageError(click.ClickException):
    """A click usage error (bad option, missing argument) under ``--json``: JSON on stderr."""

    def __init__(self, error: click.ClickException):
        super().__init__(error.format_message())
        self.exit_code = error.exit_code

    def show(self, file=None) -> None:
        click.echo(_error_json(self.message, kind="UsageError", exit_code=self.exit_code),
                   err=True)


class CtxlakeGroup(click.Group):
    """The one place where library errors become ``click.ClickException`` (message with
    file/line and a hint, exit 1 for data errors, 2 for usage errors; a JSON object on
    stderr when the command was given ``--json``). Also the one place where library
    warnings the user can act on (an ignore pattern dropped) are printed on stderr as
    ``warning: ...``, each once per command (none under ``--quiet``)."""

    def invoke(self, ctx: click.Context):
        shown: set[str] = set()
        original = warnings.showwarning
        as_json = "--json" in [*ctx._protected_args, *ctx.args]

        def show(message, category, filename, lineno, file=None, line=None):
            if not issubclass(category, IgnorePatternWarning):
                return original(message, category, filename, lineno, file, line)
            obj = ctx.find_object(LakeContext)
            if str(message) not in shown and not (obj and obj.quiet):
                shown.add(str(message))
                click.echo(f"warning: {message}", err=True)

        with warnings.catch_warnings():
            warnings.simplefilter("always", IgnorePatternWarning)
            warnings.showwarning = show
            try:
                return super().invoke(ctx)
            except CtxlakeError as error:
                raise CtxlakeClickError(error, as_json) from None
            except click.ClickException as error:
                if as_json and not isinstance(error, (CtxlakeClickError, JsonUsageError)):
                    raise JsonUsageError(error) from None
                raise


def _set_lake(ctx: click.Context, _param, value) -> None:
    if value is not None:
        obj = ctx.ensure_object(LakeContext)
        obj.lake_dir, obj._root, obj._lake = value, None, None


def _set_quiet(ctx: click.Context, _param, value) -> None:
    if value:
        ctx.ensure_object(LakeContext).quiet = True


def _shared_options(group: click.Group) -> None:
    """``--lake`` and ``--quiet`` after the subcommand too (``ctxlake sql --lake DIR ...``)."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _shared_options(command)
            continue
        names = {opt for p in command.params for opt in getattr(p, "opts", [])}
        if "--lake" not in names:
            command.params.append(click.Option(
                ["--lake"], type=click.Path(file_okay=False, path_type=Path), default=None,
                expose_value=False, callback=_set_lake, is_eager=True,
                help="Lake directory (same as ctxlake --lake DIR)."))
        if "--quiet" not in names:
            command.params.append(click.Option(
                ["--quiet", "-q"], is_flag=True, expose_value=False, callback=_set_quiet,
                help="No progress, warnings or summary; errors and results only."))


@click.group(cls=CtxlakeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--lake", "lake_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Lake directory (default: $CTXLAKE_HOME, else the config's "
                                 "lake, else ~/.local/share/ctxlake).")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress bars, warnings or run summaries (for cron): errors still go to "
                   "stderr and the exit code says what happened.")
@click.option("--engine", "engine_name", type=click.Choice(["local", "ray"]), default=None,
              envvar="CTXLAKE_ENGINE",
              help="Where ingest, plan, apply, replay and the recovery documents run "
                   "their units: local process pools "
                   "(default) or Ray tasks (the ctxlake[ray] extra; default: the config's "
                   "engine, else local).")
@click.option("--ray-address", default=None, envvar="CTXLAKE_RAY_ADDRESS",
              help="With --engine ray: the cluster to join ('auto': the running one, "
                   "'ray://HOST:10001'); default: start a local Ray instance.")
@click.version_option(version=__version__, package_name="ctxlake")  # no metadata scan
@click.pass_context
def cli(ctx: click.Context, lake_dir: Path | None, quiet: bool, engine_name: str | None,
        ray_address: str | None) -> None:
    """ctxlake: ingest, analyse, compact and replay AI coding-agent transcripts.

    \b
    Example:
      ctxlake ingest ~/.claude/projects
      ctxlake sql "SELECT format, count(*) FROM sessions GROUP BY ALL"
      ctxlake status            # where the lake is
      ctxlake --engine ray --ray-address auto run ~/.claude/projects
    """
    from pipeline.stages import engine as engines   # stdlib only: no cost for the other commands

    ctx.obj = LakeContext(lake_dir, quiet)
    if engine_name is not None or ray_address is not None:
        if ctx.resilient_parsing:
            return
        try:
            chosen = engines.make_engine(engine_name or "ray", ray_address)
        except CtxlakeError as error:
            raise CtxlakeClickError(error) from None
        ctx.with_resource(engines.activate(chosen))


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
                  "force a reader with --format): " + ", ".join(summary.unrecognized[:5])
                  + (" ..." if summary.files_unrecognized > 5 else ""))
    for warning in summary.warnings:
        out.print(f"[yellow]warning[/]: {warning}", highlight=False)
    shown = [p for p in summary.problems if p["severity"] == "error"]
    for problem in shown[:20]:
        where = f"{problem['path']}:{problem['line_no']}" if problem["line_no"] else problem["path"]
        out.print(f"[yellow]warning[/]: {where}: {problem['reason']}")
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
@click.option("--workers", type=int, default=None, help="Worker processes (default: all cores).")
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


@cli.command()
@click.argument("query", required=False)
@click.option("-f", "--file", "query_file", type=click.File("r", encoding="utf-8"), default=None,
              help="Read the query from this file ('-' for standard input).")
@click.option("--json", "as_json", is_flag=True, help="Print rows as a JSON list of objects.")
@click.option("--ndjson", "as_ndjson", is_flag=True, help="Print rows as JSON lines (one object a line).")
@click.option("--csv", "as_csv", is_flag=True, help="Print rows as CSV.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print rows as a Markdown table.")
@click.option("--unsafe", is_flag=True,
              help="Allow any statement and file access (COPY, ATTACH, read_csv, ...).")
@pass_lake
def sql(obj: LakeContext, query: str | None, query_file, as_json: bool, as_ndjson: bool,
        as_csv: bool, as_markdown: bool, unsafe: bool) -> None:
    """Run a read-only SQL query over the lake's views.

    Only SELECT (and SHOW, DESCRIBE, SUMMARIZE, EXPLAIN) over the views: no COPY ... TO,
    ATTACH, file-reading or file-writing functions, unless --unsafe is given.

    \b
    Example:
      ctxlake sql "SELECT role, count(*) FROM messages GROUP BY role ORDER BY role"
      ctxlake sql -f weekly.sql --csv > weekly.csv
      ctxlake sql "SELECT * FROM sessions LIMIT 3" --ndjson | jq .session_id
    """
    from pipeline.reports.query import run_query

    chosen = [name for name, on in (("--json", as_json), ("--ndjson", as_ndjson),
                                    ("--csv", as_csv), ("--markdown", as_markdown)) if on]
    if len(chosen) > 1:
        raise click.UsageError(f"choose one output format, not {' and '.join(chosen)}")
    if (query is None) == (query_file is None):
        raise click.UsageError("give the query as QUERY or with -f FILE (one of them)")
    columns, rows = run_query(obj.lake, query if query is not None else query_file.read(),
                              unsafe=unsafe)
    if as_json:
        click.echo(render.to_json(render.rows_to_dicts(columns, rows)))
    elif as_ndjson:
        click.echo(render.to_ndjson(render.rows_to_dicts(columns, rows)), nl=False)
    elif as_csv:
        click.echo(render.to_csv(columns, rows), nl=False)
    elif as_markdown:
        click.echo(render.to_markdown(columns, rows), nl=False)
    else:
        render.console().print(render.table(columns, rows))


@cli.group()
def report() -> None:
    """Reports over the lake (each takes --json).

    \b
    Example:
      ctxlake report daily --since 2026-11-01 --json
    """


def _pct(summary: dict | None) -> str:
    if not summary or summary.get("median_pct") is None:
        return "-"
    return f"{summary['median_pct']:.1f} / {summary['p90_pct']:.1f}"


def _print_estimator(result: dict, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(result))
        return
    columns = ["model", "direction", "basis", "calls", "scored", "sessions", "heuristic % med/p90",
               "calibrated % med/p90", "target", "transcript share %", "evaluation"]
    rows = []
    notes: dict[str, int] = {}  # each distinct evaluation text once, below the table
    for row in result["models"]:
        gap = row["gap_pct"]
        target = "-" if gap is None else (f"met ({-gap:.1f} under)" if gap <= 0 else f"missed by {gap:.1f}")
        share = row.get("transcript_share_pct")
        note = notes.setdefault(row["evaluation"], len(notes) + 1)
        rows.append((row["model"], row["direction"], row.get("basis", "heuristic"),
                     row["n_calls"], row["n_scored"],
                     row["n_sessions"], _pct(row["heuristic"]), _pct(row["calibrated"]), target,
                     "-" if share is None else f"{share:.0f}", f"({note})"))
    out = render.console()
    out.print(render.table(columns, rows, title=f"token estimator vs recorded usage "
                                                f"(target: calibrated median <= {result['target_pct']:g}%)"))
    for text, note in notes.items():
        out.print(f"({note}) {text}", markup=False, highlight=False)
    out.print(f"method: {result['method']}", markup=False, highlight=False)


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
        where = problem["path"] or "(plan)"
        sessions = f" [session {', '.join(problem['sessions'])}]" if problem["sessions"] else ""
        out.print(f"[red]error[/]: {where}{sessions}: {problem['error']}")
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
                                   [(p["kind"], p["path"], p["detail"]) for p in report.problems],
                                   max_width=80))
        else:
            out.print("ok: no problems")
    if report.problems:
        sys.exit(1)


def _print_tool_usage(result: dict, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(result))
        return
    fields = ["calls", "results", "input_est_tokens", "result_est_tokens", "est_tokens",
              "payload_bytes", "errors"]
    out = render.console()
    span = f"{result['since'] or 'start'} .. {result['until'] or 'now'}"
    out.print(render.table(["tool_family", *fields, "share"],
                           [(r["tool_family"], *[r[f] for f in fields], f"{r['share']:.1%}")
                            for r in result["by_family"]], title=f"tools by family ({span})"))
    out.print(render.table(["tool_family", "tool_name", *fields, "share"],
                           [(r["tool_family"], r["tool_name"], *[r[f] for f in fields],
                             f"{r['share']:.1%}") for r in result["by_tool"]], title="tools"))
    out.print(render.table(["day", "project", "tool_family", "tool_name", *fields],
                           [(r["day"], r["project"], r["tool_family"], r["tool_name"],
                             *[r[f] for f in fields]) for r in result["daily"]],
                           title="per day and project"))


@report.command("tools")
@click.option("--since", type=click.DateTime(formats=["%Y-%m-%d"]), default=None,
              help="First day (UTC, inclusive), YYYY-MM-DD.")
@click.option("--until", type=click.DateTime(formats=["%Y-%m-%d"]), default=None,
              help="Last day (UTC, inclusive), YYYY-MM-DD.")
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

    result = tool_usage(obj.lake, since=since.date() if since else None,
                        until=until.date() if until else None)
    _print_tool_usage(result, as_json)


@cli.command("correlate")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Config file with extra [memory] roots (default: "
                                 "$CTXLAKE_CONFIG or ./ctxlake.toml when present).")
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
    out.print("formats: " + ", ".join(f"{name} {stats['files']}" for name, stats
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
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Config file with ignore_patterns (default: $CTXLAKE_CONFIG or ./ctxlake.toml).")
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


@cli.command("sessions")
@click.argument("day", metavar="[DATE]", required=False)
@click.option("--all", "show_all", is_flag=True, help="The whole day's log, not its last 50 lines.")
@click.option("--json", "as_json", is_flag=True, help="Print the list or the log lines as JSON.")
@pass_lake
def sessions_command(obj: LakeContext, day: str | None, show_all: bool, as_json: bool) -> None:
    """List the days with session logs, or show one day's log (its last 50 lines).

    \b
    Example:
      ctxlake sessions
      ctxlake sessions 2025-12-09
      ctxlake sessions 2025-12-09 --all
    """
    from pipeline.stages.summarize import TAIL_LINES, session_log_index, session_log_tail

    if day is None:
        index = session_log_index(obj.lake)
        if as_json:
            click.echo(render.to_json(index.to_dict()))
            return
        if not index.days:
            click.echo(f"No session logs yet in {index.log_dir}.")
            click.echo("Write them with: ctxlake summarize (the nightly `ctxlake run` does it too)")
            return
        click.echo(f"Session logs, most recent first ({index.log_dir}):")
        for name, count in index.days:
            click.echo(f"  {name}  {count} session{'' if count == 1 else 's'}")
        if index.more_days:
            click.echo(f"... and {index.more_days} more days")
        click.echo("View one day with: ctxlake sessions YYYY-MM-DD")
        return
    tail = session_log_tail(obj.lake, day, lines=None if show_all else TAIL_LINES)
    if as_json:
        click.echo(render.to_json(tail.to_dict()))
        return
    if tail.omitted:
        click.echo(f"... ({tail.omitted} earlier lines omitted)")
    for line in tail.lines:
        click.echo(line)


@cli.command("recover")
@click.argument("session", type=SESSION)
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the document to this file instead of printing it.")
@click.option("--json", "as_json", is_flag=True, help="Print the document's fields as JSON.")
@pass_lake
def recover_command(obj: LakeContext, session: str, out_file: Path | None, as_json: bool) -> None:
    """Write the recovery document of a session (id or unique prefix): where to pick it up.

    Every field is filled from the transcript only; a field without evidence says (none).

    \b
    Example:
      ctxlake recover 7f2abd2d --out resume.md
    """
    from pipeline.stages.recover import recover

    document = recover(obj.lake, session, out=out_file)
    if as_json:
        click.echo(render.to_json(document.to_dict()))
    elif out_file is not None:
        click.echo(f"wrote {out_file} ({document.memory_id})")
    else:
        click.echo(document.to_markdown(), nl=False)


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
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, help="Config file with [prices] (default: $CTXLAKE_CONFIG or ./ctxlake.toml)."),
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
                      order, limit, compact, config_path, as_json) -> None:
    from pipeline.stages.usage import table_rows, usage_report

    config = _price_config(config_path)
    result = usage_report(obj.root, period=period,
                          tz=tz or (config.time_zone if config is not None else None),
                          since=since, until=until,
                          project=project, breakdown=breakdown, order=order, limit=limit,
                          config=config)
    if as_json:
        click.echo(render.to_json(result.to_dict()))
        return
    out, table = _usage_layout(compact, lambda narrow: table_rows(result, compact=narrow))
    out.print(table)
    flagged = [row.period for row in result.rows if row.figures.cost_mismatch]
    if flagged:
        out.print("!: the recorded cost differs from the computed cost by more than 5% ("
                  + ", ".join(p or "(no date)" for p in flagged[:5])
                  + (" ..." if len(flagged) > 5 else "") + ")", markup=False)
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
@pass_lake
def report_weekly(obj: LakeContext, **options) -> None:
    """Tokens and cost per week (Monday first; a week is named by its Monday).

    \b
    Example:
      ctxlake report weekly --breakdown project --json
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
            cost = "-" if rate["cost_usd_per_hour"] is None else f"${rate['cost_usd_per_hour']:,.4f}/h"
            out.print(f"burn rate: {rate['tokens_per_minute']:,.0f} tokens/min, {cost}", markup=False)
        if projection:
            cost = "-" if projection["cost_usd"] is None else f"${projection['cost_usd']:,.4f}"
            out.print(f"projected at block end: {projection['total_tokens']:,} tokens, {cost} "
                      f"({projection['remaining_minutes']} min left)", markup=False)
    _usage_footer(out, result)


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
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Policy config (default: $CTXLAKE_CONFIG or ./ctxlake.toml).")
@click.option("--workers", type=int, default=None, help="Worker processes (default: up to 2).")
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
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Policy config (default: $CTXLAKE_CONFIG or ./ctxlake.toml).")
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
    if result.report:
        out.print(f"report: {result.report['report']}")
        if result.report.get("charts_skipped"):
            out.print(f"charts skipped: {result.report['charts_skipped']}", markup=False)
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
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Policy config (default: $CTXLAKE_CONFIG or ./ctxlake.toml).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Write report.md and PNG charts into this folder.")
@click.option("--chart-session", default=None,
              help="Session of the per-turn chart (default: the longest one with evictions).")
@click.option("--price-as", "price_model", default=None,
              help="Price every call as this model (e.g. qwen/qwen3-coder) instead of the recorded one.")
@click.option("--cache-ttl", "cache_ttl", default="5", show_default=True,
              help="Prompt-cache lifetime in minutes between turns, or 'off' (never expires).")
@click.option("--workers", type=int, default=None, help="Worker processes (default: up to 2).")
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
        if ttl < 0:
            raise click.BadParameter("must be >= 0", param_hint="--cache-ttl")
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


# -- the nightly job (pipeline/stages/nightly.py) -----------------------------------------------
def _print_nightly(summary, as_json: bool) -> None:
    if as_json:
        click.echo(render.to_json(summary.to_dict()))
        return
    out = render.console()
    ing = summary.ingest
    out.print(f"[bold]ingest[/]    {ing['files']} files ({ing['files_new']} new, {ing['files_appended']} "
              f"appended, {ing['files_reingested']} re-read, {ing['files_unchanged']} unchanged, "
              f"{len(ing.get('removed', []))} removed); "
              f"lines {ing['lines']:,} = records {ing['records']:,} + quarantined "
              f"{ing['quarantined']:,} + held back {ing['held_back']:,}")
    for problem in [p for p in ing["problems"] if p["severity"] == "error"][:10]:
        where = f"{problem['path']}:{problem['line_no']}" if problem["line_no"] else problem["path"]
        out.print(f"  [yellow]warning[/]: {where}: {problem['reason']}")
    for folder in ing.get("own_folders", []):
        out.print(f"  skipped: {folder}")
    if ing.get("unrecognized"):
        out.print(f"  {len(ing['unrecognized'])} files not recognised as a transcript (skipped; "
                  "force a reader with ctxlake ingest --format): "
                  + ", ".join(ing["unrecognized"][:5]) + (" ..." if len(ing["unrecognized"]) > 5 else ""))
    for warning in ing.get("warnings", []):
        out.print(f"  [yellow]warning[/]: {warning}", highlight=False)
    out.print(render.table(["stage", "done", "up to date", "failed", "removed", "seconds", "status"],
                           [(s["stage"], s["done"], s["skipped"], s["failed"], s["removed"],
                             f"{s['seconds']:.2f}", s["status"]) for s in summary.stages]))
    for plan in summary.plans:
        out.print(f"[bold]plan[/]      {plan['policy']}: {plan['sessions']:,} sessions "
                  f"({plan['sessions_ignored']} ignored), {plan['evictions']:,} evictions, "
                  f"{plan['tokens_saved']:,} tokens saved, {plan['preserved']:,} preserved")
    for policy, applied in summary.applied.items():
        out.print(f"[bold]apply[/]     {policy}: {applied.get('files_written', 0):,} files written, "
                  f"{applied.get('bytes_before', 0):,} -> {applied.get('bytes_after', 0):,} bytes, "
                  f"{len(applied.get('problems', []))} problems")
        for problem in applied.get("problems", [])[:10]:
            out.print(f"  [yellow]problem[/]: {problem['path']}: {problem['error']}")
    summ = summary.summaries
    if summ:
        out.print(f"[bold]summarize[/] {summ.get('days_written', 0)} daily logs written, "
                  f"{summ.get('recovery_written', 0)} recovery documents, "
                  f"{summ.get('sessions_ignored', 0)} sessions ignored")
    if summary.html:
        out.print(f"[bold]html[/]      {summary.html['sessions_rendered']} session pages rendered, "
                  f"{summary.html['pages_written']} pages written: {summary.html['out']}/index.html")
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
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Config file (default: $CTXLAKE_CONFIG or ./ctxlake.toml).")
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
    if summary.exit_code or (strict and (summary.ingest["quarantined_errors"]
                                         or summary.ingest.get("unrecognized_named"))):
        sys.exit(1)


@report.command("html")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder (default: <lake>/html).")
@click.option("--since", type=click.DateTime(formats=["%Y-%m-%d"]), default=None,
              help="First day (UTC, inclusive), YYYY-MM-DD.")
@click.option("--until", type=click.DateTime(formats=["%Y-%m-%d"]), default=None,
              help="Last day (UTC, inclusive), YYYY-MM-DD.")
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

    summary = render_html(obj.lake, out_dir, since=since.date() if since else None,
                          until=until.date() if until else None, project=project,
                          policy=policy, tz=tz)
    if as_json:
        click.echo(render.to_json(summary.to_dict()))
        return
    click.echo(f"report: {Path(summary.out) / 'index.html'} ({summary.sessions:,} sessions; "
               f"{summary.pages_written:,} pages written, {summary.pages_unchanged:,} unchanged, "
               f"{summary.pages_removed:,} removed) in {summary.seconds:.2f}s")


@cli.command("status")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Config file (default: $CTXLAKE_CONFIG or ./ctxlake.toml).")
@click.option("--policy", "policies", multiple=True,
              help="Nightly policies to report pending work for (default payload_prune+microcompact).")
@click.option("--tz", default=None, help="Time zone the next run would use (default: this machine's).")
@click.option("--runs", "n_runs", default=5, show_default=True, help="How many recent runs to list.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@pass_lake
def status_command(obj: LakeContext, config_path, policies, tz, n_runs, as_json) -> None:
    """Where the lake is, its size, the last runs, and what each stage owes.

    \b
    Example:
      ctxlake status
      ctxlake --lake /srv/lake status --json
    """
    from pipeline.reports.status import lake_status

    config = obj.config(config_path)
    status = lake_status(obj.lake, config_path=config_path,
                         policies=tuple(policies) or config.default_policies or None,
                         tz=tz or config.time_zone, runs=n_runs)
    if as_json:
        click.echo(render.to_json(status.to_dict()))
        return
    out = render.console()
    out.print(f"lake:     {status.lake} ({render.human_bytes(status.size_bytes)}, "
              f"{status.files:,} files, {status.sessions:,} sessions)")
    out.print(f"config:   {config.where() or '(none: built-in defaults)'}", markup=False,
              highlight=False)
    out.print(f"settings: time zone {status.settings['time_zone']}, policies "
              f"{', '.join(status.settings['policies'])}")
    if status.last_settings and status.last_settings != status.settings:
        out.print("          [yellow]differs from the last run[/]: "
                  + ", ".join(f"{k} {status.last_settings.get(k)!r}" for k in status.settings
                              if status.last_settings.get(k) != status.settings[k]))
    out.print(render.table(["run", "command", "status", "started", "seconds", "done", "failed"],
                           [(r["run_id"], r["command"], r["status"], r["started_at"],
                             r["seconds"], r["sessions_done"], r["sessions_failed"])
                            for r in status.runs], title="last runs"))
    out.print(render.table(["transcripts", "path", "found", "from"],
                           [(loc["kind"], loc["path"], "yes" if loc["found"] else "no", loc["origin"])
                            for loc in status.locations], title="where a run without PATH reads"))
    out.print(render.table(["stage", "owed", "removed", "all (settings changed)"],
                           [(name, p["todo"], p["removed"], "yes" if p["full"] else "")
                            for name, p in status.pending.items()], title="pending"))


# -- settings: the config file and the policies (pipeline/core/config.py) ---------------------
@cli.group("config")
def config_group() -> None:
    """The config file that holds the defaults (lake, time zone, archives, policies, sweeps).

    Looked up as --config FILE, $CTXLAKE_CONFIG, ./ctxlake.toml, then
    ~/.config/ctxlake/ctxlake.toml. ctxlake.example.toml in the repository is an example.

    \b
    Example:
      ctxlake config show
    """


@config_group.command("show")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Config file (default: $CTXLAKE_CONFIG, ./ctxlake.toml, "
                                 "~/.config/ctxlake/ctxlake.toml).")
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
@pass_lake
def config_show(obj: LakeContext, config_path: Path | None, as_json: bool) -> None:
    """Every setting in effect, with the file it came from (and the lake it points to).

    \b
    Example:
      ctxlake config show
      ctxlake config show --config ctxlake.example.toml --json
    """
    config = obj.config(config_path)
    from pipeline.core.locations import default_lake

    root = obj.root if obj.lake_dir or not config.lake else default_lake(config.lake)
    settings = {**config.to_dict(), "lake_in_effect": str(root)}
    if as_json:
        click.echo(render.to_json(settings))
        return
    click.echo(f"config: {settings['path'] or '(none: built-in defaults)'}")
    click.echo(f"lake in effect: {settings['lake_in_effect']}")
    for key in ("lake", "time_zone", "archives", "default_policies", "price_as", "log_details",
                "session_logging", "quiet_minutes", "report", "ignore_patterns", "memory",
                "policies", "sweeps", "prices"):
        value = settings[key]
        shown = "(default)" if value in (None, [], {}) else render.compact_json(value)
        click.echo(f"  {key:<17} {shown}")


@cli.command("policies")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Policy config (default: $CTXLAKE_CONFIG or ./ctxlake.toml).")
@click.option("--json", "as_json", is_flag=True, help="Print the policies as JSON.")
@pass_lake
def policies_command(obj: LakeContext, config_path: Path | None, as_json: bool) -> None:
    """Every policy with its parameters, their defaults and the values the config sets.

    \b
    Example:
      ctxlake policies
      ctxlake plan --policy 'microcompact(keep_recent=3)'
    """
    from pipeline.core.config import policy_catalog

    catalog = policy_catalog(obj.config(config_path))
    if as_json:
        click.echo(render.to_json(catalog))
        return
    rows = []
    for policy in catalog["builtins"]:
        rows.append((policy["policy"], "", "", "", policy["summary"]))
        for param in policy["params"]:
            rows.append(("", param["name"], param["type"], render.compact_json(param["default"]),
                         f"set to {render.compact_json(param['value'])}" if param["overridden"]
                         else ""))
    out = render.console()
    out.print(render.table(["policy", "parameter", "type", "default", "notes"], rows,
                           title=f"policies (config: {catalog['config'] or 'none'})", max_width=70))
    for named in catalog["named"]:
        steps = " + ".join(f"{s['policy']}({', '.join(f'{k}={v!r}' for k, v in s['params'].items())})"
                           for s in named["steps"])
        out.print(f"{named['kind']} {named['policy']}: {steps}", markup=False, highlight=False)
    for name, specs in catalog["sweeps"].items():
        out.print(f"sweep {name}: {', '.join(specs)}", markup=False, highlight=False)
    out.print("use: --policy NAME, --policy 'NAME(key=value, ...)', --policy A+B; "
              "replay --sweep NAME", markup=False, highlight=False)


# -- one session's transcript (pipeline/reports/show.py) ------------------------------------------
def _fold(text: str | None, width: int) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= width else line[:width - 1] + "…"


def _show_lines(view, full: bool) -> list[str]:
    """The transcript as text lines: messages in full, tool calls and results folded to one
    line (``--full`` unfolds them), each eviction on a line of its own."""
    when = lambda t: t.strftime("%Y-%m-%d %H:%M:%S") if t else "-"  # noqa: E731
    lines = [f"session {view.session_id} ({view.format}, {view.project or 'no project'}"
             + (f", branch {view.git_branch}" if view.git_branch else "") + ")",
             f"{when(view.started_at)} .. {when(view.ended_at)} UTC; {view.n_user} user / "
             f"{view.n_assistant} assistant messages, {view.n_tool_calls} tool calls, "
             f"~{view.est_tokens or 0:,} tokens; {view.evicted} blocks evicted by a plan"]
    if view.parent_session_id:
        lines.append(f"sub-agent of {view.parent_session_id}")
    for block in view.blocks:
        stamp = block.timestamp.strftime("%H:%M:%S") if block.timestamp else "--:--:--"
        side = " (sidechain)" if block.is_sidechain else ""
        if block.kind == "tool_use":
            body = block.text if full else _fold(block.text, 100)
            lines.append(f"[{stamp}] ▸ {block.tool_name or 'tool'}{side}: {body}")
        elif block.kind == "tool_result":
            status = "error" if block.is_error else "ok"
            size = f"{block.payload_bytes:,} bytes" if block.payload_bytes is not None else "?"
            state = f", {block.compaction_state}" if block.compaction_state else ""
            body = block.text if full else _fold(block.text, 80)
            lines.append(f"[{stamp}] ◂ result {status} ({size}{state}){side}: {body}")
        else:
            label = block.role or "?"
            if block.kind not in ("text", None):
                label += f" {block.kind}"
            if block.is_meta and block.kind != "meta":
                label += " (meta)"
            text = block.text or ""
            if not full and block.kind == "thinking":
                text = _fold(text, 100)
            first, *rest = text.splitlines() or [""]
            lines.append(f"[{stamp}] {label}{side}: {first}")
            lines.extend(f"    {line}" for line in rest)
        for ev in block.evictions:
            saved = ""
            if ev.tokens_before is not None and ev.tokens_after is not None:
                saved = f", ~{ev.tokens_before - ev.tokens_after:,} tokens"
            lines.append(f"    ✂ {ev.action} by {ev.policy}"
                         + (f" (step {ev.step})" if ev.step and ev.step != ev.policy else "")
                         + f": {ev.reason or 'no reason given'}{saved}"
                         + (f"; locator {ev.locator}" if ev.locator else ""))
    return lines


@cli.command("show")
@click.argument("session", type=SESSION)
@click.option("--policy", default=None, help="Only the evictions of this planned policy.")
@click.option("--full", is_flag=True, help="Unfold tool calls, tool results and thinking.")
@click.option("--json", "as_json", is_flag=True, help="Print the transcript as JSON.")
@pass_lake
def show_command(obj: LakeContext, session: str, policy: str | None, full: bool,
                 as_json: bool) -> None:
    """One session's transcript: messages, tool calls folded, evictions marked.

    Each eviction a plan made shows its policy, reason and the compaction:// locator of the
    stored payload. Paged when the output is a terminal.

    \b
    Example:
      ctxlake show 7f2abd2d
      ctxlake show 7f2abd2d --policy microcompact --full
      ctxlake show 7f2abd2d --json
    """
    from pipeline.reports.show import show_session

    view = show_session(obj.lake, session, policy=policy)
    if as_json:
        click.echo(render.to_json(view.to_dict()))
        return
    text = "\n".join(_show_lines(view, full)) + "\n"
    if sys.stdout.isatty():
        click.echo_via_pager(text)
    else:
        click.echo(text, nl=False)


# --- commands of later stages are added above this line -------------------------------


_shared_options(cli)


def main() -> None:
    cli(prog_name="ctxlake")


if __name__ == "__main__":
    main()
