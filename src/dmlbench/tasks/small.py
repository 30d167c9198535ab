"""Small tasks on data that ships with dmlbench's dependencies (no download).

``digits-mlp`` is the built-in default: real data (scikit-learn's 1,797 handwritten
8×8 digits), a full time-to-accuracy run in well under a minute. The ``synthetic-*``
tasks exist for tests and quick checks of code paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dmlbench.spec.recipe import ModelSpec, OptimizerSpec, Recipe, WarmupStepSchedule
from dmlbench.tasks.base import TaskDefinition
from dmlbench.tasks.epsilon import epsilon_recipe
from dmlbench.tasks.registry import register_task

if TYPE_CHECKING:
    import torch

    from dmlbench.data import Dataset

DATA_SEED = 20_240_601  # fixed: the data never depends on the run's seed


def load_digits_split(data_dir: Path) -> Dataset:
    """scikit-learn's digits, 80/20 stratified split with a fixed seed, pixels scaled to [0, 1]."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from dmlbench.data import Dataset

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        (x / 16.0).astype(np.float32), y, test_size=0.2, random_state=0, stratify=y
    )
    return Dataset(
        torch.from_numpy(x_train),
        torch.from_numpy(y_train.astype(np.int64)),
        torch.from_numpy(x_test),
        torch.from_numpy(y_test.astype(np.int64)),
        num_outputs=10,
    )


def _blobs(n: int, features: int, classes: int, generator: torch.Generator) -> tuple:
    import torch

    centers = torch.randn(classes, features, generator=torch.Generator().manual_seed(DATA_SEED))
    labels = torch.randint(0, classes, (n,), generator=generator)
    x = centers[labels] * 1.5 + torch.randn(n, features, generator=generator)
    return x, labels


def load_synthetic_classification(data_dir: Path) -> Dataset:
    """Gaussian blobs: 8 classes in 32 dimensions, 2,048 train and 512 test examples."""
    import torch

    from dmlbench.data import Dataset

    generator = torch.Generator().manual_seed(DATA_SEED + 1)
    train_x, train_y = _blobs(2048, 32, 8, generator)
    test_x, test_y = _blobs(512, 32, 8, generator)
    return Dataset(train_x, train_y, test_x, test_y, num_outputs=8)


def load_synthetic_binary(data_dir: Path) -> Dataset:
    """epsilon's shape in miniature: unit-norm rows, ±1 labels from a noisy linear teacher."""
    import torch

    from dmlbench.data import Dataset

    generator = torch.Generator().manual_seed(DATA_SEED + 2)
    teacher = torch.randn(64, generator=generator)

    def sample(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, 64, generator=generator)
        x = x / x.norm(dim=1, keepdim=True)
        noise = 0.05 * torch.randn(n, generator=generator)
        return x, torch.where(x @ teacher + noise >= 0, 1.0, -1.0)

    (train_x, train_y), (test_x, test_y) = sample(4000), sample(1000)
    return Dataset(train_x, train_y, test_x, test_y, num_outputs=1)


register_task(
    TaskDefinition(
        name="digits-mlp",
        summary="MLP on scikit-learn's handwritten digits to 97% test accuracy (the default)",
        dataset="digits (scikit-learn, bundled), 1,437 train / 360 test, 8×8 grey, 10 classes",
        inputs="features",
        recipe=Recipe(
            model=ModelSpec(name="mlp", options={"hidden": [128]}),
            local_batch=32,
            max_epochs=40,
            optimizer=OptimizerSpec(momentum=0.9, nesterov=True, weight_decay=1e-4),
            schedule=WarmupStepSchedule(lr_per_sample=0.05 / 32, warmup_epochs=2),
            target=0.97,
        ),
        load=load_digits_split,
        reference="dmlbench's own; target set from repeated runs (see BENCHMARKS.md)",
        eval_batch=512,
        train_examples=1437,
        test_examples=360,
    )
)

register_task(
    TaskDefinition(
        name="synthetic-mlp",
        summary="Gaussian blobs, small MLP: for tests and quick checks",
        dataset="synthetic, 2,048 train / 512 test, 32 features, 8 classes",
        inputs="features",
        recipe=Recipe(
            model=ModelSpec(name="mlp", options={"hidden": [64]}),
            local_batch=16,
            max_epochs=10,
            optimizer=OptimizerSpec(momentum=0.9),
            schedule=WarmupStepSchedule(lr_per_sample=0.05 / 16),
            target=0.95,
        ),
        load=load_synthetic_classification,
        train_examples=2048,
        builtin_for_tests=True,
    )
)

register_task(
    TaskDefinition(
        name="synthetic-logreg",
        summary="epsilon-logreg's recipe on a small synthetic binary problem",
        dataset="synthetic, 4,000 train / 1,000 test, 64 unit-norm features, labels ±1",
        inputs="features",
        recipe=epsilon_recipe(max_epochs=5, target=0.9),
        load=load_synthetic_binary,
        loss="logistic",
        train_examples=4000,
        builtin_for_tests=True,
    )
)
