"""Learning-rate schedules and models: pure logic, no process group."""

from __future__ import annotations

import math

import pytest
import torch

from dmlbench.models.resnet import CifarResNet
from dmlbench.models.wide_resnet import WideResNet
from dmlbench.optim import learning_rate
from dmlbench.tasks import get_task


def test_cifar_warmup_and_step_decay_follow_the_recipe() -> None:
    schedule = get_task("cifar10-resnet20").recipe.schedule
    eta, b, k = 0.1 / 256, 32, 8

    def lr(epoch: float) -> float:
        return learning_rate(schedule, step=0, epoch=epoch, local_batch=b, world_size=k)

    assert lr(0) == pytest.approx(eta * b)
    assert lr(2.5) == pytest.approx(eta * b + (eta * b * k - eta * b) / 2)
    assert lr(5) == pytest.approx(eta * b * k)
    assert lr(81.9) == pytest.approx(eta * b * k)
    assert lr(82) == pytest.approx(eta * b * k * 0.1)
    assert lr(109) == pytest.approx(eta * b * k * 0.01)


@pytest.mark.parametrize(
    ("workers", "alpha"), [(1, 200), (2, 400), (3, 400), (4, 600), (8, 700), (16, 800), (64, 800)]
)
def test_epsilon_alpha_over_sqrt_t_by_workers(workers: int, alpha: float) -> None:
    schedule = get_task("epsilon-logreg").recipe.schedule
    rate = learning_rate(schedule, step=99, epoch=0.0, local_batch=100, world_size=workers)
    assert rate == pytest.approx(alpha / math.sqrt(100))


@pytest.mark.parametrize("depth", [20, 32, 44, 56])
@pytest.mark.parametrize("variant", ["m1", "m2"])
def test_resnet_depth_counts_weighted_layers(depth: int, variant: str) -> None:
    model = CifarResNet(depth, variant)  # type: ignore[arg-type]
    convs = [
        m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)
    ]
    assert len(convs) + 1 == depth  # 6n+2 = 3×3 convolutions + the final linear layer
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_resnet20_m1_has_the_papers_parameter_count() -> None:
    count = sum(p.numel() for p in CifarResNet(20, "m1").parameters())
    assert 0.26e6 < count < 0.28e6  # He et al. 2015, Table 6: 0.27M


def test_resnet_rejects_impossible_depth() -> None:
    with pytest.raises(ValueError, match="6n\\+2"):
        CifarResNet(21)


def test_wrn_16_4_has_the_papers_weights_and_trains() -> None:
    """Zagoruyko & Komodakis's WRN-16-4: 2.7M weights (their Table 1; the adadamp paper
    says about 2.75M); 6n+4 layers; dropout between each block's convolutions."""
    model = WideResNet(16, 4, dropout=0.3)
    assert sum(p.numel() for p in model.parameters()) == 2_748_890
    convs = [
        m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)
    ]
    assert len(convs) == 1 + 3 * 2 * 2  # the stem, then 3 stages of n = (16 - 4) / 6 = 2 blocks
    assert sum(isinstance(m, torch.nn.Dropout) for m in model.modules()) == 6
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    with pytest.raises(ValueError, match="6n\\+4"):
        WideResNet(15)


def test_the_adadamp_task_carries_the_papers_recipe() -> None:
    from dmlbench.models import build_model
    from dmlbench.spec.recipe import ModelSpec

    task = get_task("cifar10-wrn16-4")
    recipe = task.recipe
    assert (recipe.local_batch, recipe.max_epochs) == (128, 200)
    assert (recipe.optimizer.momentum, recipe.optimizer.nesterov) == (0.9, True)
    assert recipe.optimizer.weight_decay == 5e-4
    rates = [
        learning_rate(recipe.schedule, step=0, epoch=e, local_batch=128, world_size=1)
        for e in (0, 59, 60, 120, 180)
    ]
    assert rates == pytest.approx([0.05, 0.05, 0.01, 0.002, 0.0004])
    model = build_model(recipe.model, (3, 32, 32), 10)
    assert sum(p.numel() for p in model.parameters()) == 2_748_890
    with pytest.raises(Exception, match="6n\\+4"):
        build_model(ModelSpec(name="wide-resnet", options={"depth": 15}), (3, 32, 32), 10)


def _scaled(**fields):
    from dmlbench.spec.recipe import ScaledSchedule

    return ScaledSchedule(base_lr=0.1, **fields)


def _rate(schedule, epoch: float, workers: int = 4) -> float:
    return schedule.rate(step=0, epoch=epoch, local_batch=32, world_size=workers)


@pytest.mark.parametrize(
    ("fields", "epoch", "expected"),
    [
        ({"scaling": "linear"}, 5.0, 0.4),  # base × N
        ({"scaling": "sqrt"}, 5.0, 0.2),  # base × √N
        ({"scaling": "none"}, 5.0, 0.1),
        ({"warmup_epochs": 2.0}, 1.0, 0.25),  # halfway from 0.1 to 0.4
        ({"decay": "step", "milestones": [3, 6], "gamma": 0.5}, 7.0, 0.1),  # 0.4 × 0.5²
        ({"decay": "exponential", "gamma": 0.5, "warmup_epochs": 1.0}, 3.0, 0.1),  # 0.4 × 0.5²
        ({"decay": "inverse", "gamma": 1.0}, 3.0, 0.1),  # 0.4 / (1 + 3)
        ({"decay": "polynomial", "power": 2.0, "decay_epochs": 10.0}, 5.0, 0.1),  # 0.4 × ½²
        ({"decay": "cosine", "decay_epochs": 10.0}, 5.0, 0.2),  # half-way: half the peak
        ({"decay": "cosine", "decay_epochs": 10.0}, 12.0, 0.0),  # past the end: 0
    ],
)
def test_scaled_schedule_rules(fields: dict, epoch: float, expected: float) -> None:
    assert _rate(_scaled(**fields), epoch) == pytest.approx(expected, abs=1e-12)


def test_scaled_schedule_says_what_it_does_and_refuses_what_it_cannot() -> None:
    from pydantic import ValidationError

    schedule = _scaled(scaling="sqrt", warmup_epochs=5, decay="cosine", decay_epochs=85)
    assert schedule.describe() == (
        "lr 0.1 × √N, warm-up from 0.1 over 5 epochs, cosine decay to 0 over 85 epochs"
    )
    with pytest.raises(ValidationError, match="decay cosine needs decay_epochs"):
        _scaled(decay="cosine")
    with pytest.raises(ValidationError, match="decay step needs milestones"):
        _scaled(decay="step")
    from dmlbench.resolve import resolve_spec

    spec = resolve_spec(
        "digits-mlp",
        overrides=[
            "schedule={kind: scaled, base_lr: 0.05, scaling: sqrt, decay: exponential, gamma: 0.9}"
        ],
    )
    assert spec.recipe.schedule.describe() == "lr 0.05 × √N, ×0.9 per epoch"
