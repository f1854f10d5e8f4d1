"""Where the per-unit work of a stage runs: this machine's process pool (``local``) or Ray.

The seams that take an engine: ingest's file chunks (:func:`pipeline.stages.ingest.ingest`, one
``process_chunk`` job per chunk), the session chunks of plan and replay
(:func:`pipeline.stages.session_engine.run_session_chunks`), apply's runs of files
(:func:`pipeline.stages.apply.apply_policy`: read, store, write the temp outputs) and
summarize's recovery documents (:func:`pipeline.stages.recover.render_documents`). Everything
else (discovery, the commit of ``sources.parquet``, claiming and renaming the outputs, the
derived files, the lock) stays on the driver, so a run's tables and outputs are the same bytes
whichever engine did the work.

- ``local`` (the default): forked process pools, exactly as before this module existed.
- ``ray``: each job becomes a Ray task (``max_retries``: a task whose worker dies is run
  again; every job is idempotent: ingest parts have deterministic names written by rename,
  session chunks are pure). ``address``: None starts a local Ray instance (``ray.init`` in a
  background thread as soon as a stage resolves the engine, stopped at exit), ``auto`` joins
  the running cluster, ``ray://host:10001`` a remote one.
  Ray workers read the archive and write parts under the lake root themselves, so on a
  cluster both paths must be the same shared filesystem on every node.

The engine of a command is chosen by ``--engine`` / ``--ray-address`` (``$CTXLAKE_ENGINE``,
``$CTXLAKE_RAY_ADDRESS``), else ``engine`` / ``ray_address`` in ``ctxlake.toml``, else
``local``. The CLI activates it (:func:`activate`) for the whole command; library callers
pass ``engine=`` or activate one themselves. Ray is the optional extra ``ctxlake[ray]``.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import importlib.util
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from pipeline.core.errors import UsageError

__all__ = ["ENGINES", "Engine", "LocalEngine", "RayEngine", "activate", "current",
           "make_engine", "ray_available", "resolve"]

ENGINES = ("local", "ray")
RAY_INSTALL_HINT = "install the extra: pip install 'ctxlake[ray]' (or pip install ray)"
# environment variables a Ray task copies from the driver (the kill tests' crash points)
FORWARDED_ENV = ("CTXLAKE_CRASH_AT", "CTXLAKE_CRASH_ONCE")


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


class Engine:
    """Runs ``fn(job)`` for each job and yields the results in job order."""

    name = "local"

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], *,
            shared: Any = None) -> Iterator[Any]:   # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> dict:
        return {"engine": self.name}


@dataclass
class LocalEngine(Engine):
    """This machine: the stages keep their own forked process pools (the default)."""

    name = "local"

    def describe(self) -> dict:
        return {"engine": "local"}


def default_workers() -> int:
    """How many forked workers a local stage's pool has by default: up to 2 (this box's
    cores; more workers than that only share them)."""
    return min(2, os.cpu_count() or 1)


class ForkedPool(Engine):
    """A forked process pool of this machine behind :meth:`Engine.map` (:func:`forked_map`),
    for a stage whose engine path suits the local engine too: apply's files' work in the
    workers, the claims and commits in the driver. Check :func:`fork_safe` first."""

    name = "local"

    def __init__(self, workers: int):
        self.workers = workers

    def map(self, fn: Callable[[Any, Any], Any], jobs: Sequence[Any], *,
            shared: Any = None) -> Iterator[Any]:
        return forked_map(fn, list(jobs), shared, workers=self.workers)


def _warm_worker() -> None:
    """Import what the jobs run (a Ray worker is a fresh interpreter, not a fork)."""
    import pipeline.stages.apply  # noqa: F401
    import pipeline.stages.ingest  # noqa: F401
    import pipeline.stages.plan  # noqa: F401
    import pipeline.stages.session_engine  # noqa: F401
    import pipeline.stages.replay  # noqa: F401


def _run_job(fn: Callable, shared: Any, job: Any, env: dict[str, str]) -> Any:
    """Body of a Ray task: the driver's forwarded environment, then ``fn(job)`` or
    ``fn(shared, job)``. Ray workers are reused across tasks, so the environment is put back."""
    saved = {name: os.environ.get(name) for name in FORWARDED_ENV}
    try:
        for name in FORWARDED_ENV:
            if name in env:
                os.environ[name] = env[name]
            else:
                os.environ.pop(name, None)
        return fn(job) if shared is None else fn(shared, job)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# Ray's start, shared by every RayEngine of this process: ray.init runs in a thread started
# by the first stage that resolves a Ray engine, so the instance starts (about 3 s for a new
# local one on this box) while the driver lists and loads its first jobs
# (the thread then stays, parked, until the instance is shut down: the processes ray.init
# starts die with the thread that started them, PR_SET_PDEATHSIG)
_START: dict[str, Any] = {"thread": None, "error": None, "owned": False}
_START_LOCK = threading.Lock()
_READY = threading.Event()     # ray.init returned (or failed)
_STOP = threading.Event()      # the instance is shut down: the start thread may end


def _init_ray(address: str | None) -> None:
    """Body of the start thread: ``ray.init`` with what a batch job needs and no more."""
    try:
        import ray

        if ray.is_initialized():      # this process's own ray.init (tests, notebooks)
            _READY.set()
            return
        # no address: a new local instance (ray.init() alone would join one found running);
        # no dashboard (nor, for a new instance, its API server: _batch_instance), no worker
        # logs forwarded, and the driver's "ray" logger at ERROR: its start notes ("Started a local Ray
        # instance", the token-auth and SIGTERM-handler notices) are not a batch job's output
        import logging

        owned = address in (None, "", "local")
        with _batch_instance() if owned else contextlib.nullcontext():
            ray.init(address=address or "local", include_dashboard=False,
                     log_to_driver=False, logging_level=logging.ERROR)
        _START["owned"] = owned
        atexit.register(shutdown_at_exit)
        # one import task per CPU, not waited for: the workers import the stages while the
        # driver lists and loads its first jobs
        warm = ray.remote(num_cpus=1)(_warm_worker)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        _START["warming"] = [warm.remote() for _ in range(max(1, min(cpus, 256)))]
    except BaseException as exc:   # re-raised in the thread that needs Ray
        _START["error"] = exc
        _READY.set()
        return
    _READY.set()
    _STOP.wait()


@contextlib.contextmanager
def _batch_instance() -> Iterator[None]:
    """While a new local instance starts: leave out the processes a one-node batch instance
    has no use for. The autoscaler monitor (one node, nothing to scale), the log monitor
    (``log_to_driver=False``: no worker line is forwarded) and the dashboard's API server
    (no dashboard, no job submission: the instance dies with the command). Measured on this
    box: ``ray.init`` 2.0-2.2 s instead of 2.8-3.8 s, and 1.3 s less CPU taken from the
    driver in the first seconds. These are Ray's private seams (``RayParams.no_monitor``,
    ``include_log_monitor``, ``Node.start_api_server``, Ray 2.40-2.60): where one is not
    there the instance starts as Ray starts it. Undone as soon as ``ray.init`` returns."""
    try:
        from ray._private import node as ray_node, parameter as ray_parameter

        params_init = ray_parameter.RayParams.__init__
        start_api_server = ray_node.Node.start_api_server
        probe = ray_parameter.RayParams()
        if not (hasattr(probe, "no_monitor") and hasattr(probe, "include_log_monitor")):
            raise AttributeError("RayParams")
    except Exception:        # another Ray: its own start
        yield
        return

    def batch_params(self, *args, **kwargs):
        params_init(self, *args, **kwargs)
        self.no_monitor = True
        self.include_log_monitor = False

    ray_parameter.RayParams.__init__ = batch_params
    ray_node.Node.start_api_server = lambda self, *args, **kwargs: None
    try:
        yield
    finally:
        ray_parameter.RayParams.__init__ = params_init
        ray_node.Node.start_api_server = start_api_server


def start_ray(address: str | None) -> None:
    """Start connecting to Ray (a new local instance when ``address`` is None) in the
    background, once per process; :func:`wait_for_ray` waits for it."""
    with _START_LOCK:
        thread = _START["thread"]
        if thread is None or (_READY.is_set() and _START["error"] is None
                              and not _ray_initialized()):
            _READY.clear()
            _STOP.clear()
            thread = threading.Thread(target=_init_ray, args=(address,), daemon=True,
                                      name="ctxlake-ray-init")
            _START["thread"] = thread
            thread.start()


def _ray_initialized() -> bool:
    module = sys.modules.get("ray")
    return module is not None and module.is_initialized()


def starting_ray() -> bool:
    """True while ray.init runs in the start thread (the process must not fork then)."""
    return _START["thread"] is not None and not _READY.is_set()


def wait_for_ray(address: str | None):
    """The ``ray`` module, initialised (started by :func:`start_ray` if nobody did)."""
    start_ray(address)
    _READY.wait()
    error = _START["error"]
    if error is not None:
        _START["error"] = None
        _START["thread"] = None     # the next use tries again
        if isinstance(error, ConnectionError):
            raise UsageError(f"cannot reach the Ray cluster at '{address}': {error}",
                             hint="start one (ray start --head) or drop --ray-address "
                                  "to start a local instance") from None
        raise error
    import ray

    return ray


def shutdown_at_exit() -> None:
    """At exit, the driver disconnects from the Ray instance the start thread connected to
    (Ray's own exit hook would first sleep 0.5 s for log lines, which ``log_to_driver=False``
    never sends: measured, a command joining an instance ended 0.4 s later with it). A local
    instance this process started is then stopped, its processes and theirs together (see
    :func:`_stop_together`; Ray's hook stops them one after the other with a second of grace
    each); an instance joined (``--ray-address``) is left running."""
    module = sys.modules.get("ray")
    if module is None or not module.is_initialized():
        return
    if _START["owned"]:
        _START["owned"] = False
        node = getattr(getattr(module, "_private", None), "worker", None)
        node = getattr(node, "_global_node", None)
        if node is not None and isinstance(getattr(node, "all_processes", None), dict):
            node.kill_all_processes = lambda *args, **kwargs: _stop_together(node.all_processes)
    module.shutdown()
    _STOP.set()


# how long the instance's processes get to end on SIGTERM before SIGKILL: the dashboard and
# log monitor end at once; the GCS, the raylet and the autoscaler monitor do not end on
# SIGTERM at all (measured: still running after 3 s), so a longer grace only adds to every
# command's time
_STOP_GRACE_S = 0.2


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after "pid (comm)" (state, ppid, ...), None if the
    process is gone (or there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat_line = handle.read()
    except OSError:
        return None
    return stat_line[stat_line.rfind(b")") + 2:].split()


def descendant_pids(pids: Iterable[int]) -> list[int]:
    """Every process below ``pids`` (Linux ``/proc``; elsewhere none are found). Read before
    anything is stopped: an orphan is adopted by init and no longer found from its parent."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        fields = _stat_fields(int(entry)) if entry.isdigit() else None
        if fields is not None and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, stack = [], list(pids)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.append(child)
                stack.append(child)
    return found


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), None if it is gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def _signal_same(started_at: dict[int, int | None], sig: int) -> None:
    """``sig`` to each pid of ``started_at`` still running the process that started then."""
    for pid, started in started_at.items():
        if started is not None and _start_time(pid) == started:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)


def _stop_together(all_processes: dict) -> None:
    """SIGTERM to every process of the instance and to the processes they started (the
    raylet's workers and agents, which outlive a raylet killed alone: measured, a
    DashboardAgent and a RuntimeEnvAgent per command, left running for good), SIGKILL to
    those still running after ``_STOP_GRACE_S``."""
    infos = [info for infos in all_processes.values() for info in infos
             if info.process.poll() is None]
    # each with its start time, so that a pid the system gave to another process since is
    # never signalled
    below = {pid: _start_time(pid) for pid in descendant_pids(info.process.pid for info in infos)}
    for info in infos:
        info.process.terminate()
    _signal_same(below, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    for info in infos:
        try:
            info.process.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            info.process.kill()
    _signal_same(below, signal.SIGKILL)
    for info in infos:
        with contextlib.suppress(subprocess.TimeoutExpired):
            info.process.wait(timeout=5)
    all_processes.clear()


_NO_JOB = object()


class RayEngine(Engine):
    """Ray tasks, one per job, at most ``num_cpus`` of them running at once per CPU.

    Ray is started in the background when a stage resolves the engine (:func:`resolve`,
    :func:`start_ray`) and waited for on first use; when this process already called
    ``ray.init``, that instance is used as it is."""

    name = "ray"

    def __init__(self, address: str | None = None, *, max_retries: int = 3):
        if not ray_available():
            raise UsageError("--engine ray needs Ray, which is not installed",
                             hint=RAY_INSTALL_HINT)
        self.address = address or None
        self.max_retries = max_retries
        self._remote = None

    def describe(self) -> dict:
        return {"engine": "ray", "ray_address": self.address or "local instance"}

    def prepare(self) -> None:
        """Start Ray in the background (no wait): the stage's first jobs wait for it."""
        start_ray(self.address)

    def _ray(self):
        ray = wait_for_ray(self.address)
        if self._remote is None:
            self._remote = ray.remote(max_retries=self.max_retries,
                                      retry_exceptions=False)(_run_job)
        return ray

    def map(self, fn: Callable[[Any], Any], jobs: Iterable[Any], *,
            shared: Any = None) -> Iterator[Any]:
        """``fn(job)`` (or ``fn(shared, job)``; ``shared`` is put in the object store once)
        as one task per job; results come back in job order as they are needed. Every task
        is submitted before this returns, each as soon as ``jobs`` yields it: with a
        generator that makes each job (a chunk's rows as Arrow IPC), the first tasks run
        while the driver makes the next jobs."""
        jobs = iter(jobs)
        first = next(jobs, _NO_JOB)
        if first is _NO_JOB:
            return iter(())
        ray = self._ray()
        env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        fn_ref = ray.put(fn)
        shared_ref = ray.put(shared) if shared is not None else None
        refs = [self._remote.remote(fn_ref, shared_ref, job, env)
                for job in itertools.chain([first], jobs)]
        return (ray.get(ref) for ref in refs)


def make_engine(name: str | None, address: str | None = None) -> Engine:
    """The engine called ``name`` (``local`` or ``ray``; None: local)."""
    name = (name or "local").strip().lower()
    if name == "local":
        return LocalEngine()
    if name == "ray":
        return RayEngine(address)
    raise UsageError(f"unknown engine '{name}'", hint="engines: " + ", ".join(ENGINES))


_ACTIVE: contextvars.ContextVar[Engine | None] = contextvars.ContextVar("ctxlake_engine",
                                                                        default=None)


@contextlib.contextmanager
def activate(engine: Engine | None) -> Iterator[Engine | None]:
    """Make ``engine`` the one the stages use in this context (None: leave it to the config)."""
    token = _ACTIVE.set(engine)
    try:
        yield engine
    finally:
        _ACTIVE.reset(token)


def current() -> Engine | None:
    """The engine activated for this context, if any."""
    return _ACTIVE.get()


def resolve(engine: Engine | None = None, config: Any = None) -> Engine:
    """The engine to use: ``engine`` when given, else the activated one, else the config's
    ``engine`` / ``ray_address``, else local."""
    chosen = engine or _ACTIVE.get()
    if chosen is None and config is not None and getattr(config, "engine", "local") != "local":
        chosen = make_engine(config.engine, getattr(config, "ray_address", None))
    if isinstance(chosen, RayEngine):
        chosen.prepare()       # Ray starts while the stage does its driver-side work
    return chosen or LocalEngine()


def is_local(engine: Engine) -> bool:
    return isinstance(engine, LocalEngine)


def fork_safe() -> bool:
    """False when this process has a live Ray connection (or is making one): forking it (the
    local engine's process pools) would copy Ray's threads mid-call and crash the child, so
    the local seams then work in-process instead (same results, one core)."""
    if starting_ray():
        return False
    module = sys.modules.get("ray")
    return module is None or not module.is_initialized()


_FORKED: dict = {}   # what the forked workers of forked_map inherit: fn, shared, jobs


def _forked_job(index: int) -> Any:
    return _FORKED["fn"](_FORKED["shared"], _FORKED["jobs"][index])


def forked_map(fn: Callable[[Any, Any], Any], jobs: Sequence[Any], shared: Any, *,
               workers: int) -> Iterator[Any]:
    """``fn(shared, job)`` for each job over a pool of ``workers`` forked processes, results
    in job order. The workers inherit ``fn``, ``shared`` and the jobs from this process's
    memory (frozen out of the garbage collector, so its pages stay shared): only job numbers
    go out and results come back pickled. Each worker lets go of the lake lock and dies with
    its parent (:func:`pipeline.core.lake.detach_forked_worker`). Check :func:`fork_safe`
    first."""
    import gc
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from pipeline.core.lake import detach_forked_worker

    _FORKED.update(fn=fn, shared=shared, jobs=jobs)
    gc.freeze()
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                                 initializer=detach_forked_worker) as pool:
            yield from pool.map(_forked_job, range(len(jobs)))
    finally:
        gc.unfreeze()
        _FORKED.clear()


def chunked(items: Iterable[Any], size: int) -> list[list[Any]]:
    items = list(items)
    return [items[i:i + size] for i in range(0, len(items), max(size, 1))]
