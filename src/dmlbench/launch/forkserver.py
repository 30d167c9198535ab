"""How workers start: multiprocessing's fork server, which imports torch and the
worker's modules once, started in the environment of the workers' C allocator.

This module is torch-free, so that the CLI can start the server before it imports torch
itself: the server's imports (about 4 s of one core) then overlap the launcher's own
(about 2 s) instead of following them (:func:`start_early`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os

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


_SERVED: dict[str, str] | None = None  # the allocator's environment the fork server has


def start_method(allocator: dict[str, str]) -> str:
    """The chosen start method, with the fork server started now if that is the one (it
    keeps this process's stderr, the terminal, for good: not a run's start-up log).

    The fork server starts in the ``allocator``'s environment (jemalloc's preload), as
    its workers must: a preloaded allocator serves a process from its start, and
    children inherit it. A server started in another one (a run before with another
    ``cpu_allocator``, or anything else of this process) is stopped and started anew;
    where Python cannot stop it, workers are spawned instead. Starting returns at once:
    the server imports while this process goes on, and the first worker waits for it."""
    global _SERVED
    chosen = chosen_start_method()
    if chosen == "forkserver":
        from multiprocessing import forkserver

        server = forkserver._forkserver
        if allocator != _SERVED and getattr(server, "_forkserver_pid", None) is not None:
            stop = getattr(server, "_stop", None)
            if stop is None:  # not in this Python: spawn, which execs in the environment
                return "spawn"
            stop()
        forkserver.set_forkserver_preload(list(PRELOAD))
        with environment(allocator):
            forkserver.ensure_running()
        _SERVED = dict(allocator)
    return chosen


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
