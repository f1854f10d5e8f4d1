"""The ``ctxlake`` command line, one module per command group: ``main`` (the group, the shared
options and the one error-translation point), ``stages``, ``nightly``, ``reports``, ``explore``,
``replay``, ``settings``. A command parses, calls one library function, renders."""

from pipeline.cli.main import _shared_options, cli, main
from pipeline.cli import explore, nightly, replay, reports, settings, stages  # noqa: F401  (they register their commands)

_shared_options(cli)   # --lake and --quiet after every subcommand too, once all are registered

__all__ = ["cli", "main"]
