"""A task: dataset + model + reference recipe + goal, in one typed definition."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dmlbench.errors import DatasetError
from dmlbench.qualities import imported_task
from dmlbench.spec.recipe import Inputs, Recipe

if TYPE_CHECKING:  # tasks register without torch; their loaders import it
    from dmlbench.data import Dataset

Loss = Literal["cross_entropy", "logistic", "next_token"]


def _nothing_to_prepare(data_dir: Path, download: bool) -> None:
    """Tasks whose data ships with a package need no preparation."""


@dataclass(frozen=True)
class TaskDefinition:
    """The single source of truth for a task; `dmlbench tasks` and the docs read it.

    ``prepare`` runs once in the launching process (find, download, unpack, convert) so
    that a missing or corrupt dataset is one clear error before any worker starts;
    ``load`` runs in every worker and only reads.
    """

    name: str
    summary: str
    dataset: str
    recipe: Recipe
    load: Callable[[Path], Dataset]
    prepare: Callable[[Path, bool], None] = _nothing_to_prepare
    loss: Loss = "cross_entropy"
    metric: str = "top1_accuracy"
    free_choices: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    reference: str = ""
    target_loss: float | None = None
    """A reference's goal in test loss (mlbench's epsilon: 0.2828), drawn in the loss
    figure; the run's goal stays ``recipe.target``."""
    eval_batch: int = 1000
    train_examples: int | None = None
    """Size of the training set, when known without loading it: lets an impossible global
    batch be refused before any worker starts."""
    test_examples: int | None = None
    count: Callable[[Path], tuple[int, int]] | None = None
    """(training, test) examples of the data found under a data folder, cheaply; with
    ``train_examples`` and ``test_examples`` the launcher refuses incomplete data."""
    builtin_for_tests: bool = False
    input_shape: tuple[int, ...] | None = None
    """One example's shape (an image's, or a sequence's tokens): with it,
    ``synthetic_data=true`` runs the task's model on random inputs of that shape (DLBS's
    throughput mode)."""
    num_outputs: int | None = None
    inputs: Inputs | None = None
    """What one example is: flat ``features``, an ``image`` (C×H×W) or ``tokens``; None
    where the task does not say (a plugin's), else read from its loss and input shape.
    A model that does not take them is refused before any worker starts."""
    augmentation: str = "pad 4 + random 32×32 crop, horizontal flip"
    """What ``recipe.augment`` does to this task's images, in words (``dmlbench tasks``)."""
    mlperf_benchmark: str | None = None
    """MLPerf Training's name of this benchmark (``resnet``), where the task is one of its
    benchmarks; a run's log names it as ``submission_benchmark`` (else the task's name)."""

    @property
    def published_runs(self) -> str | None:
        """The task name `results --import-mlperf` gives its benchmark's published runs
        (``mlperf/resnet``), where it is one of MLPerf's."""
        return imported_task(self.mlperf_benchmark) if self.mlperf_benchmark else None

    def example_inputs(self) -> Inputs | None:
        """What one example is (:attr:`inputs`): said, or read from the loss (tokens)
        and the input shape (an image's three dimensions); None where neither says."""
        if self.inputs is not None:
            return self.inputs
        if self.loss == "next_token":
            return "tokens"
        return "image" if self.input_shape is not None and len(self.input_shape) == 3 else None

    def read(self, data_dir: Path) -> Dataset:
        """``load``'s dataset, checked: a plugin's loader that returns something else
        is named in one line, not met as a missing attribute deep in the trainer."""
        from dmlbench.data import Dataset

        data = self.load(data_dir)
        if not isinstance(data, Dataset):
            raise DatasetError(
                f"task {self.name}: its load returned {type(data).__name__}, not a "
                "dmlbench.data.Dataset (train_x, train_y, test_x, test_y, num_outputs)"
            )
        return data

    def synthetic(self) -> Dataset:
        """The task's shapes and counts, no images: see ``synthetic_data``."""
        from dmlbench.data import Dataset

        if self.input_shape is None or self.num_outputs is None:
            raise DatasetError(
                f"{self.name} declares no input shape: synthetic_data needs an image or "
                "language-model task"
            )
        return Dataset.synthetic(
            self.input_shape,
            self.num_outputs,
            self.train_examples or 50_000,
            self.test_examples or 10_000,
            tokens=self.loss == "next_token",
        )

    def check_examples(self, train: int, test: int, data_dir: Path) -> None:
        """Refuse data whose example counts are not the official ones (incomplete, or
        not the official files): such a run would be stored as if it were."""
        expected = (self.train_examples, self.test_examples)
        if None in expected or (train, test) == expected:
            return
        raise DatasetError(
            f"{self.name}: the data under {data_dir} holds {train:,} training and {test:,} "
            f"test examples, the official set {expected[0]:,} and {expected[1]:,}: restore "
            "it, or pass --set partial_data=true for an open-division run on this data"
        )

    def describe(self) -> dict[str, Any]:
        """JSON-ready description used by `dmlbench tasks --json` and the docs."""
        return {
            "name": self.name,
            "summary": self.summary,
            "dataset": self.dataset,
            "metric": self.metric,
            "target": self.recipe.target,
            "target_loss": self.target_loss,
            "loss": self.loss,
            "inputs": self.example_inputs(),
            "reference": self.reference,
            "free_choices": {k: list(v) for k, v in self.free_choices.items()},
            "recipe": self.recipe.model_dump(mode="json"),
        }
