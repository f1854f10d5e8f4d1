"""A child process for the kill tests: a run that a test kills (SIGKILL) at a crash point.

The child must not be a plain ``fork`` of the test process, which has run DuckDB and the
tokenizers' thread pools (a forked child cannot use them). ``spawn`` starts a fresh
interpreter that imports the pipeline again (~0.8 s of each of some fifty kills). A
``forkserver`` whose server has imported the stages' modules and run nothing forks each child
from that clean state instead: the same isolation, without the imports.
"""

from __future__ import annotations

import functools
import multiprocessing

# what a nightly run imports before its first crash point (the server imports, runs nothing)
PRELOAD = ["pipeline.stages.nightly", "pipeline.stages.ingest", "pipeline.stages.flags",
           "pipeline.stages.correlate", "pipeline.stages.calibrate", "pipeline.stages.plan",
           "pipeline.stages.apply", "pipeline.stages.summarize", "pipeline.stages.usage",
           "duckdb", "pyarrow.parquet", "pyarrow.compute"]

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _nothing() -> None:
    pass


@functools.cache
def warm() -> None:
    """Start the server and let it import everything (a child that runs and is joined), once
    per process: before timing a child, so that the time is a child's alone."""
    first = _context.Process(target=_nothing)
    first.start()
    first.join()


def start_child(target, *args, **kwargs) -> multiprocessing.Process:
    """``target(*args, **kwargs)`` in a new process (started; join it), forked from the clean
    server. ``target`` is a module-level function of an importable module.

    The server is started and has imported everything before the first child (:func:`warm`).
    A child is the server's, not the caller's: once it has ended it is reaped at once
    (``os.kill`` on its pid raises ``ProcessLookupError``, where a ``spawn`` child stays a
    zombie until joined), and its environment is the server's, as it was at the first child
    (a ``monkeypatch.setenv`` since then is not seen: set it in ``target``)."""
    warm()
    child = _context.Process(target=target, args=args, kwargs=kwargs)
    child.start()
    return child
