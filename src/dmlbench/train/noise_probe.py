"""Where a worker measures the gradient noise scale (the ``noise_scale`` setting): which
two batches it compares, and this epoch's sums of their squared gradient norms, which
the trainer gathers from every rank at the end of the epoch for the meter."""

from __future__ import annotations

import torch
from torch import nn

from dmlbench.comm.base import GradientExchange
from dmlbench.comm.collectives import squared_norm
from dmlbench.noise import NoiseScaleMeter
from dmlbench.spec import RunSpec


class NoiseProbe:
    """Batch ``b`` against ``b·N`` across workers, or half a batch against the batch on
    one worker (:attr:`split`: each batch runs as two halves whose gradients add up to
    the batch's)."""

    def __init__(self, meter: NoiseScaleMeter, split: bool, device: torch.device) -> None:
        self.meter, self.split, self.device = meter, split, device
        # this epoch's sums of |small-batch gradient|² and |big-batch gradient|², and steps
        self.sums = torch.zeros(3, device=device)
        self.half_norm2 = torch.zeros((), device=device)  # split: the first half's

    @classmethod
    def for_run(
        cls,
        spec: RunSpec,
        exchange: GradientExchange,
        examples: int,
        workers: int,
        device: torch.device,
    ) -> NoiseProbe | None:
        """The run's probe, where the noise scale is measured (see ``noise_scale``): not
        under an inexact or sharded exchange, on synthetic data (one fixed batch a worker,
        no noise of the data's to measure), or on one worker unless asked for."""
        mode, batch = spec.noise_scale, spec.local_batch
        if mode is False or not exchange.exact or exchange.sharded:
            return None
        if (workers == 1 and mode == "auto") or spec.synthetic_data:
            return None
        exchange.measure_norms = workers > 1  # the exchange sees each worker's own
        # an epoch draws its batches without replacement from ``examples``
        if workers == 1:
            return cls(NoiseScaleMeter(batch // 2, batch, population=examples), True, device)
        return cls(NoiseScaleMeter(batch, batch * workers, population=examples), False, device)

    def note_half(self, model: nn.Module, weight: float) -> None:
        """After the first half's backward: its gradient's squared norm (the gradients
        then hold ``weight`` × the half's)."""
        self.half_norm2 = _grad_norm2(model) / weight**2

    def note_step(self, model: nn.Module, exchange: GradientExchange) -> None:
        """After the exchange: this step's squared norms at the small and the big batch."""
        if self.split:
            norms: tuple[torch.Tensor, torch.Tensor] | None = (self.half_norm2, _grad_norm2(model))
        else:
            norms = exchange.gradient_norms()
        if norms is not None:
            self.sums += torch.stack([*norms, torch.ones((), device=self.device)])

    def take_epoch(self) -> list[float]:
        """This epoch's (small sum, big sum, steps), and a fresh start for the next."""
        sums = self.sums.tolist()
        self.sums.zero_()
        return sums


def _grad_norm2(model: nn.Module) -> torch.Tensor:
    return squared_norm(p.grad for p in model.parameters())
