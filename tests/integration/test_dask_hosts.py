"""The Dask estimator across emulated hosts (root): `dask scheduler` and each `dask
worker` in a network namespace of its own, over a shaped link, as on separate machines.
(On a dask-jobqueue SLURMCluster: tests/integration/test_slurm.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from dask_hosts import dask_hosts
from distributed import Client
from helpers import root_only
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from dmlbench.dask import DaskClassifier
from dmlbench.models.mlp import MLP
from dmlbench.netem.profiles import NetworkSpec

MLP_ARGS = {"module__in_features": 64, "module__hidden": [32], "module__num_outputs": 10}


@root_only
@pytest.mark.slow
def test_the_estimator_trains_on_workers_on_other_hosts() -> None:
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        (x / 16).astype(np.float32), y, test_size=0.25, random_state=0
    )
    link = NetworkSpec(bandwidth="1gbit").resolve()
    with dask_hosts(2, link, spare=1) as hosts:
        est = DaskClassifier(
            MLP,
            **MLP_ARGS,
            optimizer__lr=0.3,
            max_epochs=2,
            random_state=0,
            min_workers=2,
            max_workers=2,
            client=hosts.address,
        )
        est.fit(x_train, y_train)
        assert est.score(x_test, y_test) > 0.7
        assert max(u["workers"] for u in est.history_.update_records()) == 2
        with Client(hosts.address, timeout=30) as client:
            before = set(client.scheduler_info(n_workers=-1)["workers"])
            assert hosts.add_worker(client) < 60
            joined = set(client.scheduler_info(n_workers=-1)["workers"]) - before
        # every worker listens on its own host's address, none on loopback
        assert [a.split("//")[1].split(":")[0] for a in joined] == [hosts.topology.address(3)]
        assert all("127.0.0.1" not in a for a in before | joined)
