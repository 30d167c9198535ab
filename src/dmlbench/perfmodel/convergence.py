"""How much training a target takes at global batch ``B``: McCandlish et al.'s relation.

McCandlish, Kaplan, Amodei et al., "An Empirical Model of Large-Batch Training" (2018),
eq. 2.11: steps and examples to reach a loss trade off as

    S = S_min (1 + B_noise / B)        E = E_min (1 + B / B_noise)

so the examples (or epochs) to converge grow linearly in ``B``: ``E = E_min + k·B`` with
``k = E_min / B_noise``. :func:`fit` takes two or more runs at different global batches
(the user's own, or imported MLPerf runs) and fits that line by least squares; the band
is the fit's standard error of the prediction (a Student-t interval, 95%). Where a run
measured the gradient noise scale, ``B_simple`` is a prior on ``B_noise`` (McCandlish's
``B_simple`` approximates ``B_crit``): :func:`fit` takes it as one more equation,
weighted like one run.

What the form assumes: one recipe family whose hyperparameters are retuned as ``B``
grows (learning rate scaled, warm-up lengthened, LARS or LAMB at large ``B``): the
published MLPerf recipes are such a family. It says nothing of a recipe that is not
retuned, and it is fitted per benchmark and quality target. Past the batches it was
fitted on the prediction extrapolates: :meth:`BatchScaling.extrapolates` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dmlbench.errors import SpecError

# Student-t 97.5% quantiles by degrees of freedom (1..10); the normal's 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


@dataclass(frozen=True)
class BatchScaling:
    """``E(B) = e_min + slope·B`` (examples or epochs to the target at global batch B)."""

    e_min: float
    slope: float
    batches: tuple[float, ...]
    residual_sd: float  # of the fitted points, 0 with two points
    covariance: tuple[float, float, float]  # var(e_min), cov, var(slope)
    degrees_of_freedom: int

    @property
    def b_noise(self) -> float:
        """McCandlish's ``B_noise = E_min / k``: the batch at which examples double."""
        return self.e_min / self.slope if self.slope > 0 else math.inf

    def predict(self, batch: float) -> float:
        return self.e_min + self.slope * batch

    def band(self, batch: float) -> tuple[float, float]:
        """A 95% interval of the prediction at ``batch``: the fit's uncertainty plus one
        new run's scatter (when there are more points than parameters)."""
        var_a, cov, var_k = self.covariance
        variance = var_a + 2 * batch * cov + batch**2 * var_k + self.residual_sd**2
        dof = self.degrees_of_freedom
        t = _T975[dof - 1] if 1 <= dof <= len(_T975) else 1.96
        half = t * math.sqrt(max(variance, 0.0)) if dof > 0 else math.nan
        value = self.predict(batch)
        return value - half, value + half

    def extrapolates(self, batch: float) -> bool:
        """Whether ``batch`` lies outside the fitted batches (by more than 10%)."""
        return batch < 0.9 * min(self.batches) or batch > 1.1 * max(self.batches)


def fit(points: Sequence[tuple[float, float]], noise_scale: float | None = None) -> BatchScaling:
    """Least squares of ``E = e_min + k·B`` through ``(B, E)`` points at two or more
    distinct batches; ``noise_scale`` (a measured ``B_simple``) adds ``k·B_noise =
    e_min`` as one more equation."""
    batches = sorted({b for b, _ in points})
    if len(batches) < 2:
        raise SpecError(
            "steps to target against the batch need runs at two or more global batches "
            f"(have {len(batches)}): run or import one at another batch"
        )
    if any(not (b > 0 and e > 0 and math.isfinite(b) and math.isfinite(e)) for b, e in points):
        raise SpecError("every point needs a global batch and an amount of training above 0")
    rows = [(1.0, float(b), float(e)) for b, e in points]
    if noise_scale is not None and noise_scale > 0:
        rows.append((1.0, -float(noise_scale), 0.0))  # e_min − k·B_noise = 0
    n = len(rows)
    s11 = sum(x0 * x0 for x0, _, _ in rows)
    s12 = sum(x0 * x1 for x0, x1, _ in rows)
    s22 = sum(x1 * x1 for _, x1, _ in rows)
    t1 = sum(x0 * y for x0, _, y in rows)
    t2 = sum(x1 * y for _, x1, y in rows)
    det = s11 * s22 - s12 * s12
    e_min = (s22 * t1 - s12 * t2) / det
    slope = (s11 * t2 - s12 * t1) / det
    dof = n - 2
    residuals = [y - (e_min * x0 + slope * x1) for x0, x1, y in rows]
    sd = math.sqrt(sum(r * r for r in residuals) / dof) if dof > 0 else 0.0
    scale = sd**2 / det
    return BatchScaling(
        e_min,
        slope,
        tuple(float(b) for b in batches),
        sd,
        (s22 * scale, -s12 * scale, s11 * scale),
        dof,
    )
