"""Nothing dmlbench starts listens beyond loopback: checked with `ss` and attacked from
another network namespace (a second host on this machine), as an outsider would."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import DMLBENCH, Outsider, command_line, needs_root, process_tree, wait_for_evaluation


def listeners(pids: set[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every listening TCP socket the processes ``pids`` hold."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        address, _, port = fields[3].rpartition(":")
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.append((address.strip("[]"), int(port), pid))
    return found


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


@needs_root
@pytest.mark.multiprocess
def test_a_run_listens_on_loopback_only(outsider: Outsider, tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [
            *DMLBENCH,
            "run",
            "synthetic-mlp",
            "--workers",
            "2",
            "--quiet",
            "--store",
            str(store),
            "--set",
            "max_epochs=100000",
            "--set",
            "stop_at_target=false",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_evaluation(proc, store)
        tree = process_tree(proc.pid)
        found = listeners(tree)
        # the launcher's two c10d stores and each worker's gloo pairs, all on loopback
        assert len({pid for _, _, pid in found}) >= 3, found
        assert [f for f in found if not is_loopback(f[0])] == []
        # and an outsider holding a TCPStore client gets nowhere
        assert outsider.reachable(sorted({port for _, port, _ in found})) == []
    finally:
        proc.kill()
        proc.communicate(timeout=30)


@needs_root
@pytest.mark.multiprocess
def test_dask_ddp_fit_listens_on_loopback_only(outsider: Outsider) -> None:
    """Dask's scheduler, nannies and workers, and the DDP engine's store and gloo pairs."""
    pytest.importorskip("distributed")
    import numpy as np
    from distributed import Client, LocalCluster

    from dmlbench.dask import DaskClassifier
    from dmlbench.models.mlp import MLP

    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    seen: set[tuple[str, int, int]] = set()
    reached: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # probe each new listener while it exists
        while not stop.wait(0.1):
            new = set(listeners(process_tree(os.getpid()))) - seen
            seen.update(new)
            if new:
                reached.extend(outsider.reachable(sorted({port for _, port, _ in new})))

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        est = DaskClassifier(
            MLP,
            module__in_features=8,
            module__hidden=[16],
            module__num_outputs=2,
            client=client,
            engine="ddp",
            batch_size=32,
            max_epochs=20,
            min_workers=2,
            max_workers=2,
        )
        est.fit(x, y)
        stop.set()
        watcher.join()
    workers = {pid for _, _, pid in seen if pid != os.getpid()}
    assert len(workers) >= 2 and len(seen) >= 6, seen  # workers, nannies, stores, gloo
    assert [f for f in seen if not is_loopback(f[0])] == []
    assert reached == []


@needs_root
@pytest.mark.multiprocess
def test_mpi_listens_nowhere_an_outsider_can_reach(outsider: Outsider, tmp_path: Path) -> None:
    """Open MPI's runtime and transport listen on every interface of the namespace they
    run in, so they run in one of their own: nothing of theirs is visible here."""
    pytest.importorskip("mpi4py")
    proc = subprocess.Popen(
        [
            *DMLBENCH,
            "bench",
            "allreduce",
            "--backend",
            "mpi",
            "--workers",
            "2",
            "--max-bytes",
            str(2**24),
            "--repeats",
            "40",
            "--store",
            str(tmp_path / "s"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: set[tuple[str, int, int]] = set()
    saw_mpirun = False
    while proc.poll() is None:
        tree = process_tree(proc.pid)
        saw_mpirun |= any("prterun" in command_line(p) or "mpirun" in command_line(p) for p in tree)
        seen.update(listeners(tree))
        time.sleep(0.1)
    assert proc.returncode == 0, proc.communicate()[1]
    assert saw_mpirun
    assert [f for f in seen if not is_loopback(f[0])] == []
    assert outsider.reachable(sorted({port for _, port, _ in seen})) == []
