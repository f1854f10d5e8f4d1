"""Every command answers --help, and its help shows an example."""

from __future__ import annotations

import re
from pathlib import Path

import click
from click.testing import CliRunner

from pipeline.cli import cli


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from _commands(command, prefix + (name,))


def test_every_command_has_help_with_an_example():
    runner = CliRunner()
    seen = 0
    for path, _command in _commands(cli):
        result = runner.invoke(cli, [*path, "--help"], catch_exceptions=False)
        assert result.exit_code == 0, path
        assert "Example" in result.output, f"{' '.join(path)} --help shows no example"
        seen += 1
    assert seen >= 3


def _readme_commands() -> set[tuple[str, ...]]:
    """The commands the README's command table names: the first word(s) of every backticked
    name in each row's first cell (``report daily|monthly`` names report daily, report monthly)."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    table = text.split("## Commands", 1)[1].split("\n\n", 2)[2].split("\n\n", 1)[0]
    named: set[tuple[str, ...]] = set()
    for row in table.splitlines()[2:]:
        first_cell = row.split(" | ", 1)[0].lstrip("| ")
        for code in re.findall(r"`([^`]+)`", first_cell):
            words = code.split()
            if words[0] in _GROUPS and len(words) > 1:
                for sub in words[1].replace("\\|", "|").split("|"):
                    named.add((words[0], sub))
            else:
                named.add((words[0],))
    return named


_GROUPS = {name for name, command in cli.commands.items() if isinstance(command, click.Group)}


def test_the_readme_command_table_matches_ctxlake_help():
    commands = {path for path, command in _commands(cli) if not isinstance(command, click.Group)}
    assert _readme_commands() == commands


def test_every_command_takes_the_lake_and_quiet_after_its_name():
    for path, command in _commands(cli):
        if isinstance(command, click.Group):
            continue
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert {"--lake", "--quiet"} <= options, path


def test_the_console_script_and_python_m_pipeline_cli_run_the_same_group():
    import subprocess
    import sys
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml")
                            .read_text(encoding="utf-8"))
    assert project["project"]["scripts"] == {"ctxlake": "pipeline.cli:main"}
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "--version"],
                          capture_output=True, text=True, check=True)
    from pipeline import __version__
    from pipeline.cli import main
    from pipeline.cli.main import main as group_main

    assert done.stdout == f"ctxlake, version {__version__}\n"
    assert main is group_main
