"""Batched image augmentation on uint8 tensors (no torchvision).

Per-example crop offsets and flips are drawn in one call and applied with one gather,
so a batch of 32 CIFAR images costs tens of microseconds, not a Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def random_crop_flip(
    images: torch.Tensor, padding: int, flip: bool, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Zero-pad by ``padding``, take a random crop of the original size, maybe mirror it.

    ``images`` is ``[N, C, H, W]`` of any dtype; the result has the same shape and dtype.
    The crop is one ``gather`` over each padded image seen as a flat row: a flat index per
    output pixel (row offset × padded width + column), mirrored by reversing the columns.
    """
    n, c, h, w = images.shape
    padded = F.pad(images, (padding, padding, padding, padding)) if padding else images
    width = w + 2 * padding
    dy = torch.randint(0, 2 * padding + 1, (n, 1), generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (n, 1), generator=generator)
    rows = dy + torch.arange(h)
    cols = dx + torch.arange(w)
    if flip:
        mirror = torch.rand(n, generator=generator) < 0.5
        cols = torch.where(mirror[:, None], cols.flip(1), cols)
    flat = (rows[:, :, None] * width + cols[:, None, :]).view(n, 1, h * w)
    index = flat.to(images.device).expand(n, c, h * w)
    return padded.reshape(n, c, -1).gather(2, index).view(n, c, h, w)


class ChannelNormalize:
    """``(x / 255 - mean) / std`` per channel, as one multiply-add on the cast tensor."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], scale: float = 255.0) -> None:
        self.mean = tuple(mean)
        self.std = tuple(std)
        std_t = torch.tensor(std)
        self._mul = (1.0 / (scale * std_t)).view(1, -1, 1, 1)
        self._add = (-torch.tensor(mean) / std_t).view(1, -1, 1, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._mul.device != x.device:
            self._mul, self._add = self._mul.to(x.device), self._add.to(x.device)
        return torch.addcmul(self._add, x.float(), self._mul)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChannelNormalize) and (self.mean, self.std) == (
            other.mean,
            other.std,
        )

    def __hash__(self) -> int:
        return hash((self.mean, self.std))
