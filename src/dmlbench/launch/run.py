"""One benchmark run end to end: the launch path chosen once
(:func:`~dmlbench.launch.request.launch_path`: an emulated cluster, a Slurm job's
nodes, one node of a job across hosts, or local workers), then the shared pipeline of
:func:`dmlbench.launch.lifecycle.execute`."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from dmlbench.errors import SpecError
from dmlbench.launch.forkserver import chosen_start_method
from dmlbench.launch.lifecycle import (
    Attempt,
    Launcher,
    OpenedRun,
    ProgressFn,
    RunOutcome,
    check_device,
    execute,
    machine_peak,
    name_lost_node,
    prepare_data,
)
from dmlbench.launch.local import launch_local
from dmlbench.launch.rendezvous import Rendezvous
from dmlbench.launch.request import launch_path
from dmlbench.netem.host import preflight
from dmlbench.netem.topology import emulated
from dmlbench.resolve import deviations
from dmlbench.results import ResultsStore
from dmlbench.results.rundir import OUTCOME_FILE, write_json
from dmlbench.results.store import Rerun
from dmlbench.spec import RunSpec
from dmlbench.train.allocator import preload

if TYPE_CHECKING:  # the Slurm path is imported where it runs
    from dmlbench.launch.slurm import SlurmJob

__all__ = ["ProgressFn", "RunOutcome", "run_benchmark"]
LOG = logging.getLogger(__name__)


def run_benchmark(
    spec: RunSpec,
    store: ResultsStore,
    *,
    echo: bool = True,
    progress: ProgressFn | None = None,
    sweep: dict[str, Any] | None = None,
    claim: Rerun | None = None,
    rendezvous: Rendezvous | None = None,
    slurm: SlurmJob | None = None,
) -> RunOutcome:
    """Run ``spec`` once and store it. Failed and interrupted runs are stored too.

    The path is :func:`~dmlbench.launch.request.launch_path`'s: ``spec.nodes > 1`` runs
    on the nodes of ``slurm``, the Slurm job this is the batch script of
    (:class:`~dmlbench.launch.srun.SlurmLauncher`), or else on an emulated cluster on
    this machine (:class:`~dmlbench.launch.cluster.ClusterLauncher`); with a
    ``rendezvous`` this process is one node of a multi-node job: it runs
    ``spec.per_node`` workers, and keeps the run in ``store`` if rank 0 ran here;
    otherwise its folder keeps its workers' logs under the same run id and the returned
    outcome is not ``recorded``.

    ``sweep`` tags the run as part of a sweep and ``claim`` makes the run give way
    (``AlreadyClaimed``, before anything starts) to another launcher of the same point
    (see :meth:`ResultsStore.begin`).
    """
    spec.check_threads()  # before the peak probe or a worker runs with them
    chosen_start_method()  # a bad DMLBENCH_START_METHOD is refused before anything runs
    path = launch_path(spec.nodes, rendezvous is not None, slurm)
    LOG.info("launch path: %s", path)
    launcher: Launcher
    if path == "slurm":
        from dmlbench.launch.srun import SlurmLauncher

        assert slurm is not None
        launcher = SlurmLauncher(spec, slurm)
    elif path == "cluster":
        from dmlbench.launch.cluster import ClusterLauncher

        launcher = ClusterLauncher(spec)
    else:
        launcher = LocalLauncher(spec, echo=echo, rendezvous=rendezvous)
    return execute(
        spec.to_json_dict(),
        store,
        launcher,
        deviations=deviations(spec),
        sweep=sweep,
        claim=claim,
        name=rendezvous.run_id if rendezvous else None,
        progress=progress,
    )


class LocalLauncher(Launcher):
    """Workers on this host under torch's elastic agent: the whole run, or with a
    ``rendezvous`` this node's part of a job across hosts."""

    def __init__(
        self, spec: RunSpec, *, echo: bool = True, rendezvous: Rendezvous | None = None
    ) -> None:
        self.spec, self.echo, self.rendezvous = spec, echo, rendezvous
        self.network = spec.network.resolve() if spec.network.enabled else None
        self.placed: list[int] = []
        self.peak_env: dict[str, str] = {}
        self.allocator: dict[str, str] = {}  # the workers' C allocator's preload
        self.run: OpenedRun | None = None
        self.topology: Any = None

    def prepare(self, store: ResultsStore) -> dict[str, Any]:
        spec, rendezvous = self.spec, self.rendezvous
        if rendezvous is not None:
            self.network = None  # real hosts, or nodes of an emulated cluster: shaped outside
            from dmlbench.heartbeat import start_agent_heartbeat

            start_agent_heartbeat(store.root, 0, min(1.0, spec.stall_timeout_s / 4))
            if rendezvous.nodes != spec.nodes:
                raise SpecError(f"--nnodes {rendezvous.nodes} but the spec has nodes={spec.nodes}")
        if self.network:
            preflight(self.network)  # not root, or no way to emulate it: refused first
        check_device(spec.device, spec.per_node)
        prepare_data(spec)
        self.allocator, absent = preload(spec.cpu_allocator)
        if absent:
            LOG.warning("%s", absent)
        peak, self.peak_env = machine_peak(spec)
        return {"peak_flops": peak}

    def start(self, run: OpenedRun, held: contextlib.ExitStack) -> None:
        self.run = run
        self.topology = held.enter_context(
            emulated(self.spec.workers, self.network, record_to=run.run_dir)
        )

    def wait(self, attempt: Attempt) -> None:
        assert self.run is not None
        launch_local(
            self.spec,
            self.run.run_dir,
            echo=self.echo,
            topology=self.topology,
            rendezvous=self.rendezvous,
            placed=self.placed,
            env=self.peak_env,
            allocator=self.allocator,
        )
        attempt.status = ""

    def record(self, store: ResultsStore, run: OpenedRun, attempt: Attempt) -> bool:
        if self.placed and 0 not in self.placed:  # another node held rank 0: it records
            attempt.status = attempt.status or "finished"
            with contextlib.suppress(OSError):
                outcome = {
                    "status": attempt.status,
                    "error": attempt.error,
                    "ranks": self.placed,
                    "recorded": False,
                }
                write_json(run.run_dir / OUTCOME_FILE, outcome)
            store.withdraw(run.run_id)
            return False
        return super().record(store, run, attempt)

    def settled(self, attempt: Attempt, holder: int | None) -> None:
        if self.rendezvous is not None and attempt.error:
            hosts = attempt.summary.hosts or []
            attempt.error = name_lost_node(attempt.error, hosts, self.rendezvous.address())

    def ranks(self) -> tuple[int, ...]:
        return tuple(self.placed)
