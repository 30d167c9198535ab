"""The gradient noise scale (McCandlish et al. 2018): how large a batch still helps.

``B_simple = tr(Σ) / |G|²``, where ``G`` is the true gradient and ``Σ`` the covariance
of one example's gradient. Below about ``B_simple`` examples a batch's gradient is
mostly noise and a larger batch saves steps almost linearly; far above it, doubling the
batch saves few steps. Neither term is observed directly, but the expected squared norm
of a batch-``B`` gradient is ``|G|² + tr(Σ)/B``, so two batch sizes seen at the same
weights give both (appendix A of the paper). A data-parallel step sees two for free:
each worker's own gradient (batch ``b``) and their average (batch ``B = b·N``).

One estimator serves the trainer (:class:`NoiseScaleMeter`, summed over an epoch's
steps) and the Dask estimator (a moving average of :func:`noise_scale_estimate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def noise_scale_estimate(
    small_norm2: float, small_batch: float, big_norm2: float, big_batch: float
) -> tuple[float, float]:
    """Unbiased ``(|G|², tr(Σ))`` from squared gradient norms at two batch sizes.

    ``|G|² = (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)`` and
    ``tr(Σ) = (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)``. Average each over
    updates (a sum, or an exponential moving average) before dividing: ``B_simple =
    tr(Σ) / |G|²``; a ratio of single noisy estimates is badly biased.
    """
    if big_batch <= small_batch:
        raise ValueError("the big batch must be larger than the small one")
    g2 = (big_batch * big_norm2 - small_batch * small_norm2) / (big_batch - small_batch)
    trace = (small_norm2 - big_norm2) / (1 / small_batch - 1 / big_batch)
    return g2, trace


def simple_noise_scale(g2: float, trace: float) -> float | None:
    """``tr(Σ) / |G|²``, or None where ``|G|²`` is not positive (the estimate of a
    gradient smaller than its own noise can come out negative: no scale then)."""
    if not (math.isfinite(g2) and math.isfinite(trace)) or g2 <= 0:
        return None
    return max(trace, 0.0) / g2


# Fewer updates than this measure too little of the gradient's noise to advise a batch
# on: the estimate is a ratio of two noisy sums (the issue that set it saw B_simple ≈ 2
# from 20 steps of a task whose noise scale is in the hundreds).
MIN_ADVICE_STEPS = 100


def advisable_noise_scale(noise: dict[str, Any] | None) -> float | None:
    """A run's B_simple (its summary's ``noise_scale``) where it was measured over enough
    steps to advise on; None otherwise, so neither advice nor a table takes an estimate
    from 20 steps as if it were one."""
    if not noise or (noise.get("steps") or 0) < MIN_ADVICE_STEPS:
        return None
    return noise.get("b_simple")


@dataclass(frozen=True, slots=True)
class NoiseScale:
    """One estimate: ``B_simple`` and its two terms, over ``steps`` updates."""

    b_simple: float | None
    g2: float  # |G|², the true gradient's squared norm
    trace: float  # tr(Σ), the per-example gradient variance summed over parameters
    steps: int

    def as_dict(self) -> dict[str, float | int | None]:
        return {"b_simple": self.b_simple, "g2": self.g2, "trace": self.trace, "steps": self.steps}


@dataclass(slots=True)
class NoiseScaleMeter:
    """Squared gradient norms summed over steps at a small and a big batch size.

    ``add_sums`` folds in sums of squared norms and how many there were; ``estimate``
    applies :func:`noise_scale_estimate` to the means, so each term is smoothed before
    the ratio.

    With ``population`` (the training set's size), batches are taken as drawn without
    replacement, as an epoch's shuffle draws them: a batch of ``b`` then varies as one of
    ``b·(n−1)/(n−b)`` drawn with replacement. Without that correction the estimate
    comes out ``1/(1 − B_simple/n)`` times too large (5% for B_simple = 200, n = 4,000).
    """

    small_batch: float
    big_batch: float
    population: int | None = None
    small_sum: float = 0.0
    big_sum: float = 0.0
    small_count: int = 0
    big_count: int = 0
    epochs: list[tuple[float, int, float, int]] = field(default_factory=list)  # their sums

    def add_sums(self, small_sum: float, small_count: int, big_sum: float, big_count: int) -> None:
        """Fold in sums gathered elsewhere (e.g. another worker's, or another epoch's)."""
        self.small_sum += small_sum
        self.small_count += small_count
        self.big_sum += big_sum
        self.big_count += big_count

    def estimate(self) -> NoiseScale | None:
        """The estimate over everything added, or None before anything was."""
        if not self.small_count or not self.big_count:
            return None
        g2, trace = noise_scale_estimate(
            self.small_sum / self.small_count,
            self._effective(self.small_batch),
            self.big_sum / self.big_count,
            self._effective(self.big_batch),
        )
        return NoiseScale(simple_noise_scale(g2, trace), g2, trace, self.big_count)

    def add_epoch(self, ranks: Sequence[Sequence[float]]) -> NoiseScale | None:
        """Fold in one epoch of every rank's (small-batch sum, big-batch sum, steps) and
        return that epoch's own estimate. Every rank's big batch is the same averaged
        gradient, so the big batch's sum is rank 0's."""
        epoch = NoiseScaleMeter(self.small_batch, self.big_batch, self.population)
        small = sum(rank[0] for rank in ranks)
        epoch.add_sums(
            small, round(sum(rank[2] for rank in ranks)), ranks[0][1], round(ranks[0][2])
        )
        sums = (epoch.small_sum, epoch.small_count, epoch.big_sum, epoch.big_count)
        self.add_sums(*sums)
        if epoch.small_count and epoch.big_count:
            self.epochs.append(sums)
        return epoch.estimate()

    def band(self) -> tuple[float, float] | None:
        """A 95% interval of ``B_simple``: a jackknife over the epochs (each left out in
        turn) of the estimate over all of them; None with fewer than three epochs, or
        where an estimate without one of them is not resolved."""
        whole = self.estimate()
        if len(self.epochs) < 3 or whole is None or whole.b_simple is None:
            return None
        left_out = []
        for small_sum, small_count, big_sum, big_count in self.epochs:
            rest = NoiseScaleMeter(self.small_batch, self.big_batch, self.population)
            rest.add_sums(
                self.small_sum - small_sum,
                self.small_count - small_count,
                self.big_sum - big_sum,
                self.big_count - big_count,
            )
            estimate = rest.estimate()
            if estimate is None or estimate.b_simple is None:
                return None
            left_out.append(estimate.b_simple)
        n, mean = len(left_out), sum(left_out) / len(left_out)
        error = math.sqrt((n - 1) / n * sum((b - mean) ** 2 for b in left_out))
        return max(0.0, whole.b_simple - 1.96 * error), whole.b_simple + 1.96 * error

    def summary(self) -> dict[str, Any] | None:
        """The estimate over everything added, with the batch sizes it compared."""
        estimate = self.estimate()
        if estimate is None:
            return None
        band = self.band()
        return {
            **estimate.as_dict(),
            "small_batch": self.small_batch,
            "big_batch": self.big_batch,
            **({"band": list(band)} if band else {}),
        }

    def _effective(self, batch: float) -> float:
        n = self.population
        return batch if n is None or batch >= n else batch * (n - 1) / (n - batch)


def exact_noise_scale(per_example: torch.Tensor) -> NoiseScale:
    """The truth on a whole dataset: ``per_example`` holds one flattened gradient per row
    (n × d); ``G`` is their mean and ``tr(Σ)`` their mean squared distance from it.
    For checking the estimators on models small enough to afford n gradients."""
    mean = per_example.mean(0)
    g2 = float(mean.square().sum())
    trace = float((per_example - mean).square().sum(1).mean())
    return NoiseScale(simple_noise_scale(g2, trace), g2, trace, 0)
