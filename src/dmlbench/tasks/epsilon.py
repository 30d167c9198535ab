"""Task 2a: L2-regularised logistic regression on epsilon (mlbench's linear task)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dmlbench.data.download import download as fetch
from dmlbench.data.libsvm import load_libsvm
from dmlbench.errors import DatasetError
from dmlbench.spec.recipe import InverseSqrtSchedule, ModelSpec, Recipe
from dmlbench.tasks.base import TaskDefinition
from dmlbench.tasks.registry import register_task

if TYPE_CHECKING:
    from dmlbench.data import Dataset

BASE_URL = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/"
FILES = {
    # name: (sha256 of the .bz2, examples)
    "epsilon_normalized": (
        "aff916d4f97f18d286558ca088d2a9f7e1fcee9376539a5aa6ef5b7ef9dfa978",
        400_000,
    ),
    "epsilon_normalized.t": (
        "cb299295ad11e200696eaa3050f5d8cf700eaa9c65e6aa859bda959f8669458b",
        100_000,
    ),
}
FEATURES = 2000
LABELS = (-1.0, 1.0)  # the logistic loss assumes ±1


def _find(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.bz2"):
        if candidate.is_file():
            return candidate
    return None


def _folder(data_dir: Path) -> Path:
    return data_dir / "epsilon"


def prepare_epsilon(data_dir: Path, download: bool) -> None:
    """Find or download both files, then convert them once (workers only memory-map)."""
    folder = _folder(data_dir)
    for name, (sha256, rows) in FILES.items():
        path = _find(folder, name)
        if path is None and not download:
            raise DatasetError(
                f"epsilon file {name}(.bz2) not found in {folder}; put it there and pass "
                "--data-dir FOLDER (FOLDER/epsilon/ holds the files)"
            )
        if path is None:
            path = fetch(f"{BASE_URL}{name}.bz2", folder / f"{name}.bz2", checksum=sha256)
        x, _ = load_libsvm(path, FEATURES, LABELS)
        if len(x) != rows:
            raise DatasetError(
                f"{path} has {len(x):,} examples, epsilon's has {rows:,}: the file is "
                "truncated; delete it and download it again"
            )


def load_epsilon(data_dir: Path) -> Dataset:
    import torch

    from dmlbench.data import Dataset

    folder = _folder(data_dir)
    arrays = []
    for name in FILES:
        path = _find(folder, name)
        if path is None:
            raise DatasetError(f"epsilon file {name} not found in {folder}")
        arrays.append(load_libsvm(path, FEATURES, LABELS))
    (train_x, train_y), (test_x, test_y) = arrays
    return Dataset(
        torch.from_numpy(train_x),
        torch.from_numpy(train_y),
        torch.from_numpy(test_x),
        torch.from_numpy(test_y),
        num_outputs=1,
    )


def epsilon_recipe(max_epochs: float = 10, target: float = 0.89) -> Recipe:
    return Recipe(
        model=ModelSpec(name="linear", options={"zero_init": True}),
        local_batch=100,
        max_epochs=max_epochs,
        schedule=InverseSqrtSchedule(
            alpha_by_workers={1: 200.0, 2: 400.0, 4: 600.0, 8: 700.0, 16: 800.0}
        ),
        l2=2.5e-6,
        target=target,
    )


register_task(
    TaskDefinition(
        name="epsilon-logreg",
        summary="L2-regularised logistic regression on epsilon to 89% test accuracy",
        dataset="epsilon (PASCAL 2008), 400,000 train / 100,000 test, 2,000 dense features",
        inputs="features",
        recipe=epsilon_recipe(),
        load=load_epsilon,
        prepare=prepare_epsilon,
        loss="logistic",
        reference="mlbench task 2a (reference target loss 0.2828); max_epochs is dmlbench's",
        target_loss=0.2828,
        eval_batch=10_000,
        train_examples=FILES["epsilon_normalized"][1],
        test_examples=FILES["epsilon_normalized.t"][1],
    )
)
