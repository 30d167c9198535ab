"""The Dask estimator on three clusters side by side (root; Slurm from Debian's packages):

- ``local``: a ``LocalCluster`` of worker processes on loopback;
- ``hosts``: ``dask scheduler`` and each ``dask worker`` in a network namespace of its
  own (``tests/dask_hosts.py``), over links shaped to ``--bandwidth``;
- ``slurm``: dask-jobqueue's ``SLURMCluster`` on the test Slurm (``tests/slurm_cluster.py``),
  each worker a Slurm job on an emulated host, the scheduler in this process.

For each: the **per-update overhead** of the centralised engine (driver wall clock minus
the slowest task's compute, the median over an epoch of updates after one untimed
epoch; MLP on digits, batch 64 as two tasks of 32 on two workers), and the **time for a
new worker to join** (asked for, to counted by the scheduler; the median of
``--joins``).

    python benchmarks/dask_hosts.py --json benchmarks/results/dask/hosts.json
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from summary import run_main, write_summary

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
import slurm_cluster
from distributed import Client, LocalCluster
from sklearn.datasets import load_digits

from dmlbench.dask import DaskClassifier
from dmlbench.models.mlp import MLP
from dmlbench.netem.profiles import NetworkSpec


def overhead_ms(client: Client, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    est = DaskClassifier(
        MLP,
        module__in_features=64,
        module__hidden=[128],
        module__num_outputs=10,
        optimizer__lr=0.1,
        batch_size=64,
        grads_per_worker=32,
        min_workers=2,
        max_workers=2,
        client=client,
        random_state=0,
    )
    est.partial_fit(x, y)  # untimed: connections, imports, the data's first trip
    est.partial_fit(x, y)
    updates = est.history_[-1]["updates"]
    est._close_engine()
    return {
        "update_ms": statistics.median(u["wall_s"] for u in updates) * 1e3,
        "overhead_ms": statistics.median(u["wall_s"] - u["compute_s"] for u in updates) * 1e3,
        "updates": len(updates),
    }


def joins(add: Callable[[], float], count: int) -> list[float]:
    return [add() for _ in range(count)]


def scaled_join(client: Client, cluster: Any) -> float:
    have = len(client.scheduler_info(n_workers=-1)["workers"])
    start = time.perf_counter()
    cluster.scale(have + 1)
    client.wait_for_workers(have + 1, timeout=180)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bandwidth", default="1gbit")
    parser.add_argument("--joins", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if os.geteuid() != 0 or slurm_cluster.missing():
        sys.exit(slurm_cluster.missing() or "needs root")
    from dask_jobqueue import SLURMCluster

    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype(np.float32)
    results: dict[str, dict[str, Any]] = {}

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as local,
        Client(local) as client,
    ):
        results["local"] = overhead_ms(client, x, y)
        results["local"]["join_s"] = joins(lambda: scaled_join(client, local), args.joins)

    link = NetworkSpec(bandwidth=args.bandwidth).resolve()
    hosts_helper = importlib.import_module("dask_hosts")  # tests/dask_hosts.py: this script's name
    with (
        hosts_helper.dask_hosts(2, link, spare=args.joins) as hosts,
        Client(hosts.address) as client,
    ):
        results["hosts"] = overhead_ms(client, x, y)
        results["hosts"]["join_s"] = joins(lambda: hosts.add_worker(client), args.joins)

    with (
        tempfile.TemporaryDirectory() as folder,
        slurm_cluster.slurm_cluster(Path(folder) / "slurm") as slurm,
    ):
        os.environ["SLURM_CONF"] = str(slurm.conf)
        cluster = SLURMCluster(
            cores=1,
            processes=1,
            memory="1GB",
            walltime="00:30:00",
            python=sys.executable,
            job_directives_skip=["--mem"],
            death_timeout=60,
            scheduler_options={"host": slurm.control, "dashboard": False},
            log_directory=str(Path(folder) / "logs"),
        )
        with cluster, Client(cluster) as client:
            first = joins(lambda: scaled_join(client, cluster), 2)  # the two the fit uses
            results["slurm"] = overhead_ms(client, x, y)
            results["slurm"]["join_s"] = first + joins(
                lambda: scaled_join(client, cluster), max(0, args.joins - 2)
            )

    base = results["local"]
    print(
        f"| cluster | per update | overhead | vs local | new worker joins (median of "
        f"{args.joins}) |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, row in results.items():
        row["join_median_s"] = statistics.median(row["join_s"])
        print(
            f"| {name} | {row['update_ms']:.1f} ms | {row['overhead_ms']:.1f} ms | "
            f"{row['overhead_ms'] / base['overhead_ms']:.2f}× | {row['join_median_s']:.2f} s |"
        )
    if args.json:
        write_summary(args.json, {"bandwidth": args.bandwidth, **results})
    return 0


if __name__ == "__main__":
    run_main(main)
