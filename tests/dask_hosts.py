"""Dask across emulated hosts: ``dask scheduler`` and each ``dask worker`` in a network
namespace of its own, joined through a bridge shaped as a network profile (root only).

    root namespace: this process (the client), on the bridge (10.X.255.254)
      ├── namespace n0 (10.X.0.1): dask scheduler, listening there
      ├── namespace n1 (10.X.0.2): dask worker
      └── ...

The same commands a user runs on separate machines; nothing listens on loopback of the
root namespace. ``add_worker`` starts one more worker in a spare namespace and returns
how long it took to join.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from distributed import Client

from dmlbench.netem.namespaces import enter_namespace
from dmlbench.netem.profiles import ResolvedNetwork
from dmlbench.netem.topology import Topology
from dmlbench.system import die_with_parent

PORT = 8786
READY_S = 60.0


@dataclass
class DaskHosts:
    topology: Topology
    log: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    used: int = 1  # namespaces taken: the scheduler's and the workers'

    @property
    def address(self) -> str:
        return f"tcp://{self.topology.address(0)}:{PORT}"

    def _start(self, index: int, command: list[str]) -> None:
        here, namespace = os.getpid(), self.topology.namespaces[index]

        def in_host() -> None:
            die_with_parent(here)
            enter_namespace(namespace)

        with self.log.open("ab") as out:
            self.processes.append(
                subprocess.Popen(command, stdout=out, stderr=out, preexec_fn=in_host)
            )

    def start_worker(self) -> None:
        index = self.used
        if index >= len(self.topology.namespaces):
            raise RuntimeError("no spare namespace for another worker")
        self.used += 1
        host = self.topology.address(index)
        self._start(
            index,
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                self.address,
                "--host",
                host,
                "--nthreads",
                "1",
                "--nworkers",
                "1",
                "--no-dashboard",
                "--name",
                f"host{index}",
            ],
        )

    def add_worker(self, client: Client) -> float:
        """Start one more worker; seconds until the scheduler counts it."""
        have = len(client.scheduler_info(n_workers=-1)["workers"])
        start = time.perf_counter()
        self.start_worker()
        client.wait_for_workers(have + 1, timeout=READY_S)
        return time.perf_counter() - start


@contextlib.contextmanager
def dask_hosts(
    workers: int, network: ResolvedNetwork, spare: int = 0, log: Path | None = None
) -> Iterator[DaskHosts]:
    """A scheduler host and ``workers`` worker hosts (and ``spare`` empty ones for
    :meth:`DaskHosts.add_worker`); everything stops on exit."""
    with Topology(1 + workers + spare, network) as topology:
        hosts = DaskHosts(topology, log or Path(os.devnull))
        try:
            hosts._start(
                0,
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_scheduler",
                    "--host",
                    topology.address(0),
                    "--port",
                    str(PORT),
                    "--no-dashboard",
                ],
            )
            for _ in range(workers):
                hosts.start_worker()
            with Client(hosts.address, timeout=READY_S) as client:
                client.wait_for_workers(workers, timeout=READY_S)
            yield hosts
        finally:
            for process in reversed(hosts.processes):
                if process.poll() is None:
                    process.terminate()
            for process in hosts.processes:
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
