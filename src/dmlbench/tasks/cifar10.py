"""Task 1a: CIFAR-10 image classification with ResNet (mlbench's reference recipe)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlbench.data import cifar10
from dmlbench.spec.recipe import (
    ModelSpec,
    OptimizerSpec,
    Recipe,
    ScaledSchedule,
    WarmupStepSchedule,
)
from dmlbench.tasks.base import TaskDefinition
from dmlbench.tasks.registry import register_task

if TYPE_CHECKING:
    from dmlbench.data import Dataset

DEPTHS = (20, 32, 44, 56)


def load_cifar10(data_dir: Path) -> Dataset:
    from dmlbench.data import Dataset, Preprocess
    from dmlbench.data.augment import ChannelNormalize

    (train_x, train_y), (test_x, test_y) = cifar10.load(data_dir)
    normalize = ChannelNormalize(cifar10.MEAN, cifar10.STD)
    return Dataset(
        train_x,
        train_y,
        test_x,
        test_y,
        num_outputs=cifar10.NUM_CLASSES,
        augment=Preprocess(normalize, crop_padding=4, flip=True),
        plain=Preprocess(normalize),
    )


def prepare_cifar10(data_dir: Path, download: bool) -> None:
    cifar10.locate(data_dir, download_missing=download)


def cifar10_recipe(depth: int) -> Recipe:
    return Recipe(
        model=ModelSpec(name="resnet", options={"depth": depth, "variant": "m1"}),
        local_batch=32,
        max_epochs=164,
        optimizer=OptimizerSpec(momentum=0.9, nesterov=True, weight_decay=1e-4),
        schedule=WarmupStepSchedule(
            lr_per_sample=0.1 / 256, warmup_epochs=5, milestones=[82, 109], gamma=0.1
        ),
        augment=True,
        target=0.80,
        time_budget_s=2 * 3600,
    )


# What every CIFAR-10 task shares: the data, how it is read, fetched and counted.
CIFAR10_DATA: dict[str, Any] = {
    "dataset": "CIFAR-10, 50,000 train / 10,000 test, 32×32 RGB, 10 classes",
    "load": load_cifar10,
    "prepare": prepare_cifar10,
    "eval_batch": 500,
    "train_examples": cifar10.TRAIN_EXAMPLES,
    "test_examples": cifar10.TEST_EXAMPLES,
    "count": cifar10.count,
    "input_shape": (3, 32, 32),
    "num_outputs": cifar10.NUM_CLASSES,
}

for _depth in DEPTHS:
    register_task(
        TaskDefinition(
            name=f"cifar10-resnet{_depth}",
            summary=f"ResNet-{_depth} on CIFAR-10 to 80% top-1, synchronous SGD",
            recipe=cifar10_recipe(_depth),
            free_choices={"recipe.model.options.variant": ("m1", "m2")},
            reference="mlbench task 1a; He et al. 2015 (m1) and 2016 (m2); Goyal et al. 2017",
            **CIFAR10_DATA,
        )
    )


def wrn_recipe() -> Recipe:
    """The adadamp paper's recipe (Sievert et al.): WRN-16-4, Nesterov 0.9, weight decay
    5e-4, rate 0.05 at batch 128, ×0.2 at epochs 60, 120 and 180, 200 epochs. Its batch
    schedules (dmlbench.dask.dampers) grow the batch at those epochs instead."""
    return Recipe(
        model=ModelSpec(name="wide-resnet", options={"depth": 16, "widen": 4, "dropout": 0.3}),
        local_batch=128,
        max_epochs=200,
        optimizer=OptimizerSpec(momentum=0.9, nesterov=True, weight_decay=5e-4),
        schedule=ScaledSchedule(
            base_lr=0.05, scaling="none", decay="step", milestones=[60, 120, 180], gamma=0.2
        ),
        augment=True,
        target=0.90,
    )


register_task(
    TaskDefinition(
        name="cifar10-wrn16-4",
        summary="WRN-16-4 on CIFAR-10, the adadamp paper's recipe (not an mlbench task; "
        "the paper sets no target: 90% here)",
        recipe=wrn_recipe(),
        reference="Sievert et al., adadamp (WRN-16-4); Zagoruyko & Komodakis 2016",
        **CIFAR10_DATA,
    )
)
