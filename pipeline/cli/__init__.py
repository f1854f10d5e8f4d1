"""The ``ctxlake`` command line: ``commands`` parses, calls one library function, renders."""

from pipeline.cli.commands import cli, main

__all__ = ["cli", "main"]
