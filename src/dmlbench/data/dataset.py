"""The in-memory form every task's data takes before training."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from dmlbench.data.augment import ChannelNormalize, random_crop_flip
from dmlbench.data.images import ImageFiles

HOLD_OUT_SEED = 0  # the validation split's draw: one for every run, whatever its seed


@dataclass(frozen=True)
class Preprocess:
    """Turns a gathered batch into model input, on the worker's device.

    Images stay uint8 until here (4× less memory traffic than float); augmentation runs
    batched on the uint8 tensor and normalisation fuses the cast.
    """

    normalize: ChannelNormalize | None = None
    crop_padding: int = 0
    flip: bool = False
    ids: bool = False  # token ids: passed as they are

    def train(self, x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        if self.crop_padding or self.flip:
            x = random_crop_flip(x, self.crop_padding, self.flip, generator)
        return self.eval(x)

    def eval(self, x: torch.Tensor) -> torch.Tensor:
        if self.ids:
            return x
        if self.normalize is not None:
            return self.normalize(x)
        return x if x.is_floating_point() else x.float()


@dataclass(frozen=True)
class Shapes:
    """Stands where a split's images would be when none are read (synthetic data): a
    count and an example's shape; indexing gives the subset's."""

    count: int
    item: tuple[int, ...]

    def __len__(self) -> int:
        return self.count

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.count, *self.item)

    def __getitem__(self, index: Any) -> Shapes:
        return Shapes(len(torch.arange(self.count)[index].reshape(-1)), self.item)


# A split's examples: in memory, as files decoded when a batch is taken, or, with
# synthetic data, only their count and shape.
Examples = torch.Tensor | ImageFiles | Shapes


@dataclass(frozen=True)
class Dataset:
    """Train and test tensors plus what the model needs to know about them.

    ``train_y`` holds class ids (int64) for multi-class tasks, or ±1 floats for binary
    tasks with one output (logistic regression).
    """

    train_x: Examples
    train_y: torch.Tensor
    test_x: Examples
    test_y: torch.Tensor
    num_outputs: int
    augment: Preprocess = Preprocess()  # training batches when the recipe augments
    plain: Preprocess = Preprocess()  # evaluation, and training without augmentation

    def __post_init__(self) -> None:
        if len(self.train_x) != len(self.train_y) or len(self.test_x) != len(self.test_y):
            raise ValueError("examples and labels differ in count")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def hold_out(self, share: float, seed: int = HOLD_OUT_SEED) -> Dataset:
        """Train on the rest of the training set and evaluate on ``share`` of it, drawn
        with a fixed ``seed`` so every run of a tuning sweep holds out the same examples;
        the test set is left out altogether."""
        count = round(len(self.train_x) * share)
        if not 0 < count < len(self.train_x):
            raise ValueError(
                f"validation_split={share} of {len(self.train_x)} training "
                "examples leaves no validation or no training examples"
            )
        order = torch.randperm(len(self.train_x), generator=torch.Generator().manual_seed(seed))
        held, kept = order[:count], order[count:]
        return dataclasses.replace(
            self,
            train_x=self.train_x[kept],
            train_y=self.train_y[kept],
            test_x=self.train_x[held],
            test_y=self.train_y[held],
        )

    def preprocess(self, augment: bool) -> Preprocess:
        return self.augment if augment else self.plain

    @classmethod
    def synthetic(
        cls, item: tuple[int, ...], num_outputs: int, train: int, test: int, tokens: bool = False
    ) -> Dataset:
        """A dataset of ``train`` and ``test`` examples shaped ``item`` whose images are
        never read: the feed makes one random batch (DLBS's synthetic data); with
        ``tokens``, sequences of ``item[0]`` token ids below ``num_outputs``."""
        ids = Preprocess(ids=True) if tokens else Preprocess()
        return cls(
            Shapes(train, item),
            torch.zeros(train, dtype=torch.int64),
            Shapes(test, item),
            torch.zeros(test, dtype=torch.int64),
            num_outputs=num_outputs,
            augment=ids,
            plain=ids,
        )
