"""Dampers: a contract every damper keeps, and each schedule on known numbers."""

from __future__ import annotations

import math
import pickle

import pytest

from dmlbench.dask.dampers import (
    DAMPERS,
    AdaDamp,
    Constant,
    GeoDamp,
    GeoDampLR,
    NoiseScaleDamp,
    PadaDamp,
    TrainState,
)

STATES = [
    TrainState(),
    TrainState(epoch=0.5, updates=10, loss=2.0, initial_loss=2.3),
    TrainState(epoch=61, updates=5_000, loss=0.5, initial_loss=2.3, noise_scale=400.0),
    TrainState(epoch=500, updates=10**6, loss=1e-6, initial_loss=2.3, noise_scale=1e9),
]


@pytest.mark.parametrize("name", sorted(DAMPERS))
@pytest.mark.parametrize("cap", [None, 256])
def test_every_damper_keeps_the_contract(name: str, cap: int | None) -> None:
    damper = DAMPERS[name](initial=16, max_batch_size=cap)
    previous = None
    for state in STATES:
        decision = damper(state)
        assert isinstance(decision.batch_size, int) and decision.batch_size >= 1
        assert 0 < decision.lr_factor <= 1
        if cap is not None:
            assert decision.batch_size <= cap
        assert damper(state) == decision  # a pure function of the state
        if previous is not None and name != "GeoDampLR":
            assert decision.batch_size >= previous.batch_size  # batches never shrink
        previous = decision
    assert pickle.loads(pickle.dumps(damper)) == damper
    assert type(damper)(**damper.get_params()) == damper
    with pytest.raises(ValueError, match="initial batch size"):
        DAMPERS[name](initial=0)
    with pytest.raises(ValueError, match="below the initial"):
        DAMPERS[name](initial=64, max_batch_size=32)


def test_geodamp_and_its_learning_rate_twin() -> None:
    grow = GeoDamp(initial=32, delay=60, factor=5)
    assert [grow(TrainState(epoch=e)).batch_size for e in (0, 59.9, 60, 120)] == [32, 32, 160, 800]
    decay = GeoDampLR(initial=32, delay=60, factor=5)
    assert [decay(TrainState(epoch=e)).lr_factor for e in (0, 60, 120)] == [1, 0.2, 0.04]
    assert {decay(TrainState(epoch=e)).batch_size for e in (0, 60, 120)} == {32}
    assert decay != GeoDamp(initial=32, delay=60, factor=5)  # twins, not equals
    for twin in (GeoDamp, GeoDampLR):  # each refuses its own options by its own name
        with pytest.raises(ValueError, match=f"^{twin.__name__}: delay must be > 0"):
            twin(delay=0)


def test_a_dampers_own_options_are_checked_after_the_shared_ones() -> None:
    with pytest.raises(ValueError, match=r"^PadaDamp: rate must be"):
        PadaDamp(rate=-1)
    with pytest.raises(ValueError, match=r"^NoiseScaleDamp: scale must be"):
        NoiseScaleDamp(scale=0)
    with pytest.raises(ValueError, match="initial batch size"):  # the shared check first
        NoiseScaleDamp(initial=0, scale=0)


def test_hybrid_rule_decays_the_rate_past_the_cap() -> None:
    capped = GeoDamp(initial=32, delay=1, factor=2, max_batch_size=128)
    assert capped(TrainState(epoch=2)) == capped(TrainState(epoch=2.5))
    assert (capped(TrainState(epoch=2)).batch_size, capped(TrainState(epoch=2)).lr_factor) == (
        128,
        1.0,
    )
    wanted_512 = capped(TrainState(epoch=4))  # wants 512: stays 128, rate × 128/512
    assert wanted_512.batch_size == 128 and wanted_512.lr_factor == pytest.approx(0.25)


def test_padadamp_adadamp_and_the_noise_scale() -> None:
    assert PadaDamp(initial=8, rate=0.5)(TrainState(updates=11)).batch_size == 8 + 6
    assert AdaDamp(initial=10)(TrainState(loss=0.5, initial_loss=2.0)).batch_size == 40
    assert AdaDamp(initial=10)(TrainState()).batch_size == 10  # no loss yet
    damp = NoiseScaleDamp(initial=16, scale=0.5)
    assert damp(TrainState(noise_scale=100.0)).batch_size == 50
    assert damp(TrainState(noise_scale=4.0)).batch_size == 16  # never below initial
    assert Constant(initial=7)(STATES[-1]).batch_size == 7


def test_noise_scale_damp_survives_an_infinite_scale() -> None:
    assert math.isfinite(NoiseScaleDamp()(TrainState(noise_scale=math.inf)).lr_factor)
