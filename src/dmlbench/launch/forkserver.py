"""How workers start: multiprocessing's fork server, which imports torch and the
worker's modules once, started in the environment of the workers' C allocator.

This module is torch-free, so that the CLI can start the server before it imports torch
itself: the server's imports (about 4 s of one core) then overlap the launcher's own
(about 2 s) instead of following them (:func:`start_early`). Dask's local workers fork
from a quiet one of their own, which imports nothing more (:func:`quiet_start_method`):
a process has one server, and each start method here says whose it is.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading

from dmlbench.errors import DmlbenchError, SpecError
from dmlbench.system import environment

LOG = logging.getLogger(__name__)

# What the fork server imports for its workers: torch's optimizers import torch._dynamo
# when they are built, a second of CPU
PRELOAD = ("dmlbench.launch.entry", "dmlbench.train.worker", "torch._dynamo")


START_METHOD_ENV = "DMLBENCH_START_METHOD"  # forkserver (the default) or spawn
START_METHODS = ("forkserver", "spawn")


def chosen_start_method() -> str:
    """How workers start: ``DMLBENCH_START_METHOD`` (``spawn`` starts each one afresh:
    for a plugin that cannot live in a forked process, or to compare), else
    ``forkserver`` where the platform has it."""
    chosen = os.environ.get(START_METHOD_ENV, "").strip() or "forkserver"
    if chosen not in START_METHODS:
        raise SpecError(
            f"{START_METHOD_ENV}={chosen!r} is not a way to start workers: use "
            f"{' or '.join(START_METHODS)}, or unset it"
        )
    if chosen not in multiprocessing.get_all_start_methods():
        return "spawn"
    return chosen


# The fork server this module started: its pid, and the allocator's environment it has
# (None: the quiet one Dask's local workers fork from)
_SERVED: tuple[int | None, dict[str, str] | None] | None = None
_QUIET_BUSY = False  # a live Dask local cluster's workers came from the quiet server


def _running() -> int | None:
    """The pid of this process's fork server (multiprocessing has one), if it runs."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def start_method(allocator: dict[str, str]) -> str:
    """The chosen start method, with the fork server started now if that is the one (it
    keeps this process's stderr, the terminal, for good: not a run's start-up log).

    The fork server starts in the ``allocator``'s environment (jemalloc's preload), as
    its workers must: a preloaded allocator serves a process from its start, and
    children inherit it. A server started in another one (a run before with another
    ``cpu_allocator``, or anything else of this process) is stopped and started anew;
    where Python cannot stop it, or a live Dask local cluster's workers came from it
    (:func:`quiet_start_method`), workers are spawned instead. Starting returns at once:
    the server imports while this process goes on, and the first worker waits for it."""
    global _SERVED
    chosen = chosen_start_method()
    if chosen == "forkserver":
        from multiprocessing import forkserver

        running = _running()
        if running is not None and (running, allocator) != _SERVED:
            stop = getattr(forkserver._forkserver, "_stop", None)
            if stop is None or (_QUIET_BUSY and (running, None) == _SERVED):
                return "spawn"  # spawn execs in the allocator's environment
            stop()
        forkserver.set_forkserver_preload(list(PRELOAD))
        with environment(allocator):
            forkserver.ensure_running()
        _SERVED = (_running(), dict(allocator))
    return chosen


def quiet_start_method(env: dict[str, str]) -> str:
    """How Dask's local workers start: forked by a fork server that ignores Ctrl-C,
    which each worker then does from its first instruction. Spawned, as Dask does by
    default, a worker that Ctrl-C reached while it started printed a KeyboardInterrupt
    traceback of 40 to 80 lines from deep in Dask, before it could leave Ctrl-C to the
    process that started it. Forked workers inherit the server's environment, not this
    process's: it starts in ``env``.

    This process ignores Ctrl-C only while it forks and execs the server (milliseconds).
    Workers are spawned as before where ``DMLBENCH_START_METHOD`` says so, off the main
    thread (Python cannot change a handler there), and where a fork server of another
    kind runs (the launcher's, which preloads torch): a process has one. Until
    :func:`quiet_released`, the launcher spawns its workers rather than stop this one."""
    global _SERVED, _QUIET_BUSY
    from multiprocessing import forkserver

    running = _running()
    if running is not None and (running, None) == _SERVED:
        _QUIET_BUSY = True
        return "forkserver"
    main = threading.current_thread() is threading.main_thread()
    if running is not None or not main or chosen_start_method() != "forkserver":
        return "spawn"
    forkserver.set_forkserver_preload(["__main__"])  # as a spawned worker imports it
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with environment(env):
            forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, handler)
    _SERVED, _QUIET_BUSY = (_running(), None), True
    return "forkserver"


def quiet_released() -> None:
    """The Dask local cluster whose workers came from the quiet server is closed: the
    launcher may stop that server."""
    global _QUIET_BUSY
    _QUIET_BUSY = False


def start_early(cpu_allocator: str | None) -> None:
    """Start the fork server now for a run whose workers will use ``cpu_allocator``
    (``None``: none to start here), so that its imports overlap what this process does
    before the launch (resolving the spec imports torch). The launch reuses it; where
    the run turns out to use another allocator, the launch starts the server anew, as
    it would have. Nothing here is the run's business yet: a failure is left for the
    launch to meet and report."""
    if cpu_allocator is None:
        return
    from dmlbench.train.allocator import preload

    try:
        allocator, _ = preload(cpu_allocator)
        start_method(allocator)
    except (DmlbenchError, OSError) as error:
        LOG.info("fork server not started early: %s", error)
