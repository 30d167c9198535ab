"""The gradient noise scale estimators on known statistics (unit tier)."""

from __future__ import annotations

import pytest
import torch

from dmlbench.noise import (
    NoiseScaleMeter,
    exact_noise_scale,
    noise_scale_estimate,
    simple_noise_scale,
)


def test_noise_scale_estimate_recovers_known_statistics() -> None:
    # E|G_B|² = |G|² + tr(Σ)/B; with |G|² = 4 and tr(Σ) = 400 the noise scale is 100
    small, big = 4 + 400 / 10, 4 + 400 / 1000
    g2, trace = noise_scale_estimate(small, 10, big, 1000)
    assert g2 == pytest.approx(4) and trace == pytest.approx(400)
    assert simple_noise_scale(g2, trace) == pytest.approx(100)
    with pytest.raises(ValueError, match="larger"):
        noise_scale_estimate(1, 10, 1, 10)


def test_a_gradient_lost_in_its_noise_has_no_scale() -> None:
    assert simple_noise_scale(-0.1, 5.0) is None
    assert simple_noise_scale(0.0, 5.0) is None
    assert simple_noise_scale(float("nan"), 5.0) is None
    assert simple_noise_scale(2.0, -1.0) == 0.0  # a noise estimate below zero is none


def test_the_meter_recovers_the_noise_scale_of_sampled_batches() -> None:
    """Per-example gradients g_i = G + noise; workers average b of them, the step all
    B = b·N: the meter over many steps lands on tr(Σ)/|G|² of the population."""
    generator = torch.Generator().manual_seed(0)
    d, n, workers, b = 50, 20_000, 4, 16
    population = torch.full((d,), 0.2) + torch.randn(n, d, generator=generator)
    truth = exact_noise_scale(population)
    assert truth.b_simple == pytest.approx(d / (0.04 * d), rel=0.1)  # ≈ 25
    meter = NoiseScaleMeter(small_batch=b, big_batch=b * workers)
    for _ in range(800):
        rows = torch.randint(0, n, (workers, b), generator=generator)
        local = population[rows].mean(1)  # each worker's gradient
        for grad in local:
            meter.add_sums(float(grad.square().sum()), 1, 0.0, 0)
        meter.add_sums(0.0, 0, float(local.mean(0).square().sum()), 1)
    estimate = meter.estimate()
    assert estimate is not None and estimate.steps == 800
    assert estimate.b_simple == pytest.approx(truth.b_simple, rel=0.15)
    assert estimate.trace == pytest.approx(truth.trace, rel=0.05)


def test_an_empty_meter_estimates_nothing() -> None:
    assert NoiseScaleMeter(small_batch=8, big_batch=16).estimate() is None


def test_batches_drawn_without_replacement_are_corrected_for_the_population() -> None:
    """An epoch's shuffle draws each batch without replacement from n examples. Without
    the finite-population correction the estimate is 1/(1 − B_simple/n) times too large
    (here about 1.3); with it, it is on target."""
    generator = torch.Generator().manual_seed(1)
    n, d, b, workers = 400, 20, 10, 4
    population = torch.full((d,), 0.1) + torch.randn(n, d, generator=generator)
    truth = exact_noise_scale(population).b_simple
    assert truth is not None and 60 < truth < 140
    corrected = NoiseScaleMeter(b, b * workers, population=n)
    plain = NoiseScaleMeter(b, b * workers)
    for _ in range(300):  # epochs
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, b * workers):
            local = population[order[start : start + b * workers]].view(workers, b, d).mean(1)
            for meter in (corrected, plain):
                meter.add_sums(
                    float(local.square().sum()), workers, float(local.mean(0).square().sum()), 1
                )
    fixed, biased = corrected.estimate(), plain.estimate()
    assert fixed is not None and biased is not None
    assert fixed.b_simple == pytest.approx(truth, rel=0.1)
    assert biased.b_simple > 1.15 * truth


@pytest.mark.parametrize(
    ("b_simple", "says"),
    [
        (1000.0, "well below it"),
        (100.0, "near it"),
        (10.0, "well above it"),
        (None, "not resolved"),
    ],
)
def test_the_summary_line_says_where_the_batch_stands(b_simple: float | None, says: str) -> None:
    from dmlbench.cli.views.summary import noise_text

    noise = {"b_simple": b_simple, "steps": 2000, "small_batch": 32, "big_batch": 64}
    text = noise_text(noise)
    assert says in text and "over 2,000 steps, from batches of 32 and 64" in text
    if b_simple is not None:
        assert f"B_simple ≈ {b_simple:,.0f}" in text and "batch of 64" in text


def test_the_noise_scale_has_a_band_and_is_not_advised_on_from_few_steps() -> None:
    """Issue 56, item 6: B_simple ≈ 2 from 20 steps was advised on, without a band. The
    band is a jackknife over epochs; it holds the truth, and narrows with more epochs."""
    from dmlbench.cli.views.summary import noise_text

    truth, small, big = 200.0, 32, 64
    g2, trace = 1.0, 200.0  # B_simple = tr(Σ)/|G|²
    generator = torch.Generator().manual_seed(0)

    def meter(epochs: int, steps: int = 50) -> NoiseScaleMeter:
        made = NoiseScaleMeter(small, big)
        for _ in range(epochs):
            # each step's squared norms: their expectations, with 30% noise around them
            noise = 1 + 0.3 * torch.randn(2, steps, generator=generator)
            small_sum = float(((g2 + trace / small) * noise[0]).sum())
            big_sum = float(((g2 + trace / big) * noise[1]).sum())
            made.add_epoch([[small_sum, big_sum, float(steps)]])
        return made

    few, many = meter(4), meter(40)
    low, high = few.band()
    assert low < truth < high
    narrow = many.band()
    assert narrow[0] < truth < narrow[1] and narrow[1] - narrow[0] < (high - low) / 2
    assert meter(2).band() is None  # fewer than three epochs: no band
    said = noise_text({**few.summary(), "steps": 200})
    assert f"95% band {low:,.0f}–{high:,.0f}" in said and "batch of 64" in said
    short = noise_text({"b_simple": 2.0, "steps": 20, "small_batch": 32, "big_batch": 64})
    assert "too few steps to advise" in short and "well" not in short
