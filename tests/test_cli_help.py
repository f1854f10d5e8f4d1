"""Every command answers --help, and its help shows an example."""

from __future__ import annotations

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
