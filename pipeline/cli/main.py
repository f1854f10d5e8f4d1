"""The ``ctxlake`` group: what every command shares (the lake, ``--quiet``, the engine) and
the one place where library errors become click errors.

Each command (in the modules beside this one, one per command group) parses its options,
calls one library function and renders the typed result it returns. Library errors
(``CtxlakeError``) become ``click.ClickException`` in one place (:class:`CtxlakeGroup`).
Exit codes: 0 ok, 1 data errors reported, 2 usage error.
"""

from __future__ import annotations

import importlib
import os
import time
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


# commands that report a lost table part themselves (or read its files again)
REPAIRING_COMMANDS = frozenset({"run", "ingest", "status", "verify"})
# commands that only read the lake: one that fails reading a table part while a run changes
# the lake under it (a part deleted or replaced between DuckDB listing and reading it) is
# started again, up to READ_RETRIES times (Lake.changed_since_read)
READING_COMMANDS = frozenset({"sql", "sessions", "show", "suggest", "report", "status"})
READ_RETRIES = 3


class LakeContext:
    """What every command shares: the lake (resolved on first use, so ``--help`` never reads
    a config, and imported on first use), ``--quiet`` and the config that holds the defaults."""

    def __init__(self, lake_dir: str | None = None, quiet: bool = False,
                 mirror: str | None = None):
        self.lake_dir = lake_dir
        self.quiet = quiet
        self.mirror = mirror
        self.remote = None          # the Mirror of an s3:// or gs:// lake
        self._root: Path | None = None
        self._lake = None

    @property
    def root(self) -> Path:
        """The lake's folder: --lake, else $CTXLAKE_HOME, else the config's ``lake``, else the
        per-user data folder (:func:`pipeline.core.locations.default_lake`). An object-store
        URL (``s3://``, ``gs://``): the folder of its local mirror, pulled
        (:func:`pipeline.core.remote.open_mirror`)."""
        if self._root is None:
            from pipeline.core.locations import default_config_path, default_lake, is_url

            where = self.lake_dir
            if where is None:
                configured = None
                if not os.environ.get("CTXLAKE_HOME") and default_config_path() is not None:
                    configured = self.config().lake
                where = os.environ.get("CTXLAKE_HOME") or configured
            if where and is_url(where):
                from pipeline.core import remote     # pyarrow: only for an object-store lake

                self.remote = remote.open_mirror(where, self.mirror)
                dropped = self.remote.last_pull.discarded
                if dropped and not self.quiet:
                    click.echo(f"warning: {dropped} unpushed change(s) in the mirror "
                               f"{self.remote.folder} were replaced by {where}'s newer commit "
                               f"{self.remote.last_pull.commit}", err=True)
                ctx = click.get_current_context(silent=True)
                if ctx is not None:
                    ctx.find_root().call_on_close(self.remote.close)
                    ctx.find_root().call_on_close(lambda: render.show_lake_as(None, None))
                self._root = self.remote.lake_root
                render.show_lake_as(str(self._root), where, str(self.remote.folder))
            elif self.lake_dir is not None:
                self._root = Path(os.path.abspath(os.path.expanduser(str(self.lake_dir))))
            else:
                self._root = default_lake(where)
        return self._root

    @property
    def lake(self):
        """The :class:`~pipeline.core.lake.Lake` (imported on first use). A command that
        reads it says first, on stderr, when a part of its tables is gone from ``tables/``:
        its answers lack those rows until the next run reads their files again."""
        if self._lake is None:
            from pipeline.core.lake import Lake
            self._lake = Lake(self.root)
            self._warn_lost_parts()
        return self._lake

    def _warn_lost_parts(self) -> None:
        ctx = click.get_current_context(silent=True)
        if self.quiet or ctx is None or ctx.info_name in REPAIRING_COMMANDS \
                or not self._lake.exists():
            return
        try:
            lost = sorted(self._lake.lost_parts())
        except CtxlakeError:        # a damaged lake: the command itself says so
            return
        if lost:
            click.echo(f"warning: {len(lost)} table part(s) missing from tables/ "
                       f"({render.first_few(lost)}): their rows are not in what this command "
                       "reads until the next `ctxlake run` reads their files again", err=True)

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


def config_option(what: str = "Config file", default: str = "$CTXLAKE_CONFIG or ./ctxlake.toml"):
    """``--config FILE`` (the ``config_path`` argument): the config file a command reads."""
    return click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                        default=None, help=f"{what} (default: {default}).")


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

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as error:   # the group's own options (--lake a file)
            if "--json" in args and not isinstance(error, JsonUsageError):
                raise JsonUsageError(error) from None
            raise

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
                return self._invoke_reading_again(ctx)
            except CtxlakeError as error:
                raise CtxlakeClickError(error, as_json) from None
            except click.ClickException as error:
                if as_json and not isinstance(error, (CtxlakeClickError, JsonUsageError)):
                    raise JsonUsageError(error) from None
                raise

    def _invoke_reading_again(self, ctx: click.Context):
        """The command; a reading command (:data:`READING_COMMANDS`) that failed reading a
        file of the lake while a run changed the lake's files under it, again (the group's
        callback too: a new :class:`LakeContext`), up to :data:`READ_RETRIES` times."""
        args = (list(ctx._protected_args), list(ctx.args))
        for attempt in range(READ_RETRIES + 1):
            try:
                return super().invoke(ctx)
            except Exception as error:
                obj = ctx.obj if isinstance(ctx.obj, LakeContext) else None
                if attempt == READ_RETRIES or obj is None or obj._root is None \
                        or ctx.invoked_subcommand not in READING_COMMANDS:
                    raise
                from pipeline.core.lake import Lake, failed_on_a_file

                lake = obj._lake or Lake(obj._root)   # some commands hand the library the root
                if not failed_on_a_file(error) or not lake.changed_since_read():
                    raise
                lake.forget_reads()
                ctx._protected_args, ctx.args = list(args[0]), list(args[1])
                time.sleep(0.1 * (attempt + 1))     # a run's commit or collection: moments


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
                ["--lake"], type=click.Path(file_okay=False), default=None,
                expose_value=False, callback=_set_lake, is_eager=True,
                help="Lake directory or s3:// / gs:// URL (same as ctxlake --lake)."))
        if "--quiet" not in names:
            command.params.append(click.Option(
                ["--quiet", "-q"], is_flag=True, expose_value=False, callback=_set_quiet,
                help="No progress, warnings or summary; errors and results only."))


@click.group(cls=CtxlakeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--lake", "lake_dir", type=click.Path(file_okay=False), default=None,
              help="Lake directory, or an object-store lake s3://BUCKET/PREFIX or "
                   "gs://BUCKET/PREFIX worked on through a local mirror (credentials from the "
                   "environment: AWS_*, AWS_ENDPOINT_URL, Google's default credentials). "
                   "Default: $CTXLAKE_HOME, else the config's lake, else "
                   "~/.local/share/ctxlake.")
@click.option("--mirror", default=None, envvar="CTXLAKE_MIRROR",
              type=click.Path(file_okay=False),
              help="With an s3:// or gs:// lake: the local mirror folder (default: "
                   "~/.cache/ctxlake/mirrors/<hash of the URL>).")
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
def cli(ctx: click.Context, lake_dir: str | None, mirror: str | None, quiet: bool,
        engine_name: str | None, ray_address: str | None) -> None:
    """ctxlake: ingest, analyse, compact and replay AI coding-agent transcripts.

    \b
    Example:
      ctxlake ingest ~/.claude/projects
      ctxlake sql "SELECT format, count(*) FROM sessions GROUP BY ALL"
      ctxlake status            # where the lake is
      ctxlake --engine ray --ray-address auto run ~/.claude/projects
      ctxlake --lake s3://team-bucket/agents run ~/.claude/projects
    """
    from pipeline.stages import engine as engines   # stdlib only: no cost for the other commands

    ctx.obj = LakeContext(lake_dir, quiet, mirror)
    if engine_name is not None or ray_address is not None:
        if ctx.resilient_parsing:
            return
        try:
            chosen = engines.make_engine(engine_name or "ray", ray_address)
        except CtxlakeError as error:
            raise CtxlakeClickError(error) from None
        ctx.with_resource(engines.activate(chosen))


def main() -> None:
    cli(prog_name="ctxlake")
