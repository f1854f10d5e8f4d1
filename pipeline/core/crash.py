"""Deterministic crash points for the kill tests (never armed in normal use).

``CTXLAKE_CRASH_AT=<point>[@<n>]`` makes this process SIGKILL itself the ``n``-th time (default
the first) it passes the named point, e.g. ``ingest:committed`` or ``stage:plan:done``. The
nightly job passes ``stage:<name>:start`` / ``stage:<name>:batch`` / ``stage:<name>:done`` at
every stage boundary, so a test can kill a run exactly there and check that the next run
finishes the work. Unset (the default), a crash point costs one dictionary look-up.

``CTXLAKE_CRASH_ONCE=<file>`` as well: only the first process to create ``<file>`` dies there
(the others, e.g. the Ray worker that retries the killed task, pass), so a test can kill one
remote task and check that its retry leaves the same result.
"""

from __future__ import annotations

import os
import signal

_passed: dict[str, int] = {}
_also: list[int] = []     # processes that die with this one at a crash point (its run's)


def die_with(pid: int) -> None:
    """At an armed crash point, kill ``pid`` first: a process working beside a run (its
    forked side lane) is that run, so the crash kills the run as a crash there would."""
    _also.append(pid)


def crash_point(name: str) -> None:
    """Count one pass of ``name``; SIGKILL this process when it is the armed one."""
    armed = os.environ.get("CTXLAKE_CRASH_AT")
    if not armed:
        return
    point, _, nth = armed.partition("@")
    if point != name:
        return
    _passed[name] = _passed.get(name, 0) + 1
    if _passed[name] == (int(nth) if nth.isdigit() else 1):
        once = os.environ.get("CTXLAKE_CRASH_ONCE")
        if once:
            try:
                os.close(os.open(once, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                return
        for pid in _also:
            os.kill(pid, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
