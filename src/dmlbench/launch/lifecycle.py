"""The life of a run that every launch path shares (local, emulated cluster, Slurm, one
node of a job, communication benchmarks, Dask): :func:`execute` prepares, opens its
folder and store row, starts the path's processes and watches their progress, settles
the outcome from the event log and stores its end, on every way out.

A launch path is a :class:`Launcher`: start, wait, stop, and where its event logs are.
This module imports none of the launch paths; they import it."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dmlbench.errors import (
    DatasetError,
    ResultsNotStored,
    SpecError,
    StoreError,
    WorkerFailed,
    unwritable,
)
from dmlbench.netem.host import NetworkError
from dmlbench.results import ResultsStore
from dmlbench.results.environment import collect_environment
from dmlbench.results.events import EVENTS_FILE, Event, EventTail, read_events
from dmlbench.results.records import Evaluation, RunSummary
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
from dmlbench.system import interrupt_handled, sigterm_interrupts
from dmlbench.tasks import get_task

ProgressFn = Callable[[list[Event]], None]
LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    status: str
    summary: RunSummary
    evals: list[Evaluation]
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
    environment_extra: dict[str, Any] | None = None,
) -> tuple[str, Path]:
    """Create the run's folder (spec, environment, deviations, sweep tag) and its row.

    A run that cannot be recorded (a full disk, a sweep point claimed by another
    launcher) leaves nothing behind: no folder, no row, no process started.
    """
    run_id, run_dir = new_run_dir(store, spec, name)
    environment = collect_environment() | (environment_extra or {})
    try:
        # the id too: a folder copied off a node under another name is still this run
        record = {
            "run_id": run_id,
            "environment": environment,
            "deviations": deviations,
            "sweep": sweep,
        }
        write_json(run_dir / RECORD_FILE, record)
        if "op" in spec:
            store.begin_comm(run_id, spec, environment, run_dir=run_dir)
        else:
            store.begin(
                run_id,
                spec,
                deviations or {},
                environment,
                sweep=sweep,
                claim=claim,
                run_dir=run_dir,
            )
    except OSError as error:
        remove_run_dir(run_dir)
        raise StoreError(
            f"cannot record the run in {run_dir}: {error.strerror or error}; "
            f"{unwritable(error, '--store')}; nothing was started"
        ) from None
    except BaseException:
        remove_run_dir(run_dir)
        raise
    return run_id, run_dir


def close_run(
    store: ResultsStore,
    run_dir: Path,
    status: str,
    error: str | None,
    complete: Callable[[], None],
    known: dict[str, Any] | None = None,
) -> None:
    """Write ``outcome.json``, then complete the row with ``complete()``. When the store
    cannot take it, the folder keeps everything and the error says how to import it.
    ``known``: the summary's fields the launcher added to what the event log says
    (an emulated cluster's, the node that held rank 0), kept for an import."""
    outcome: dict[str, Any] = {"status": status, "error": error}
    if known:
        outcome["summary"] = known
    with contextlib.suppress(OSError):  # a full disk: the event log is enough to import
        write_json(run_dir / OUTCOME_FILE, outcome)
    try:
        complete()
    except StoreError as failure:
        raise ResultsNotStored(
            f"the run ended ({status}) but was not stored: {failure}. Its results are kept "
            f"in {run_dir}; once the store can be written, run: dmlbench results --store "
            f"{store.root} --import {run_dir}"
        ) from None


@dataclass
class Attempt:
    """How a launch ended, as :func:`launched` classifies it. ``status`` "" means the
    workers exited cleanly (their event log says how the run ended); the finisher may
    fill in what it read back."""

    status: str = "failed"
    error: str | None = None
    summary: RunSummary = field(default_factory=lambda: RunSummary())
    evals: list[Evaluation] = field(default_factory=list)


@contextlib.contextmanager
def launched(
    finish: Callable[[Attempt], None], *, stop: Callable[[], None] = lambda: None
) -> Iterator[Attempt]:
    """The one lifecycle of every launch, after :func:`open_run`: the block starts and
    waits for the processes, and ``finish`` completes the run's row whatever happens.

    A worker failure or a broken network (one-line errors) fails the run; Ctrl-C
    stores it as interrupted; anything else is a dmlbench bug, stored as a launcher
    error; the last two call ``stop`` (what the block started) and are re-raised.
    """
    attempt = Attempt()
    try:
        yield attempt
    except (WorkerFailed, NetworkError) as failure:
        attempt.status, attempt.error = "failed", str(failure)
    except KeyboardInterrupt as interrupt:
        # Ctrl-C, or the signal that stopped it ("stopped by SIGTERM": kill, a time limit)
        interrupt_handled()
        attempt.status, attempt.error = "interrupted", str(interrupt) or "interrupted by the user"
        stop()
        raise
    except BaseException as unexpected:
        attempt.status, attempt.error = "failed", f"launcher error: {unexpected!r}"
        stop()
        raise
    finally:
        finish(attempt)


def prepare_data(spec: RunSpec) -> None:
    """Find (or download) the task's data and check its example counts, before anything
    is recorded: a data problem is refused, not stored as a failed run."""
    task = get_task(spec.task)
    if spec.synthetic_data:
        return  # nothing is read
    if spec.data_dir.exists() and not spec.data_dir.is_dir():  # not there: made or fetched
        raise DatasetError(
            f"--data-dir {spec.data_dir} is a file, not a folder: pass the folder that holds "
            f"{task.name}'s data (or where it may be downloaded to)"
        )
    task.prepare(spec.data_dir, spec.download)
    if task.count is None:
        return
    train, test = task.count(spec.data_dir)  # an empty split is refused here, also partial
    if not spec.partial_data:
        task.check_examples(train, test, spec.data_dir)
    elif not (train and test):
        raise DatasetError(
            f"{task.name}: the data under {spec.data_dir} holds {train:,} training and "
            f"{test:,} test examples: a run needs some of each"
        )


def check_device(device: str, per_node: int = 1, gpus: int | None = None) -> None:
    """Refuse in one line, before any data is fetched or any worker starts, ``device=cuda``
    where this host's workers would find no CUDA device, and GPU workers (cuda, or auto
    where there is a GPU) more than the host's ``gpus`` (default: torch's count): each
    takes the GPU of its local rank, and one past the last found none ("CUDA error:
    invalid device ordinal", from the worker)."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        build = "a CPU build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        raise SpecError(
            f"device=cuda: torch {torch.__version__} ({build}) sees no CUDA device on this "
            "host; run with device=auto or cpu"
        )
    have = torch.cuda.device_count() if gpus is None else gpus
    on_gpus = device == "cuda" or (device == "auto" and have > 0)
    if on_gpus and per_node > have:
        raise SpecError(
            f"device={device}: each of this host's {per_node} workers takes a GPU of its "
            f"own, and it has {have}; give {have} or fewer a node (--workers, "
            "--nproc-per-node), or device=cpu"
        )


def machine_peak(spec: RunSpec) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The peak FLOP/s a CPU worker of ``spec`` is measured against, probed here before
    any worker starts (workers probing at once would each see the others as load), and
    the environment that hands it to them (cached or not: a probe on a busy machine is
    not kept, but the workers use it rather than probe again); None and no environment
    for GPU workers, which probe their own device."""
    import torch

    from dmlbench.train.hardware import check_precision, hand_down, peak_for, uses_cuda

    if uses_cuda(spec.device):
        return None, {}
    cpu, threads, precision = torch.device("cpu"), spec.threads(), spec.recipe.precision
    check_precision(precision, cpu)  # before any worker starts
    peak = peak_for(cpu, threads, precision, spec.peak_tflops)
    record = {"flops_per_s": peak.flops_per_s, "source": peak.source}
    return record, hand_down(peak, cpu, threads, precision)


def settle(attempt: Attempt, events: list[Event], unfinished: str) -> None:
    """Fill in the attempt's summary and evaluations from the run's event log. Workers
    that exited cleanly (status "") leave the status to the log; a log without its end
    gets ``unfinished`` as the error."""
    attempt.summary, attempt.evals = summarize(events), eval_history(events)
    if not attempt.status:
        attempt.status = attempt.summary.status or "failed"
        if not attempt.summary.finished:
            attempt.error = unfinished


def store_end(
    store: ResultsStore,
    run_id: str,
    run_dir: Path,
    attempt: Attempt,
    known: dict[str, Any] | None = None,
) -> None:
    """Complete the run's row (see :func:`close_run`)."""

    def complete() -> None:
        store.finish(
            run_id,
            status=attempt.status,
            summary=attempt.summary,
            evals=attempt.evals,
            error=attempt.error,
        )

    close_run(store, run_dir, attempt.status, attempt.error, complete, known)


def name_lost_node(error: str, hosts: list[str], here: str) -> str:
    """Prefix a worker's error with the node it lost: gloo names the peer's address."""
    lost = [
        i
        for i, host in enumerate(hosts)
        if host != here and hosts.count(host) == 1 and f"[{host}]" in error
    ]
    return f"lost node {lost[0]} ({hosts[lost[0]]}): {error}" if len(lost) == 1 else error


class Tail(Protocol):
    """Where new events come from: one event log, or several nodes' logs."""

    def new_events(self) -> list[Event]: ...


class Watcher(threading.Thread):
    """Feeds newly logged events to a progress callback while workers run."""

    def __init__(self, tail: Tail, callback: ProgressFn) -> None:
        super().__init__(daemon=True)
        self.tail, self.callback = tail, callback
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.callback(self.tail.new_events())
        self.callback(self.tail.new_events())


class NodesTail:
    """Progress from whichever node turns out to hold rank 0 (only it logs events)."""

    def __init__(self, paths: list[Path]) -> None:
        self.tails = [EventTail(path) for path in paths]

    def new_events(self) -> list[Event]:
        return [event for tail in self.tails for event in tail.new_events()]


@dataclass(frozen=True)
class OpenedRun:
    """A run whose folder and store row exist."""

    run_id: str
    run_dir: Path


class Launcher:
    """One launch path: what it checks before anything is recorded, how it starts the
    run's processes, waits for them and stops them, and where their event logs are.
    :func:`execute` owns everything else, the same for every path."""

    unfinished = "workers exited without finishing the run"
    sigterm_interrupts = False  # SIGTERM acts as Ctrl-C: the path is a job's launcher

    def prepare(self, store: ResultsStore) -> dict[str, Any]:
        """Refuse what cannot run, before anything is recorded; returns what the run's
        environment record gains."""
        return {}

    def start(self, run: OpenedRun, held: contextlib.ExitStack) -> None:
        """Start the processes. What must outlive them (an emulated network's
        namespaces) goes into ``held``, which :func:`execute` closes on every way out."""

    def wait(self, attempt: Attempt) -> None:
        """Block until the processes exit: ``attempt.status`` "" when they exited
        cleanly (the event log says how the run ended), else its error; a failed worker
        or a lost node raises ``WorkerFailed``."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop what :meth:`start` started (Ctrl-C, a bug); safe to call twice."""

    def event_logs(self, run: OpenedRun) -> list[Path]:
        """Where the run's event log may be: the first that exists is rank 0's."""
        return [run.run_dir / EVENTS_FILE]

    def settled(self, attempt: Attempt, holder: int | None) -> None:
        """Add what this path knows to the outcome settled from the event log
        (``holder``: the index of the log that held it)."""

    def record(self, store: ResultsStore, run: OpenedRun, attempt: Attempt) -> bool:
        """Settle the outcome from the event log and store it; False when another
        node stores the run."""
        logs = self.event_logs(run)
        holder = next((i for i, path in enumerate(logs) if path.is_file()), None)
        settle(attempt, read_events(logs[holder]) if holder is not None else [], self.unfinished)
        read = set(attempt.summary.model_fields_set)
        self.settled(attempt, holder)
        added = attempt.summary.model_fields_set - read  # what only this path knows
        known = attempt.summary.model_dump(mode="json", include=added)
        store_end(store, run.run_id, run.run_dir, attempt, known)
        return True

    def ranks(self) -> tuple[int, ...]:
        """The global ranks that ran here, where the path knows them."""
        return ()


def execute(
    spec: dict[str, Any],
    store: ResultsStore,
    launcher: Launcher,
    *,
    deviations: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
    claim: Rerun | None = None,
    name: str | None = None,
    progress: ProgressFn | None = None,
) -> RunOutcome:
    """Run one launch end to end: prepare → open → start and watch → settle → store.

    Problems :meth:`Launcher.prepare` finds surface before anything is recorded. Once
    the run's row exists, every way out (success, a failed worker, a lost node, Ctrl-C,
    a bug) stores it, or, when the store cannot be written, raises ``ResultsNotStored``
    naming the folder that keeps it.
    """
    LOG.debug("%s: preparing", type(launcher).__name__)
    extra = launcher.prepare(store)
    run = OpenedRun(
        *open_run(
            store,
            spec,
            deviations=deviations,
            sweep=sweep,
            claim=claim,
            name=name,
            environment_extra=extra,
        )
    )
    LOG.info("run %s opened in %s (%s)", run.run_id, run.run_dir, type(launcher).__name__)
    watcher = Watcher(NodesTail(launcher.event_logs(run)), progress) if progress else None
    recorded = True

    def finish(attempt: Attempt) -> None:
        nonlocal recorded
        if watcher:
            watcher.done.set()
            watcher.join()
        recorded = launcher.record(store, run, attempt)
        LOG.info(
            "run %s ended %s%s",
            run.run_id,
            attempt.status,
            "" if recorded else " (not recorded here)",
        )

    with contextlib.ExitStack() as outer:
        if launcher.sigterm_interrupts:
            outer.enter_context(sigterm_interrupts())
        attempt = outer.enter_context(launched(finish, stop=launcher.stop))
        with contextlib.ExitStack() as held:
            if watcher:
                watcher.start()
            launcher.start(run, held)
            LOG.debug("run %s: started; waiting", run.run_id)
            launcher.wait(attempt)
    return RunOutcome(
        run.run_id,
        attempt.status,
        attempt.summary,
        attempt.evals,
        attempt.error,
        str(run.run_dir),
        recorded=recorded,
        ranks=launcher.ranks(),
    )
