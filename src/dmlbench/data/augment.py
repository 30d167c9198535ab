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
    """
    n, c, h, w = images.shape
    padded = F.pad(images, (padding, padding, padding, padding)) if padding else images
    device = images.device
    dy = torch.randint(0, 2 * padding + 1, (n, 1), generator=generator).to(device)
    dx = torch.randint(0, 2 * padding + 1, (n, 1), generator=generator).to(device)
    rows = dy + torch.arange(h, device=device)
    cols = dx + torch.arange(w, device=device)
    if flip:  # mirroring is reading the crop's columns backwards
        mirror = (torch.rand(n, generator=generator) < 0.5).to(device)
        cols = torch.where(mirror[:, None], cols.flip(1), cols)
    batch = torch.arange(n, device=device)[:, None, None, None]
    channel = torch.arange(c, device=device)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]


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
        return (
            isinstance(other, ChannelNormalize)
            and (self.mean, self.std) == (other.mean, other.std)
        )

    def __hash__(self) -> int:
        return hash((self.mean, self.std))
