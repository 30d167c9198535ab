"""One benchmark run end to end: prepare data, record, launch, summarise, store."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dmlbench.errors import ResultsNotStored, SpecError, StoreError, WorkerFailed
from dmlbench.launch.local import launch_local
from dmlbench.launch.rendezvous import Rendezvous
from dmlbench.netem.topology import NetworkError, emulated, preflight
from dmlbench.results import EVENTS_FILE, ResultsStore, read_events
from dmlbench.results.environment import collect_environment
from dmlbench.results.events import EventTail
from dmlbench.results.rundir import (
    OUTCOME_FILE,
    RECORD_FILE,
    create_run_dir,
    remove_run_dir,
    write_json,
)
from dmlbench.results.store import Rerun
from dmlbench.results.summary import eval_history, summarize
from dmlbench.spec import RunSpec
from dmlbench.spec.run import deviations
from dmlbench.tasks import get_task

ProgressFn = Callable[[list[dict[str, Any]]], None]


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    status: str
    summary: dict[str, Any]
    evals: list[dict[str, Any]]
    error: str | None
    run_dir: str
    recorded: bool = True  # False: a node of a multi-node job whose rank 0 ran elsewhere
    ranks: tuple[int, ...] = ()  # the global ranks that ran on this node


def new_run_dir(
    store: ResultsStore, spec: dict[str, Any], name: str | None = None
) -> tuple[str, Path]:
    """A fresh run id (``name`` if free) and its folder, holding ``spec.json``."""
    return create_run_dir(store.root / "runs", spec, name)


def open_run(
    store: ResultsStore,
    spec: dict[str, Any],
    *,
    deviations: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
    claim: Rerun | None = None,
    name: str | None = None,
) -> tuple[str, Path]:
    """Create the run's folder (spec, environment, deviations, sweep tag) and its row.

    A run that cannot be recorded (a full disk, a sweep point claimed by another
    launcher) leaves nothing behind: no folder, no row, no process started.
    """
    run_id, run_dir = new_run_dir(store, spec, name)
    environment = collect_environment()
    try:
        record = {"environment": environment, "deviations": deviations, "sweep": sweep}
        write_json(run_dir / RECORD_FILE, record)
        if "op" in spec:
            store.begin_comm(run_id, spec, environment, run_dir=run_dir)
        else:
            store.begin(run_id, spec, deviations or {}, environment, sweep=sweep, claim=claim,
                        run_dir=run_dir)  # fmt: skip
    except OSError as error:
        remove_run_dir(run_dir)
        raise StoreError(f"cannot record the run in {run_dir}: {error}; free space there "
                         "(or pass another --store); nothing was started") from None  # fmt: skip
    except BaseException:
        remove_run_dir(run_dir)
        raise
    return run_id, run_dir


def close_run(
    store: ResultsStore, run_dir: Path, status: str, error: str | None, complete: Callable[[], None]
) -> None:
    """Write ``outcome.json``, then complete the row with ``complete()``. When the store
    cannot take it, the folder keeps everything and the error says how to import it."""
    with contextlib.suppress(OSError):  # a full disk: the event log is enough to import
        write_json(run_dir / OUTCOME_FILE, {"status": status, "error": error})
    try:
        complete()
    except StoreError as failure:
        raise ResultsNotStored(
            f"the run ended ({status}) but was not stored: {failure}. Its results are kept "
            f"in {run_dir}; once the store can be written, run: dmlbench results --store "
            f"{store.root} --import {run_dir}"
        ) from None


def prepare_data(spec: RunSpec) -> None:
    """Find (or download) the task's data and check its example counts, before anything
    is recorded: a data problem is refused, not stored as a failed run."""
    task = get_task(spec.task)
    task.prepare(spec.data_dir, spec.download)
    if task.count is not None and not spec.partial_data:
        task.check_examples(*task.count(spec.data_dir), spec.data_dir)


def settle(
    events: list[dict[str, Any]], status: str, error: str | None, unfinished: str
) -> tuple[dict[str, Any], list[dict[str, Any]], str, str | None]:
    """Summary, evaluations, status and error of a run from its event log. ``status``
    "" means the workers exited cleanly: the log then says how the run ended, and a
    log without its end gets ``unfinished`` as the error."""
    summary, evals = summarize(events), eval_history(events)
    if not status:
        status = summary.get("status") or "failed"
        if not summary["finished"]:
            error = unfinished
    return summary, evals, status, error


def store_end(
    store: ResultsStore,
    run_id: str,
    run_dir: Path,
    status: str,
    summary: dict[str, Any],
    evals: list[dict[str, Any]],
    error: str | None,
) -> None:
    """Complete the run's row (see :func:`close_run`)."""

    def complete() -> None:
        store.finish(run_id, status=status, summary=summary, evals=evals, error=error)

    close_run(store, run_dir, status, error, complete)


def name_lost_node(error: str, hosts: list[str], here: str) -> str:
    """Prefix a worker's error with the node it lost: gloo names the peer's address."""
    lost = [i for i, host in enumerate(hosts)
            if host != here and hosts.count(host) == 1 and f"[{host}]" in error]  # fmt: skip
    return f"lost node {lost[0]} ({hosts[lost[0]]}): {error}" if len(lost) == 1 else error


class Tail(Protocol):
    def new_events(self) -> list[dict[str, Any]]: ...


class _Watcher(threading.Thread):
    """Feeds newly logged events to a progress callback while workers run."""

    def __init__(self, tail: Tail, callback: ProgressFn) -> None:
        super().__init__(daemon=True)
        self.tail, self.callback = tail, callback
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.callback(self.tail.new_events())
        self.callback(self.tail.new_events())


def run_benchmark(
    spec: RunSpec,
    store: ResultsStore,
    *,
    echo: bool = True,
    progress: ProgressFn | None = None,
    sweep: dict[str, Any] | None = None,
    claim: Rerun | None = None,
    rendezvous: Rendezvous | None = None,
) -> RunOutcome:
    """Run ``spec`` once and store it. Failed and interrupted runs are stored too.

    ``spec.nodes > 1`` runs on an emulated cluster on this machine
    (:func:`~dmlbench.launch.cluster.run_cluster`); with a ``rendezvous`` this process
    is one node of a multi-node job: it runs ``spec.per_node`` workers, and keeps the
    run in ``store`` if rank 0 ran here; otherwise its folder keeps its workers' logs
    under the same run id and the returned outcome is not ``recorded``.

    ``sweep`` tags the run as part of a sweep and ``claim`` makes the run give way
    (``AlreadyClaimed``, before anything starts) to another launcher of the same point
    (see :meth:`ResultsStore.begin`).

    Data problems surface before anything is recorded; after the run row exists, every
    exit path (success, worker failure, Ctrl-C, a bug) completes it, or, when the store
    cannot be written, raises ``ResultsNotStored`` naming the folder that keeps it.
    """
    if spec.nodes > 1 and rendezvous is None:
        from dmlbench.launch.cluster import run_cluster

        return run_cluster(spec, store, echo=echo, progress=progress, sweep=sweep, claim=claim)
    network = spec.network.resolve() if spec.network.enabled else None
    if rendezvous is not None:
        network = None  # real hosts, or nodes of an emulated cluster: shaped outside
        if rendezvous.nodes != spec.nodes:
            raise SpecError(f"--nnodes {rendezvous.nodes} but the spec has nodes={spec.nodes}")
    if network:
        preflight(network)  # not root, or no way to emulate it: refused before recording
    prepare_data(spec)
    run_id, run_dir = open_run(store, spec.to_json_dict(), deviations=deviations(spec),
                               sweep=sweep, claim=claim,
                               name=rendezvous.run_id if rendezvous else None)  # fmt: skip
    status, error = "failed", None
    placed: list[int] = []
    watcher = _Watcher(EventTail(run_dir / EVENTS_FILE), progress) if progress else None
    if watcher:
        watcher.start()
    try:
        with emulated(spec.workers, network, record_to=run_dir) as topology:
            launch_local(spec, run_dir, echo=echo, topology=topology, rendezvous=rendezvous,
                         placed=placed)  # fmt: skip
        status = ""
    except (WorkerFailed, NetworkError) as failure:
        error = str(failure)
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user"
        raise
    except BaseException as unexpected:
        error = f"launcher error: {unexpected!r}"
        raise
    finally:
        if watcher:
            watcher.done.set()
            watcher.join()
        summary: dict[str, Any] = {}
        evals: list[dict[str, Any]] = []
        if placed and 0 not in placed:  # another node held rank 0: it records the run
            status = status or "finished"
            with contextlib.suppress(OSError):
                outcome = {"status": status, "error": error, "ranks": placed, "recorded": False}
                write_json(run_dir / OUTCOME_FILE, outcome)
            store.withdraw(run_id)
        else:
            events = read_events(run_dir / EVENTS_FILE)
            unfinished = "workers exited without finishing the run"
            summary, evals, status, error = settle(events, status, error, unfinished)
            if rendezvous is not None and error:
                error = name_lost_node(error, summary.get("hosts") or [], rendezvous.address())
            store_end(store, run_id, run_dir, status, summary, evals, error)
    return RunOutcome(
        run_id,
        status,
        summary,
        evals,
        error,
        str(run_dir),
        recorded=not placed or 0 in placed,
        ranks=tuple(placed),
    )
