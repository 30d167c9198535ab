"""One communication micro-benchmark end to end: record, launch, read back, store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlbench.comm.bench import RESULTS_FILE, comm_bench_worker
from dmlbench.errors import WorkerFailed
from dmlbench.launch.local import launch_workers
from dmlbench.launch.run import new_run_id
from dmlbench.netem.topology import NetworkError, Topology
from dmlbench.results import ResultsStore
from dmlbench.results.environment import collect_environment
from dmlbench.spec.bench import CommBenchSpec


@dataclass(frozen=True)
class CommOutcome:
    run_id: str
    status: str
    rows: list[dict[str, Any]]
    error: str | None


def _launch_mpi(spec: CommBenchSpec, spec_json: str, run_dir: Path) -> None:
    """``mpirun`` the MPI version on loopback, TCP transport only; its output to a log."""
    from dmlbench.comm.mpi_bench import mpirun_path

    mpirun = mpirun_path()
    assert mpirun is not None  # validate_bench checked
    command = [mpirun, "-np", str(spec.workers), "--oversubscribe", "--mca", "pml", "ob1",
               "--mca", "btl", "tcp,self",
               "--mca", "btl_tcp_if_include", "lo", "--bind-to", "none"]  # fmt: skip
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    command += [sys.executable, "-m", "dmlbench.comm.mpi_bench", spec_json, str(run_dir)]
    log = run_dir / "logs" / "mpirun.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
    if done.returncode != 0:
        lines = [ln for ln in log.read_text().splitlines() if ln.strip() and "---" not in ln]
        last = lines[-1].strip() if lines else f"exit code {done.returncode}"
        raise WorkerFailed(f"mpirun failed: {last} (see {log})")


def run_comm_bench(spec: CommBenchSpec, store: ResultsStore, *, echo: bool = False) -> CommOutcome:
    """Run ``spec`` once and store it; a failed or interrupted benchmark is stored too."""
    run_id = new_run_id()
    run_dir = store.run_dir(run_id)
    run_dir.mkdir(parents=True)
    spec_dict = spec.to_json_dict()
    (run_dir / "spec.json").write_text(json.dumps(spec_dict, indent=2))
    network = spec.network.resolve() if spec.network.enabled else None
    label = network.describe() if network else "none"
    store.begin_comm(run_id, {**spec_dict, "network_label": label}, collect_environment())
    status, error, rows = "failed", None, []
    try:
        if spec.backend == "mpi":
            _launch_mpi(spec, json.dumps(spec_dict), run_dir)
        else:
            emulated = Topology(spec.workers, network, record_to=run_dir) if network else None
            with emulated or nullcontext() as topology:
                launch_workers(comm_bench_worker, (json.dumps(spec_dict), str(run_dir)),
                               workers=spec.workers, run_dir=run_dir, echo=echo,
                               topology=topology)  # fmt: skip
        results = run_dir / RESULTS_FILE
        if results.is_file():
            rows, status = json.loads(results.read_text()), "success"
        else:
            error = "workers exited without writing results"
    except (WorkerFailed, NetworkError) as failure:
        error = str(failure)
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user"
        raise
    finally:
        store.finish_comm(run_id, status=status, rows=rows, error=error)
    return CommOutcome(run_id, status, rows, error)
