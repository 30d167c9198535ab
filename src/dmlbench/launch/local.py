"""Start this node's workers with torch's elastic launcher (the agent of torchrun).

One host: rendezvous is torch's c10d on ``127.0.0.1`` port 0 (the OS picks a free
port, as torchrun's ``--standalone`` does) with its stores listening there only (see
:mod:`dmlbench.launch.rendezvous`); gloo binds to loopback. Several nodes: every node's
agent meets the others at the :class:`~dmlbench.launch.rendezvous.Rendezvous`
endpoint, torchrun's ``--nnodes/--rdzv-endpoint/--rdzv-id``, and binds the node's own
address. Restarts are off: a worker that dies ends the run, and the agents stop the
others within a second or two.

Workers are forked from multiprocessing's fork server, which this process starts once
and which imports torch and the worker's modules once: a spawned worker spent 2–3 s of
CPU importing them before its first step (most of a short run, and on a 2-core machine
most of every run of a sweep); a forked one starts in milliseconds. The server never
touches a GPU, so each worker initialises its device after the fork, as a spawned one
does; it takes this process's environment at launch, not the server's (see
:mod:`dmlbench.launch.entry`). `dmlbench run` starts the server before it resolves the
spec, so that the server's imports overlap its own (:mod:`dmlbench.launch.forkserver`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch.distributed import DistError
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousTimeoutError,
)
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from dmlbench.errors import WorkerFailed
from dmlbench.heartbeat import read_heartbeats
from dmlbench.launch.entry import worker_entry
from dmlbench.launch.forkserver import start_method
from dmlbench.launch.rendezvous import BACKEND, SHARE_STORE_ENV, Rendezvous, RendezvousFull
from dmlbench.launch.watchdog import REMOTE_GRACE_S, Watchdog
from dmlbench.listeners import LOOPBACK, NODE_ADDRESS_ENV, interface_of
from dmlbench.netem.topology import Topology
from dmlbench.spec import RunSpec
from dmlbench.system import environment, oom_kills, signal_handlers_kept
from dmlbench.train.worker import run_worker


@contextmanager
def _start_up_output(path: Path) -> Iterator[None]:
    """Worker processes write to this process's stderr until torch redirects theirs,
    after their imports: a Ctrl-C then printed a KeyboardInterrupt traceback per worker.
    In this block they inherit ``path`` as their stderr instead, while this process (its
    progress, torch's copy of the workers' output) writes to the terminal as before."""
    try:
        sys.stderr.flush()
        terminal = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to keep
        yield
        return
    own = sys.stderr
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stderr = os.fdopen(
        terminal,
        "w",
        buffering=1,
        encoding=getattr(own, "encoding", None),
        errors="backslashreplace",
        closefd=False,
    )
    os.dup2(log, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        sys.stderr = own
        os.close(terminal)
        os.close(log)


def _failure_message(failure: ProcessFailure, log_dir: Path) -> str:
    """The failed worker's error in one line, and where its traceback is kept (torch's
    ``@record`` writes it to the worker's ``error.json`` in the run's log folder): a path
    in the run folder, which holds from any folder and fits the summary's 80 columns,
    where the launcher's own relative path was cut short there ("…/20261129-…_94k…")."""
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", message)
    text = str(message).strip()
    if failure.exitcode < 0 and text:  # killed by a signal
        return text
    if not text or text == "<NONE>" or "To enable traceback" in text:
        return (
            f"exited with code {failure.exitcode} before reporting an error; see "
            f"{log_dir.name}/ in the run folder"
        )
    error_file = Path(failure.error_file) if failure.error_file else None
    where = ""
    if error_file and error_file.is_file():
        run_dir = log_dir.parent.resolve()
        kept = error_file.resolve()
        shown = (
            f"{kept.relative_to(run_dir)} in the run folder"
            if kept.is_relative_to(run_dir)
            else kept
        )
        where = f" (traceback: {shown})"
    return text.splitlines()[-1] + where


# said of a worker SIGKILLed while the kernel's out-of-memory killer killed a process
OUT_OF_MEMORY = (
    "the kernel killed it for memory (out of memory, the machine's or its container's "
    "limit): a smaller model or batch, fewer workers a host, or exchange=fsdp needs less"
)

# What torch raises when workers cannot be started for a reason outside dmlbench: the
# rendezvous, a port, a process that cannot be spawned, a timeout.
START_FAILURES = (RendezvousError, OSError, TimeoutError, DistError)
LAUNCHER_TRACEBACK = "launcher-error.txt"


def _launcher_bug(error: Exception, run_dir: Path) -> WorkerFailed:
    """An exception that is none of the start-up failures above is a dmlbench bug: its
    traceback is kept in the run folder and the one line says so."""
    path = run_dir / LAUNCHER_TRACEBACK
    path.write_text("".join(traceback.format_exception(error)))
    return WorkerFailed(
        f"dmlbench bug in the launcher: {type(error).__name__}: {error}; traceback in "
        f"{path.name} in the run folder; please report it"
    )


def _quiet_torch_launcher() -> None:
    # The launcher logs each failure as a multi-line traceback; dmlbench reports it in
    # one line and keeps the workers' own output in the run's log folder.
    # torch sets a level on each module's own logger, so each is quietened, not the parent
    prefixes = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")
    names = [n for n in logging.root.manager.loggerDict if n.startswith(prefixes)]
    for name in {*prefixes, *names}:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def launch_workers(
    entrypoint: Callable[..., Any],
    args: tuple[str, ...],
    *,
    workers: int,
    run_dir: Path,
    echo: bool = True,
    env: dict[str, str] | None = None,
    topology: Topology | None = None,
    stall_timeout_s: float = 60.0,
    rendezvous: Rendezvous | None = None,
    placed: list[int] | None = None,
    per_namespace: int = 1,
    allocator: dict[str, str] | None = None,
) -> None:
    """Run ``entrypoint(*args)`` in ``workers`` processes to completion.

    ``per_namespace`` workers share each of the ``topology``'s namespaces (a node of an
    emulated cluster) in order; one each by default. ``allocator`` is the environment
    that preloads the workers' C allocator (:func:`dmlbench.train.allocator.preload`).

    With a ``rendezvous`` these are this node's workers of a multi-node job; ``placed``
    then receives the global ranks that ran here (rank 0's node records the run).

    Each worker starts in :func:`~dmlbench.launch.entry.worker_entry`: it dies with this
    process, beats a heartbeat, and with a ``topology`` joins its own network namespace
    (the rendezvous then listens on the emulated network's host-only bridge address).

    Raises ``WorkerFailed`` if one fails (with its error in one line) or stalls (no
    heartbeat or no progress for ``stall_timeout_s``), and ``KeyboardInterrupt`` if the
    launcher is interrupted (SIGINT/SIGTERM); the workers are stopped first.
    """
    _quiet_torch_launcher()
    log_dir = run_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    heartbeats = run_dir / "heartbeats"
    host = topology.hub_address if topology is not None else LOOPBACK
    if rendezvous is not None:
        host = rendezvous.address()
    settings: dict[str, Any] = {
        "launcher_pid": os.getpid(),
        "namespaces": [ns for ns in topology.namespaces for _ in range(per_namespace)]
        if topology is not None
        else None,
        "heartbeat_dir": str(heartbeats),
        "heartbeat_s": min(1.0, stall_timeout_s / 4),
    }
    target = f"{entrypoint.__module__}:{entrypoint.__name__}"
    nodes, endpoint, run_id = 1, f"{host}:0", run_dir.name
    configs: dict[str, Any] = {"is_host": True}  # this process hosts the store
    if rendezvous is not None:
        nodes, endpoint, run_id = rendezvous.nodes, rendezvous.endpoint, rendezvous.run_id
        configs = {"join_timeout": rendezvous.timeout_s}  # hosted where it can listen
    config = LaunchConfig(
        min_nodes=nodes,
        max_nodes=nodes,
        nproc_per_node=workers,
        run_id=run_id,
        rdzv_backend=BACKEND,
        rdzv_endpoint=endpoint,
        rdzv_configs=configs,
        max_restarts=0,
        monitor_interval=0.1,
        start_method=start_method(allocator or {}),
        local_addr=host,
        log_line_prefix_template="[rank${rank}]: ",
        logs_specs=DefaultLogsSpecs(
            log_dir=str(log_dir),
            redirects=Std.NONE if echo else Std.ALL,
            tee=Std.ALL if echo else Std.NONE,
        ),
    )
    interface = interface_of(host) if rendezvous is not None else "lo"
    values = {
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", interface or "lo"),
        NODE_ADDRESS_ENV: host,
        **SHARE_STORE_ENV,
        **(allocator or {}),
        **(env or {}),
    }
    settings["environment"] = {**os.environ, **values}
    remote = rendezvous is not None and rendezvous.nodes > 1
    watchdog = Watchdog(
        heartbeats, stall_timeout_s, stuck_s=stall_timeout_s + (REMOTE_GRACE_S if remote else 0.0)
    )
    watchdog.start()
    killed_before = oom_kills()
    try:
        start_log = log_dir / "start-up.log"
        with environment(values), signal_handlers_kept(), _start_up_output(start_log):
            elastic_launch(config, worker_entry)(json.dumps(settings), target, *args)
    except ChildFailedError as error:
        if watchdog.verdict is not None:
            raise WorkerFailed(f"{watchdog.verdict.message}; it was stopped") from None
        rank, failure = error.get_first_failure()
        said = _failure_message(failure, log_dir)
        if failure.exitcode == -signal.SIGKILL and (oom_kills() or 0) > (killed_before or 0):
            said += f"; {OUT_OF_MEMORY}"
        raise WorkerFailed(f"worker rank {rank} failed: {said}") from None
    except SignalException as error:  # Ctrl-C is the user's; another, who sent it
        name = error.sigval.name
        raise KeyboardInterrupt("" if name == "SIGINT" else f"stopped by {name}") from None
    except START_FAILURES as error:  # rendezvous or start-up failures inside torch
        if rendezvous is not None:
            raise WorkerFailed(_rendezvous_failure(error, rendezvous)) from None
        raise WorkerFailed(f"workers could not be started: {error}") from None
    except Exception as error:
        raise _launcher_bug(error, run_dir) from error
    finally:
        watchdog.stop()
        if placed is not None:
            placed.extend(sorted(int(beat["rank"]) for beat in read_heartbeats(heartbeats)))
        shutil.rmtree(heartbeats, ignore_errors=True)


def _rendezvous_failure(error: BaseException, rendezvous: Rendezvous) -> str:
    """One line for a multi-node start that failed: who did not come, and what to do."""
    text = " ".join(str(error).split())
    where = f"the rendezvous at {rendezvous.endpoint} (id {rendezvous.run_id})"
    if isinstance(error, RendezvousFull):
        return (
            f"{where} already has all its {rendezvous.nodes} nodes (waited "
            f"{rendezvous.timeout_s} s for a place): another job uses this --rdzv-id, or "
            "this node was started twice; give this job an id of its own"
        )
    if isinstance(error, RendezvousTimeoutError) or "timed out" in text.lower():
        return (
            f"{where} timed out after {rendezvous.timeout_s} s: not all {rendezvous.nodes} "
            "nodes arrived; start `dmlbench run` on every node with the same --nnodes, "
            "--rdzv-endpoint and --rdzv-id (or raise --rdzv-timeout)"
        )
    if isinstance(error, RendezvousClosedError):
        return f"{where} was closed: another node of the job ended it"
    if isinstance(error, RendezvousConnectionError):
        return f"{text}; is the first node started, and the endpoint its address?"
    return f"{where} failed: {text[:300]}"


def launch_local(
    spec: RunSpec,
    run_dir: Path,
    *,
    echo: bool = True,
    topology: Topology | None = None,
    rendezvous: Rendezvous | None = None,
    placed: list[int] | None = None,
    env: dict[str, str] | None = None,
    allocator: dict[str, str] | None = None,
) -> None:
    """Run this node's training workers to completion (see :func:`launch_workers`):
    ``spec.workers`` on one host, ``spec.per_node`` of a multi-node job."""
    spec_json = json.dumps(spec.to_json_dict())
    workers = spec.per_node if rendezvous is not None else spec.workers
    launch_workers(
        run_worker,
        (spec_json, str(run_dir)),
        workers=workers,
        run_dir=run_dir,
        echo=echo,
        topology=topology,
        stall_timeout_s=spec.stall_timeout_s,
        rendezvous=rendezvous,
        placed=placed,
        env=env,
        allocator=allocator,
    )
