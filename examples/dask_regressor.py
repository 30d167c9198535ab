"""The Dask estimator end to end: a regressor whose batch grows with GeoDamp, on a
LocalCluster that dmlbench starts (loopback only) and grows with the batch.

    .venv/bin/python examples/dask_regressor.py
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import make_regression
from sklearn.model_selection import train_test_split
from torch import nn

from dmlbench.dask import DaskRegressor
from dmlbench.dask.dampers import GeoDamp


class HiddenLayer(nn.Module):
    def __init__(self, features: int = 10, hidden: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


if __name__ == "__main__":  # Dask starts worker processes: keep the work under main
    X, y = make_regression(n_samples=4000, n_features=10, noise=5.0, random_state=0)
    y = (y - y.mean()) / y.std()
    X_train, X_test, y_train, y_test = train_test_split(X.astype(np.float32), y, random_state=0)
    est = DaskRegressor(
        module=HiddenLayer,
        module__features=10,
        optimizer=torch.optim.Adadelta,
        optimizer__weight_decay=1e-7,
        max_epochs=10,
        max_workers=2,
        grads_per_worker=64,
        random_state=0,
        verbose=1,
    )
    est.set_params(batch_size=GeoDamp, batch_size__delay=3, batch_size__factor=2)
    est.fit(X_train, y_train)
    print(f"test R²: {est.score(X_test, y_test):.3f}")
    # target_workers: what the cluster was asked for; workers: those that computed the
    # gradients (a worker asked for joins once its process has started: seconds)
    print(
        est.history_.frame("epochs")[
            [
                "epoch",
                "n_updates",
                "batch_size",
                "target_workers",
                "workers",
                "train_loss",
                "wall_s",
            ]
        ].to_string(index=False)
    )
