"""One benchmark run end to end: the launch path chosen (an emulated cluster, a Slurm
job's nodes, one node of a job across hosts, or local workers), then the shared
lifecycle of :mod:`dmlbench.launch.lifecycle`."""

from __future__ import annotations

import contextlib
from typing import Any

from dmlbench.errors import SpecError
from dmlbench.launch.lifecycle import (
    Attempt,
    ProgressFn,
    RunOutcome,
    Watcher,
    launched,
    machine_peak,
    name_lost_node,
    open_run,
    prepare_data,
    settle,
    store_end,
)
from dmlbench.launch.local import chosen_start_method, launch_local
from dmlbench.launch.rendezvous import Rendezvous
from dmlbench.netem.topology import emulated, preflight
from dmlbench.resolve import deviations
from dmlbench.results import EVENTS_FILE, ResultsStore, read_events
from dmlbench.results.events import EventTail
from dmlbench.results.rundir import OUTCOME_FILE, write_json
from dmlbench.results.store import Rerun
from dmlbench.spec import RunSpec

__all__ = ["ProgressFn", "RunOutcome", "run_benchmark"]


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

    ``spec.nodes > 1`` runs on the nodes of the Slurm job this is the batch script of
    (:func:`~dmlbench.launch.slurm.run_slurm`), or else on an emulated cluster on this
    machine (:func:`~dmlbench.launch.cluster.run_cluster`); with a ``rendezvous`` this process
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
    spec.check_threads()  # before the peak probe or a worker runs with them
    chosen_start_method()  # a bad DMLBENCH_START_METHOD is refused before anything runs
    if spec.nodes > 1 and rendezvous is None:
        from dmlbench.launch.slurm import SlurmJob, run_slurm

        job = SlurmJob.from_env()
        if job is not None and not job.in_step:  # the batch script of a Slurm job
            return run_slurm(
                spec, store, job, echo=echo, progress=progress, sweep=sweep, claim=claim
            )
        from dmlbench.launch.cluster import run_cluster

        return run_cluster(spec, store, echo=echo, progress=progress, sweep=sweep, claim=claim)
    network = spec.network.resolve() if spec.network.enabled else None
    if rendezvous is not None:
        network = None  # real hosts, or nodes of an emulated cluster: shaped outside
        from dmlbench.heartbeat import start_agent_heartbeat

        start_agent_heartbeat(store.root, 0, min(1.0, spec.stall_timeout_s / 4))
        if rendezvous.nodes != spec.nodes:
            raise SpecError(f"--nnodes {rendezvous.nodes} but the spec has nodes={spec.nodes}")
    if network:
        preflight(network)  # not root, or no way to emulate it: refused before recording
    prepare_data(spec)
    peak, peak_env = machine_peak(spec)
    run_id, run_dir = open_run(
        store,
        spec.to_json_dict(),
        deviations=deviations(spec),
        sweep=sweep,
        claim=claim,
        name=rendezvous.run_id if rendezvous else None,
        environment_extra={"peak_flops": peak},
    )
    placed: list[int] = []
    watcher = Watcher(EventTail(run_dir / EVENTS_FILE), progress) if progress else None
    if watcher:
        watcher.start()

    def finish(attempt: Attempt) -> None:
        if watcher:
            watcher.done.set()
            watcher.join()
        if placed and 0 not in placed:  # another node held rank 0: it records the run
            attempt.status = attempt.status or "finished"
            with contextlib.suppress(OSError):
                outcome = {
                    "status": attempt.status,
                    "error": attempt.error,
                    "ranks": placed,
                    "recorded": False,
                }
                write_json(run_dir / OUTCOME_FILE, outcome)
            store.withdraw(run_id)
            return
        events = read_events(run_dir / EVENTS_FILE)
        unfinished = "workers exited without finishing the run"
        settle(attempt, events, unfinished)
        if rendezvous is not None and attempt.error:
            hosts = attempt.summary.get("hosts") or []
            attempt.error = name_lost_node(attempt.error, hosts, rendezvous.address())
        store_end(store, run_id, run_dir, attempt)

    with launched(finish) as attempt:
        with emulated(spec.workers, network, record_to=run_dir) as topology:
            launch_local(
                spec,
                run_dir,
                echo=echo,
                topology=topology,
                rendezvous=rendezvous,
                placed=placed,
                env=peak_env,
            )
        attempt.status = ""
    return RunOutcome(
        run_id,
        attempt.status,
        attempt.summary,
        attempt.evals,
        attempt.error,
        str(run_dir),
        recorded=not placed or 0 in placed,
        ranks=tuple(placed),
    )
