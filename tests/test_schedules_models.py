"""Learning-rate schedules and models: pure logic, no process group."""

from __future__ import annotations

import math

import pytest
import torch

from dmlbench.models.resnet import CifarResNet
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


@pytest.mark.parametrize(("workers", "alpha"), [(1, 200), (2, 400), (3, 400), (4, 600),
                                                (8, 700), (16, 800), (64, 800)])  # fmt: skip
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
