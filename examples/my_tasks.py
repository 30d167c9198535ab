"""A user's own task, registered from outside dmlbench. Its recipe is its own reference:
a run that keeps it is closed division, one that changes it (``--set``) open.

    PYTHONPATH=examples dmlbench run breast-cancer-logreg --plugin my_tasks --workers 2

The module is imported by the launcher and by every worker, so it must be importable
from both (PYTHONPATH, or an installed package exposing a ``dmlbench.tasks`` entry point).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dmlbench.data import Dataset
from dmlbench.spec import ModelSpec, OptimizerSpec, Recipe, WarmupStepSchedule
from dmlbench.tasks import TaskDefinition, register_task


def load_breast_cancer_split(data_dir: Path) -> Dataset:
    """scikit-learn's bundled breast cancer data, standardised, labels ±1, 75/25 split."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_breast_cancer(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=0, stratify=y
    )
    scaler = StandardScaler().fit(x_train)  # statistics of the training split only

    def tensors(features: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x = scaler.transform(features).astype(np.float32)
        signs = np.where(labels == 1, 1.0, -1.0).astype(np.float32)
        return torch.from_numpy(x), torch.from_numpy(signs)

    (train_x, train_y), (test_x, test_y) = tensors(x_train, y_train), tensors(x_test, y_test)
    return Dataset(train_x, train_y, test_x, test_y, num_outputs=1)


register_task(
    TaskDefinition(
        name="breast-cancer-logreg",
        summary="L2-regularised logistic regression on scikit-learn's breast cancer data",
        dataset="breast cancer (scikit-learn, bundled), 426 train / 143 test, 30 features",
        inputs="features",  # what an example is: a model that takes none is refused
        recipe=Recipe(
            model=ModelSpec(name="linear"),
            local_batch=16,
            max_epochs=30,
            optimizer=OptimizerSpec(momentum=0.9),
            schedule=WarmupStepSchedule(lr_per_sample=0.05 / 16),
            l2=1e-3,
            target=0.95,
        ),
        load=load_breast_cancer_split,
        loss="logistic",
        reference="example plugin in examples/my_tasks.py",
    )
)
