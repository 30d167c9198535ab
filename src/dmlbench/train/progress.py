"""Rank 0's word on its run every few seconds, the ``train_progress`` event: the step,
the mean training loss of the epoch so far (rank 0's own batches), samples a second
since the last word (tokens too, for a language model), the share of the worker's peak
FLOP/s those steps made (MFU), and the memory the worker holds now.

A word costs a clock read, one read of the loss (which waits for the steps queued on a
GPU) and one of the process's memory, at most every :data:`PROGRESS_EVERY_S`; between
words a step only compares two clocks (BENCHMARKS.md measures what a word costs).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from dmlbench.train.memory import resident_bytes

if TYPE_CHECKING:
    from dmlbench.train.hardware import Peak

PROGRESS_EVERY_S = 2.0


class ProgressMeter:
    """What rank 0 says between two words; :meth:`restart` after anything that is not
    training (the run's start-up, an evaluation), so that rates count steps only."""

    def __init__(
        self,
        device: torch.device,
        global_batch: int,
        tokens_per_sample: int | None,
        flops_per_step: float | None,
        peak: Peak,
    ) -> None:
        self.device, self.global_batch, self.tokens = device, global_batch, tokens_per_sample
        self.flops, self.peak = flops_per_step, peak.flops_per_s
        self.at, self.step = time.perf_counter(), 0

    def restart(self, step: int) -> None:
        self.at, self.step = time.perf_counter(), step

    def due(self) -> bool:
        return time.perf_counter() - self.at > PROGRESS_EVERY_S

    def word(self, step: int, loss_sum: torch.Tensor, epoch_steps: int) -> dict[str, Any]:
        """The word's fields at ``step``, this epoch's ``epoch_steps`` losses summing to
        ``loss_sum``; the rates are over the steps since the last word."""
        now = time.perf_counter()
        seconds, steps = max(now - self.at, 1e-9), step - self.step
        self.restart(step)
        samples_per_s = steps * self.global_batch / seconds
        word: dict[str, Any] = {
            "train_loss": loss_sum.item() / max(1, epoch_steps),
            "samples_per_s": samples_per_s,
            "memory_bytes": resident_bytes(self.device),
        }
        if self.tokens:
            word["tokens_per_s"] = samples_per_s * self.tokens
        if self.flops and self.peak:
            word["mfu"] = self.flops * steps / seconds / self.peak
        return word
