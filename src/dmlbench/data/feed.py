"""A worker's training batches: gathered from memory, decoded from files a few batches
ahead of the step, or DLBS's one synthetic batch made once on the device."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from dmlbench.data.dataset import Dataset
from dmlbench.data.images import FileLoader, ImageFiles, batches


class Feed:
    """``start_epoch`` with the epoch's rows of example indices, then ``take`` each row
    in turn: the row's model input (augmented and normalised, on ``device``) and labels."""

    def __init__(
        self,
        data: Dataset,
        *,
        augment: bool,
        device: torch.device,
        generator: torch.Generator,
        seed: int,
        processes: int,
        synthetic: bool = False,
    ) -> None:
        self.data, self.device, self.generator = data, device, generator
        self.processes = processes
        self.evaluators: dict[int, FileLoader] = {}  # id of a file split → its loader
        self.preprocess = data.preprocess(augment)
        self.synthetic = synthetic
        self.loader: FileLoader | None = None
        if isinstance(data.train_x, ImageFiles) and not synthetic:
            self.loader = FileLoader(
                data.train_x,
                data.train_y,
                train=augment,
                seed=seed,
                processes=processes,
                pin_memory=device.type == "cuda",
            )
        self._batches: Iterator[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._fixed: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def streams(self) -> bool:
        """Whether batches are decoded from files as training runs."""
        return self.loader is not None

    def start_epoch(self, rows: torch.Tensor, epoch: int) -> None:
        if self.loader is not None:
            self._batches = self.loader.epoch(rows.tolist(), epoch)

    def take(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.synthetic:
            if self._fixed is None or len(self._fixed[0]) != len(indices):
                self._fixed = self._synthetic_batch(len(indices))
            return self._fixed
        if self._batches is not None:
            x, y = next(self._batches)
        else:
            images = self.data.train_x
            assert isinstance(images, torch.Tensor)  # files are decoded by the batches above
            x, y = images[indices], self.data.train_y[indices]
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        return self.preprocess.train(x, self.generator), y

    def _synthetic_batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Random images of the data's shape and random labels, normalised once; or
        random token ids and the next-token labels of a language model's sequences."""
        shape = (size, *self.data.input_shape)
        if self.preprocess.ids:
            vocab = self.data.num_outputs
            ids = torch.randint(0, vocab, (size, shape[1] + 1), generator=self.generator)
            return ids[:, :-1].to(self.device), ids[:, 1:].to(self.device)
        pixels = torch.randint(0, 256, shape, dtype=torch.uint8, generator=self.generator)
        labels = torch.randint(0, self.data.num_outputs, (size,), generator=self.generator)
        return self.preprocess.eval(pixels.to(self.device)), labels.to(self.device)

    def batches(
        self, images: torch.Tensor | ImageFiles, labels: torch.Tensor, span: range, size: int
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``span``'s examples in order, unaugmented, in batches of ``size`` (files are
        decoded by a loader kept for the next evaluation)."""
        if not isinstance(images, ImageFiles) or self.processes == 0:
            yield from batches(images, labels, span, size, processes=0)
            return
        loader = self.evaluators.get(id(images))
        if loader is None:
            loader = FileLoader(images, labels, train=False, processes=self.processes)
            self.evaluators[id(images)] = loader
        rows = [range(i, min(i + size, span.stop)) for i in range(span.start, span.stop, size)]
        yield from loader.epoch(rows)

    def cpu_s(self) -> float:
        """CPU seconds the decoding processes used (the worker's own, for the contention
        check)."""
        loaders = [self.loader, *self.evaluators.values()]
        return sum(loader.cpu_s() for loader in loaders if loader is not None)

    def close(self) -> None:
        for loader in [self.loader, *self.evaluators.values()]:
            if loader is not None:
                loader.close()
