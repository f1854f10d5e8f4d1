"""The settings: ``config show`` and ``policies``."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.cli.main import LakeContext, cli, config_option, pass_lake, render


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
@config_option(default="$CTXLAKE_CONFIG, ./ctxlake.toml, ~/.config/ctxlake/ctxlake.toml")
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
    settings = config.to_dict()     # each setting as JSON: the form both outputs show
    if as_json:
        click.echo(render.to_json({**settings, "lake_in_effect": str(root)}))
        return
    click.echo(f"config: {config.where() or '(none: built-in defaults)'}")
    click.echo(f"lake in effect: {root}")
    for key in ("lake", "time_zone", "archives", "default_policies", "price_as", "log_details",
                "session_logging", "quiet_minutes", "report", "ignore_patterns", "memory",
                "policies", "sweeps", "prices"):
        value = settings[key]
        shown = "(default)" if value in (None, [], {}) else render.compact_json(value)
        click.echo(f"  {key:<17} {shown}")


@cli.command("policies")
@config_option("Policy config")
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
        click.echo(render.to_json(catalog.to_dict()))
        return
    rows = []
    for policy in catalog.builtins:
        rows.append((policy.policy, "", "", "", policy.summary))
        for param in policy.params:
            rows.append(("", param.name, param.type, render.compact_json(param.default),
                         f"set to {render.compact_json(param.value)}" if param.overridden
                         else ""))
    out = render.console()
    out.print(render.table(["policy", "parameter", "type", "default", "notes"], rows,
                           title=f"policies (config: {catalog.config or 'none'})", max_width=70))
    for named in catalog.named:
        steps = " + ".join(f"{s['policy']}({', '.join(f'{k}={v!r}' for k, v in s['params'].items())})"
                           for s in named.steps)
        out.print(f"{named.kind} {named.policy}: {steps}", markup=False, highlight=False)
    for name, specs in catalog.sweeps.items():
        out.print(f"sweep {name}: {', '.join(specs)}", markup=False, highlight=False)
    out.print("use: --policy NAME, --policy 'NAME(key=value, ...)', --policy A+B; "
              "replay --sweep NAME", markup=False, highlight=False)
