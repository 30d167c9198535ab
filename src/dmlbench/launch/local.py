"""Start ``workers`` local processes with torch's elastic launcher.

Rendezvous is torch's c10d on ``127.0.0.1`` port 0 (the OS picks a free port, as
torchrun's ``--standalone`` does) with its stores listening there only (see
:mod:`dmlbench.launch.rendezvous`); gloo binds to loopback; restarts are off: a worker
that dies ends the run, and the launcher stops the others within a second or two.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from dmlbench.errors import WorkerFailed
from dmlbench.launch.entry import worker_entry
from dmlbench.launch.rendezvous import BACKEND, SHARE_STORE_ENV
from dmlbench.launch.watchdog import Watchdog
from dmlbench.listeners import LOOPBACK
from dmlbench.netem.topology import Topology
from dmlbench.spec import RunSpec
from dmlbench.train.worker import run_worker


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _failure_message(failure: ProcessFailure, log_dir: Path) -> str:
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", message)
    text = str(message).strip()
    if failure.exitcode < 0 and text:  # killed by a signal
        return text
    if not text or text == "<NONE>" or "To enable traceback" in text:
        return f"exited with code {failure.exitcode} before reporting an error; see {log_dir}"
    return text.splitlines()[-1]


def _quiet_torch_launcher() -> None:
    # The launcher logs each failure as a multi-line traceback; dmlbench reports it in
    # one line and keeps the workers' own output in the run's log folder.
    for name in ("torch.distributed.elastic", "torch.multiprocessing"):
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
) -> None:
    """Run ``entrypoint(*args)`` in ``workers`` processes to completion.

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
    settings = {
        "launcher_pid": os.getpid(),
        "namespaces": topology.namespaces if topology is not None else None,
        "heartbeat_dir": str(heartbeats),
        "heartbeat_s": min(1.0, stall_timeout_s / 4),
    }
    target = f"{entrypoint.__module__}:{entrypoint.__name__}"
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=workers,
        run_id=run_dir.name,
        rdzv_backend=BACKEND,
        rdzv_endpoint=f"{host}:0",
        rdzv_configs={"is_host": True},  # this process hosts the store, whatever the address
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        local_addr=host,
        log_line_prefix_template="[rank${rank}]: ",
        logs_specs=DefaultLogsSpecs(
            log_dir=str(log_dir),
            redirects=Std.NONE if echo else Std.ALL,
            tee=Std.ALL if echo else Std.NONE,
        ),
    )
    values = {
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
        **SHARE_STORE_ENV,
        **(env or {}),
    }
    watchdog = Watchdog(heartbeats, stall_timeout_s)
    watchdog.start()
    try:
        with _environment(values):
            elastic_launch(config, worker_entry)(json.dumps(settings), target, *args)
    except ChildFailedError as error:
        if watchdog.verdict is not None:
            raise WorkerFailed(f"{watchdog.verdict.message}; it was stopped") from None
        rank, failure = error.get_first_failure()
        raise WorkerFailed(
            f"worker rank {rank} failed: {_failure_message(failure, log_dir)}"
        ) from None
    except SignalException as error:
        raise KeyboardInterrupt(f"launcher received {error.sigval.name}") from None
    except Exception as error:  # rendezvous or start-up failures inside torch
        raise WorkerFailed(f"workers could not be started: {error}") from None
    finally:
        watchdog.stop()
        shutil.rmtree(heartbeats, ignore_errors=True)


def launch_local(
    spec: RunSpec, run_dir: Path, *, echo: bool = True, topology: Topology | None = None
) -> None:
    """Run ``spec.workers`` training workers to completion (see :func:`launch_workers`)."""
    spec_json = json.dumps(spec.to_json_dict())
    launch_workers(run_worker, (spec_json, str(run_dir)), workers=spec.workers,
                   run_dir=run_dir, echo=echo, topology=topology,
                   stall_timeout_s=spec.stall_timeout_s)  # fmt: skip
