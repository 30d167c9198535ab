"""Small facts about the operating system that several packages need."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

# The signals torch's elastic launcher takes over while it runs workers (and leaves
# set to its own handler, which raises SignalException, after it returns).
LAUNCHER_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists (one we may not signal counts as alive)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# The interrupt a signal handler raised that nothing has caught yet (None: none; "":
# Ctrl-C's, whose KeyboardInterrupt says nothing). Python drops an exception raised
# where a garbage-collector callback or a __del__ runs ("Exception ignored in ...": Dask
# registers one), so a Ctrl-C could vanish and a Dask fit, whose workers leave SIGINT
# to it, ran on; its loops call raise_unhandled() between steps.
_unhandled: str | None = None
_deferring = 0  # blocks of interrupts_deferred() open


def _interrupt(reason: str) -> None:
    global _unhandled
    again, _unhandled = _unhandled is not None, reason
    if again or not _deferring:
        raise KeyboardInterrupt(*([reason] if reason else []))


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """A Ctrl-C (or a SIGTERM that acts as one) in this block is raised as it ends, a
    second one at once: for a step a KeyboardInterrupt would leave half done (a Dask
    LocalCluster interrupted as it starts is closed at exit with an AssertionError of
    Dask's own). Only where this process's handlers are dmlbench's (:func:`interruptible`)."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    if not _deferring:
        raise_unhandled()


def raise_unhandled() -> None:
    """Raise again an interrupt that Python dropped where the signal landed."""
    if _unhandled is not None:
        _interrupt(_unhandled)


def interrupt_handled() -> None:
    """The interrupt was caught where it is acted on (the run stored as interrupted)."""
    global _unhandled
    _unhandled = None


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (``kill``, ``scancel``, a scheduler's stop) acts as Ctrl-C in this block:
    the run is stored as interrupted and what it started is stopped and cleaned up."""

    def interrupt(signum: int, frame: Any) -> None:
        # once: Slurm signals every process of the step, and bash passes it on too; a
        # second one must not cut short the recording of the first
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _interrupt("stopped by SIGTERM")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave the default
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment for the block, then as they were."""
    saved = {k: os.environ.get(k) for k in values}
    try:  # restored even when a value cannot be set (the ones before it were)
        os.environ.update(values)
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """Restore the handlers of :data:`LAUNCHER_SIGNALS` after the block. torch's elastic
    launcher installs its own and never puts ours back: a Ctrl-C between two runs of a
    sweep then raised torch's SignalException from wherever the launcher was."""
    try:
        saved = {name: signal.getsignal(getattr(signal, name)) for name in LAUNCHER_SIGNALS}
    except ValueError:  # pragma: no cover - no signals on this platform
        saved = {}
    try:
        yield
    finally:
        for name, handler in saved.items():
            with contextlib.suppress(ValueError, TypeError):  # not the main thread
                signal.signal(getattr(signal, name), handler)


def interruptible() -> None:
    """Ctrl-C and ``kill -INT`` reach this process as KeyboardInterrupt even when it was
    started with SIGINT ignored (a background job of a script: ``dmlbench run … &``),
    and one that Python drops is raised again by :func:`raise_unhandled`."""
    global _shown
    signal.signal(signal.SIGINT, lambda signum, frame: _interrupt(""))
    if sys.unraisablehook is not _unraisable:
        _shown, sys.unraisablehook = sys.unraisablehook, _unraisable


_shown = sys.unraisablehook


def _unraisable(dropped: Any) -> None:
    """Python's report of an exception it dropped, but for an interrupt that
    :func:`raise_unhandled` raises again ("Exception ignored in ...: KeyboardInterrupt")."""
    if not (isinstance(dropped.exc_value, KeyboardInterrupt) and _unhandled is not None):
        _shown(dropped)


def die_with_parent(parent: int, *, via_server: bool = False) -> None:
    """Have the kernel SIGKILL this process when its parent exits (Linux); if ``parent``
    already has (this process is an orphan), exit now.

    With ``via_server`` this process may instead be a child of a fork server that
    ``parent`` started (multiprocessing's forkserver, which exits when ``parent`` does):
    it then dies with the server, and so with ``parent``."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    mine = os.getppid()
    if mine != parent and not (via_server and parent_pid(mine) in (parent, None)):
        os._exit(1)


def leave_the_server() -> None:
    """Close the fork server's liveness pipe, which a process forked by a server inherits.

    The server exits when the last copy of that pipe's write end closes: it is its
    starter's, and so tells the server its starter is gone. Every process forked from
    the server receives a copy (multiprocessing's forkserver passes it on, for processes
    that start processes of their own), so a killed launcher left a server waiting on
    its workers and workers (who die with the server) waiting on a store that was gone;
    a training worker that failed left its data loader's server and processes behind,
    each waiting on the other. A spawned or plainly forked process has none."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if server is not None and fd is not None and getattr(server, "_forkserver_pid", 0) is None:
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = server._forkserver_address = None


def die_with_the_server_or_parent() -> None:
    """For a helper process (a data loader's): end with whatever started it. Forked by a
    fork server, it leaves the server's liveness pipe, so that the server ends when the
    process that started the server does, and dies with the server; otherwise it dies
    with its parent."""
    leave_the_server()
    die_with_parent(os.getppid())


def parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` (Linux's /proc); None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as handle:  # "pid (comm) state ppid ...": comm may
            return int(handle.read().rsplit(")", 1)[1].split()[1])  # hold spaces, ")"
    except (OSError, IndexError, ValueError):
        return None


# -- how much CPU a process got, and what else ran beside it -------------------------------
# Linux exposes, per thread, the time it ran and the time it was runnable but waiting for
# a core (/proc/<pid>/task/<tid>/schedstat, nanoseconds), and per machine the time all
# cores spent busy and stolen by a hypervisor (/proc/stat, clock ticks). Elsewhere the
# numbers read NaN and no verdict is given.

_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
NAN = float("nan")


def thread_wait_s() -> float:
    """Seconds this process's live threads spent runnable but waiting for a core."""
    total = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as handle:
                    total += int(handle.read().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended while we looked
    except OSError:
        return NAN
    return total / 1e9


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used; 0 once it is gone, NaN
    where /proc is missing."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()  # the name may hold spaces
    except FileNotFoundError:
        return 0.0
    except OSError:
        return NAN
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime (fields 14, 15)


def machine_cpu_s() -> tuple[float, float]:
    """(busy, stolen) seconds summed over the machine's cores since boot; NaN unknown.

    Busy is user + nice + system + irq + softirq: what processes and the kernel ran."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
    except OSError:
        return NAN, NAN
    if len(fields) < 9 or fields[0] != "cpu":
        return NAN, NAN
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return (user + nice + system + irq + softirq) * _TICK_S, steal * _TICK_S


def machine_id() -> float:
    """A number naming the running kernel (its boot id), equal for processes that share
    a machine, network namespaces included; NaN when unknown. Exact in a float64."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return float(int(handle.read().strip().replace("-", "")[:12], 16))
    except (OSError, ValueError):
        return NAN


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot (the
    machine's, a container's memory limit included: /proc/vmstat's ``oom_kill``, Linux
    4.13 and later); None where unknown."""
    try:
        with open("/proc/vmstat") as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def available_memory() -> int | None:
    """Bytes this machine can still give processes without the out-of-memory killer:
    /proc/meminfo's MemAvailable and SwapFree; None where unknown."""
    found: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name in ("MemAvailable", "SwapFree"):
                    found[name] = int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return sum(found.values()) if "MemAvailable" in found else None
