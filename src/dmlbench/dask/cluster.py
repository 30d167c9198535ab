"""Finding the Dask cluster a fit runs on, scaling it, and waiting on it without hanging.

Which cluster: the ``client`` parameter (a ``distributed.Client`` or a scheduler address),
else the current default client (``Client(...)`` made in this process), else one
process-wide ``LocalCluster`` started on first use, listening on loopback only, with one
thread per worker and one torch thread per worker process, its workers forked by a fork
server that leaves Ctrl-C to this process, and closed at exit.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

import dask
from distributed import Client, Future, LocalCluster, wait
from distributed.client import default_client
from distributed.gc import disable_gc_diagnosis

from dmlbench.launch.forkserver import quiet_released, quiet_start_method
from dmlbench.system import interrupts_deferred

_LOCAL: Client | None = None
_LOCAL_LOCK = threading.Lock()


LOCAL_START_ATTEMPTS = 3


def _start_local_cluster(workers: int) -> LocalCluster:
    """A LocalCluster on loopback; started again when a worker dies while it starts (the
    nanny then fails the whole start), up to ``LOCAL_START_ATTEMPTS`` times."""
    _refuse_from_a_worker_importing_main()
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            if quiet_start_method(_pre_spawn_environment() | env) == "forkserver":
                _fork_workers()
            return LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",  # loopback unless the user brings their own cluster
                dashboard_address="127.0.0.1:0",  # its HTTP server runs even without bokeh
                env=env,
                preload=[__name__],  # its dask_setup: Ctrl-C is the driver's to handle
            )
        except (RuntimeError, OSError, TimeoutError) as error:
            if attempt == LOCAL_START_ATTEMPTS:
                raise RuntimeError(
                    f"could not start a local Dask cluster ({attempt} attempts; last: "
                    f"{type(error).__name__}: {error!s:.120}): check memory and processes, "
                    f"{UNGUARDED if _main_is_a_script() else ''}or pass client= a running "
                    "cluster"
                ) from None
    raise AssertionError("unreachable")  # pragma: no cover


METHOD = "distributed.worker.multiprocessing-method"
_METHOD_BEFORE: str | None = None  # Dask's start method before the local cluster's


def _fork_workers() -> None:
    """Dask's nannies fork their workers from the quiet fork server from now until
    :func:`close_local`: those the cluster starts with and those it scales up to as a
    fit's batch grows (a nanny reads the method as it starts a worker). Dask's setting
    is process-wide: a cluster of the user's own started meanwhile forks its workers
    from that server too."""
    global _METHOD_BEFORE
    if _METHOD_BEFORE is None:
        _METHOD_BEFORE = dask.config.get(METHOD)
    dask.config.set({METHOD: "forkserver"})


def _workers_forked_no_more() -> None:
    """The local cluster is closed: Dask's start method is what it was, and the launcher
    may take the fork server over."""
    global _METHOD_BEFORE
    if _METHOD_BEFORE is not None:
        dask.config.set({METHOD: _METHOD_BEFORE})
        _METHOD_BEFORE = None
    quiet_released()


# each worker process imports the main script, as multiprocessing's spawn does
UNGUARDED = "that a script's fit is under `if __name__ == '__main__':` (its workers import it), "


def _main_is_a_script() -> bool:
    return hasattr(sys.modules.get("__main__"), "__file__")


def _refuse_from_a_worker_importing_main() -> None:
    """A local cluster started while a worker process imports the main script (as
    ``__mp_main__``): a script that fits at its top level, unguarded. Each worker tried
    to start a cluster of its own, three times, and the script's user read hundreds of
    lines of nested tracebacks ending in "Nanny failed to start"."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "__mp_main__":
            raise RuntimeError(
                "a Dask worker process is importing this script, which fits at its top "
                "level: put the fit under `if __name__ == '__main__':`"
            ) from None  # not "No clients found", which led here
        frame = frame.f_back


def _pre_spawn_environment() -> dict[str, str]:
    """``distributed.nanny.pre-spawn-environ`` as a nanny reads it: the variables a
    worker must have from its start (the process's own value first; None unsets)."""
    wanted = dask.config.get("distributed.nanny.pre-spawn-environ")
    return {
        key: os.environ.get(key, str(value)) for key, value in wanted.items() if value is not None
    }


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run in each worker process of the LocalCluster as it starts.
    Ctrl-C in a terminal signals its whole foreground process group, the workers too,
    and each printed a KeyboardInterrupt traceback from deep in Dask; the process that
    started them handles it and closes them (a worker whose parent is gone exits by
    itself). A worker still starting when Ctrl-C comes has not got here yet: forked by
    the quiet fork server (:func:`quiet_start_method`), it ignores Ctrl-C from its start."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def local_client(workers: int = 1) -> Client:
    """The process-wide LocalCluster's client (started on first use). A Ctrl-C while it
    starts is raised once it has (a second one at once): Dask cannot close a cluster cut
    short in its start. Its workers leave Ctrl-C to this process (:func:`dask_setup`).
    The scheduler's garbage-collection timer is off: a Ctrl-C that landed in its
    callback was dropped by Python and left it asserting at every collection."""
    global _LOCAL
    with _LOCAL_LOCK:
        if _LOCAL is None or _LOCAL.status not in ("running", "connecting"):
            with interrupts_deferred():
                _LOCAL = Client(_start_local_cluster(workers), set_as_default=False)
                atexit.register(close_local)
                disable_gc_diagnosis(force=True)  # it only logs, and Dask's logs are off
        return _LOCAL


def close_local() -> None:
    """Close the process-wide cluster (at exit, or when asked), quietly: its nannies kill
    a worker process that takes more than 4 s to exit (a busy machine) and warn twice per
    worker, about workers whose fit has finished and whose results are back."""
    global _LOCAL
    if _LOCAL is not None:
        cluster = _LOCAL.cluster
        nanny = logging.getLogger("distributed.nanny")
        level = nanny.level
        nanny.setLevel(logging.ERROR)
        try:
            _LOCAL.close()
            if cluster is not None:
                cluster.close()
        finally:
            nanny.setLevel(level)
            _LOCAL = None
            _workers_forked_no_more()


HANDSHAKE_WAIT_S = 10.0  # a scheduler greets a new connection at once; allow for load
MAX_HANDSHAKE_BYTES = 1 << 20


def _receive(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


def probe_scheduler(address: str, timeout: float) -> None:
    """Refuse, within ``timeout`` seconds (10 at most), a TCP address where no Dask
    scheduler answers: nothing listening, a listener that stays silent (Dask's client
    would wait forever), or one that speaks another protocol (Dask's client would read
    an HTTP reply as a 3 EiB frame length). Other schemes (tls://...) are left to Dask.

    A Dask server greets every new connection with its handshake: a little-endian
    8-byte length, then that many bytes of frames.
    """
    scheme, _, location = address.rpartition("://")
    if scheme not in ("", "tcp"):
        return
    host, _, port = location.rpartition(":")
    wait = min(timeout, HANDSHAKE_WAIT_S)
    hint = "client= takes a Dask scheduler's address, e.g. tcp://host:8786"
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=wait)
    except ValueError:
        raise ConnectionError(f"{address!r} is not a scheduler address: {hint}") from None
    except ConnectionRefusedError:
        raise ConnectionError(
            f"nothing listens at {address}: is the scheduler running? ({hint})"
        ) from None
    except OSError as error:
        raise ConnectionError(f"cannot reach {address} in {wait:g} s ({error}); {hint}") from None
    with sock:
        sock.settimeout(wait)
        try:
            header = _receive(sock, 8)
        except OSError:
            header = b""
    if len(header) < 8:
        raise ConnectionError(
            f"{address} accepted a connection but sent no Dask handshake in {wait:g} s: it "
            f"is not a Dask scheduler ({hint})"
        )
    if not 0 < int.from_bytes(header, "little") <= MAX_HANDSHAKE_BYTES:
        raise ConnectionError(
            f"{address} does not speak Dask's protocol (it began with {header!r}); {hint}"
        )


def connect(client: Any, min_workers: int, timeout: float = 30.0) -> Client:
    if isinstance(client, Client):
        return client
    if isinstance(client, str):
        probe_scheduler(client, timeout)
        try:
            return Client(client, set_as_default=False, timeout=timeout)
        except OSError:
            raise ConnectionError(
                f"cannot reach the Dask scheduler at {client} in {timeout:g} s: "
                "is it running? (client= takes its address)"
            ) from None
    if client is not None:
        raise TypeError(
            f"client must be a distributed.Client, a scheduler address or None, "
            f"not {type(client).__name__}"
        )
    try:
        return default_client()
    except ValueError:
        return local_client(min_workers)


class Workers:
    """Scales the cluster with the batch: ``ceil(batch / grads_per_worker)`` workers within
    ``min_workers..max_workers``, when the client's cluster can be scaled at all."""

    def __init__(self, client: Client, min_workers: int, max_workers: int) -> None:
        self.client = client
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.cluster = getattr(client, "cluster", None)
        self.target: int | None = None

    @property
    def scalable(self) -> bool:
        return self.cluster is not None and hasattr(self.cluster, "scale")

    def wanted(self, tasks: int) -> int:
        return max(self.min_workers, min(self.max_workers, tasks))

    def follow(self, tasks: int) -> int | None:
        """Ask for the workers ``tasks`` want; returns the target (``None``: not scalable)."""
        if not self.scalable:
            return None
        wanted = self.wanted(tasks)
        if wanted != self.target:
            assert self.cluster is not None
            self.cluster.scale(wanted)
            self.target = wanted
        return self.target

    def settle(self, timeout: float = 10.0) -> None:
        """Wait (up to ``timeout`` s) while workers asked to leave are still leaving, so
        nothing new lands on them."""
        deadline = time.monotonic() + timeout
        while (
            self.target is not None
            and len(self.current()) > self.target
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)

    def current(self) -> list[str]:
        return worker_addresses(self.client)

    def await_some(self, n: int, timeout: float) -> None:
        try:
            self.client.wait_for_workers(n, timeout=timeout)
        except TimeoutError:
            have = len(self.current())
            if have == 0:
                address = self.client.scheduler_info().get("address", "?")
                raise TimeoutError(
                    f"no Dask worker joined the scheduler {address} in "
                    f"{timeout:g} s: start workers (dask worker ADDRESS) or raise timeout"
                ) from None


def worker_addresses(client: Client) -> list[str]:
    """The scheduler's workers now, asked of the scheduler itself. Not
    ``client.scheduler_info()``: that returns the client's shared cache, which the
    client's periodic update can overwrite, between the fetch and the return, with an
    identity that lists no worker (distributed 2026.8: one DDP fit in a CI run saw an
    empty list right after ``wait_for_workers``)."""
    scheduler = client.scheduler
    if scheduler is None:
        raise WorkerLost("the Dask client is not connected to a scheduler")
    identity = client.sync(scheduler.identity, n_workers=-1)
    return sorted(identity["workers"])


def tasks_for(batch_size: int, grads_per_worker: int) -> int:
    return max(1, math.ceil(batch_size / grads_per_worker))


class WorkerLost(RuntimeError):
    """A worker a task was pinned to left the cluster."""


def gather(
    client: Client,
    futures: Sequence[Future],
    timeout: float | None,
    what: str,
    pinned: Sequence[str] = (),
    poll_s: float = 1.0,
) -> list[Any]:
    """Results of ``futures``. Raises the first task's own error at once; a one-line
    ``TimeoutError`` after ``timeout`` seconds (``None``: no limit) rather than waiting
    forever; and :class:`WorkerLost` when a worker in ``pinned`` (tasks that may run
    nowhere else) leaves the cluster."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pending: set[Future] = set(futures)
    try:
        while pending:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(
                    f"{len(pending)} of {len(futures)} {what} gave no result in {timeout:g} s "
                    "(a worker stuck or gone): raise timeout= or check the cluster"
                )
            step = poll_s if left is None else min(poll_s, left)
            try:  # returns when all are done (a failed task is done); raises at the timeout
                with client.as_current():
                    wait(list(pending), timeout=step)
            except TimeoutError:
                pass
            for future in list(pending):
                if future.status == "error":
                    future.result()  # raises the task's exception (worker traceback attached)
                if future.done():
                    pending.discard(future)
            if pinned and pending:
                gone = set(pinned) - set(worker_addresses(client))
                if gone:
                    raise WorkerLost(f"worker {sorted(gone)[0]} was lost while running {what}")
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    return client.gather(list(futures), direct=True)


def refuse_too_large(size: int, state: int, local_workers: int) -> None:
    """A model of ``size`` bytes of parameters whose copies on this machine cannot hold
    what they must is refused: the driver's weights, gradient and ``state`` tensors of
    optimizer state, and each of a local cluster's ``local_workers``' weights and
    gradient. The out-of-memory killer took the driver, and the fit with it, without a
    word."""
    from dmlbench.errors import SpecError
    from dmlbench.system import available_memory

    available, need = available_memory(), size * (2 + state + 2 * local_workers)
    if available is None or need <= available:
        return
    holders = "the driver"
    if local_workers == 1:
        holders += " and its local worker"
    elif local_workers > 1:
        holders += f" and {local_workers} local workers"
    raise SpecError(
        f"the model's {size / 2**30:.2f} GiB of parameters do not fit here: with their "
        f"gradients and optimizer state, {holders} hold at least {need / 2**30:.2f} GiB, "
        f"and {available / 2**30:.2f} GiB is available; take a smaller model, fewer "
        "--max-workers, or --scheduler a cluster of its own"
    )
