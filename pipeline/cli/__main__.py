"""``python -m pipeline.cli``: the ``ctxlake`` command."""

from pipeline.cli import main

main()
