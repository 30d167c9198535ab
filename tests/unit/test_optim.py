"""Optimizers a recipe can name: torch's own, and LARS and LAMB against their papers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dmlbench.errors import SpecError
from dmlbench.optim.build import OPTIMIZERS, build_optimizer, describe_optimizer
from dmlbench.resolve import resolve_spec
from dmlbench.spec.recipe import OptimizerSpec


def _layer() -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """A 2×3 weight and a bias with known gradients."""
    layer = nn.Linear(3, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0, 2.0], [0.0, 0.0, 0.0]]))  # ‖w‖ = 3
        layer.bias.copy_(torch.tensor([0.5, -0.5]))
    grad_w = torch.tensor([[0.0, 3.0, 4.0], [0.0, 0.0, 0.0]])  # ‖g‖ = 5
    grad_b = torch.tensor([0.1, 0.2])
    layer.weight.grad, layer.bias.grad = grad_w.clone(), grad_b.clone()
    return layer, grad_w, grad_b


def test_lars_scales_each_layer_by_its_trust_ratio() -> None:
    layer, grad_w, grad_b = _layer()
    w0, b0 = layer.weight.detach().clone(), layer.bias.detach().clone()
    spec = OptimizerSpec(name="lars", momentum=0.9, weight_decay=0.1, trust_coefficient=0.02)
    optimizer = build_optimizer(spec, layer.parameters())
    for group in optimizer.param_groups:
        group["lr"] = 0.5
    optimizer.step()
    trust = 0.02 * 3.0 / (5.0 + 0.1 * 3.0 + 1e-8)  # η‖w‖ / (‖g‖ + λ‖w‖ + ε)
    expected = w0 - 0.5 * trust * (grad_w + 0.1 * w0)
    torch.testing.assert_close(layer.weight.detach(), expected)
    torch.testing.assert_close(layer.bias.detach(), b0 - 0.5 * grad_b)  # no decay, no trust
    # second step: the momentum buffer carries the first update
    first = w0 - expected
    layer.weight.grad, layer.bias.grad = grad_w.clone(), grad_b.clone()
    w1 = layer.weight.detach().clone()
    optimizer.step()
    trust = 0.02 * w1.norm() / (5.0 + 0.1 * w1.norm() + 1e-8)
    torch.testing.assert_close(
        layer.weight.detach(), w1 - (0.9 * first + 0.5 * trust * (grad_w + 0.1 * w1))
    )


def test_lamb_is_adam_scaled_by_the_layer_trust_ratio() -> None:
    layer, grad_w, grad_b = _layer()
    w0, b0 = layer.weight.detach().clone(), layer.bias.detach().clone()
    spec = OptimizerSpec(name="lamb", betas=(0.9, 0.99), eps=1e-6, weight_decay=0.01)
    optimizer = build_optimizer(spec, layer.parameters())
    for group in optimizer.param_groups:
        group["lr"] = 0.1
    optimizer.step()
    # first step: m̂ = g, v̂ = g², so the Adam direction is g / (|g| + ε)
    adam_w = grad_w / (grad_w.abs() + 1e-6)
    r = adam_w + 0.01 * w0
    torch.testing.assert_close(layer.weight.detach(), w0 - 0.1 * (w0.norm() / r.norm()) * r)
    torch.testing.assert_close(layer.bias.detach(), b0 - 0.1 * grad_b / (grad_b.abs() + 1e-6))


def test_adam_and_adamw_are_torchs_with_the_recipe_settings() -> None:
    params = list(nn.Linear(3, 2).parameters())
    adam = build_optimizer(OptimizerSpec(name="adam", betas=(0.8, 0.9), eps=1e-7), params)
    assert isinstance(adam, torch.optim.Adam) and adam.defaults["betas"] == (0.8, 0.9)
    adamw = build_optimizer(OptimizerSpec(name="adamw", weight_decay=0.05), params)
    assert isinstance(adamw, torch.optim.AdamW) and adamw.defaults["weight_decay"] == 0.05
    assert describe_optimizer(OptimizerSpec(name="adamw", weight_decay=0.05)) == (
        "adamw, betas 0.9/0.999, ε 1e-08, weight decay 0.05 (decoupled)"
    )
    assert "momentum" not in describe_optimizer(OptimizerSpec(name="lamb"))


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize(
    ("weight_layout", "grad_layout"),
    [
        ("default", "default"),
        ("channels_last", "channels_last"),
        ("channels_last", "default"),
        ("default", "channels_last"),
    ],
)
def test_torchs_optimizers_run_fused_only_where_the_layouts_agree(
    name: str, weight_layout: str, grad_layout: str
) -> None:
    """A fused kernel where parameter and gradient share a layout; foreach otherwise,
    decided at the first step. torch 2.13's fused SGD on a CPU steps a channels-last
    weight with a default-layout gradient to wrong weights without a word (off by 4.2
    here), so every case must land where torch's one-tensor-at-a-time loop does."""
    formats = {"default": torch.contiguous_format, "channels_last": torch.channels_last}
    torch.manual_seed(0)
    start, grad = torch.randn(16, 8, 3, 3), torch.randn(16, 8, 3, 3)
    spec = OptimizerSpec(name=name, momentum=0.9 * (name == "sgd"), weight_decay=0.01)

    def stepped(optimizer_of: object) -> tuple[torch.Tensor, torch.optim.Optimizer]:
        weight = nn.Parameter(start.contiguous(memory_format=formats[weight_layout]))
        optimizer = optimizer_of([weight])  # type: ignore[operator]
        for _ in range(3):
            weight.grad = grad.contiguous(memory_format=formats[grad_layout])
            optimizer.step()
        return weight.detach(), optimizer

    def loop(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        built = build_optimizer(spec, params)
        settings = {k: v for k, v in built.defaults.items() if k not in ("fused", "foreach")}
        if name == "adamw":
            settings.pop("decoupled_weight_decay", None)
        return type(built)(params, **{**settings, "lr": 0.1, "foreach": False})

    def ours(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        built = build_optimizer(spec, params)
        for group in built.param_groups:
            group["lr"] = 0.1  # as the trainer sets the schedule's rate every step
        return built

    expected, _ = stepped(loop)
    got, optimizer = stepped(ours)
    torch.testing.assert_close(got, expected)
    (group,) = optimizer.param_groups
    assert bool(group["fused"]) == (weight_layout == grad_layout)


def test_the_layout_check_waits_for_the_first_step_with_gradients() -> None:
    weight = nn.Parameter(torch.randn(4, 2, 3, 3))
    optimizer = build_optimizer(OptimizerSpec(name="sgd", momentum=0.9), [weight])
    optimizer.step()  # no gradient yet: nothing steps, nothing is decided
    assert optimizer.param_groups[0]["fused"]
    weight.grad = torch.randn(4, 2, 3, 3).contiguous(memory_format=torch.channels_last)
    optimizer.step()
    assert not optimizer.param_groups[0]["fused"] and optimizer.param_groups[0]["foreach"]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_trains_a_small_model(name: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    rates = {"sgd": 0.1, "lars": 5.0, "adam": 0.01, "adamw": 0.01, "lamb": 0.05}
    optimizer = build_optimizer(
        OptimizerSpec(name=name, momentum=0.9 * (name in ("sgd", "lars"))), model.parameters()
    )
    for group in optimizer.param_groups:
        group["lr"] = rates[name]
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], (name, losses[0], losses[-1])


def test_a_recipe_names_optimizers_from_the_registry() -> None:
    spec = resolve_spec("digits-mlp", overrides=["optimizer.name=lamb", "betas=[0.9, 0.98]"])
    assert spec.recipe.optimizer.name == "lamb" and spec.recipe.optimizer.betas == (0.9, 0.98)
    with pytest.raises(SpecError, match="adamw"):  # the error lists the registered names
        resolve_spec("digits-mlp", overrides=["optimizer.name=adamx"])
    with pytest.raises(SpecError, match=r"betas \[0.9, 1.0\]: each must be in \[0, 1\)"):
        resolve_spec("digits-mlp", overrides=["betas=[0.9, 1.0]"])


def test_bf16_precision_runs_forward_in_bfloat16_and_fp32_leaves_it_alone() -> None:
    from dmlbench.train.hardware import autocast_for

    layer, x = nn.Linear(4, 2), torch.randn(3, 4)
    with autocast_for("bf16", torch.device("cpu"))():
        assert layer(x).dtype == torch.bfloat16
    with autocast_for("fp32", torch.device("cpu"))():
        assert layer(x).dtype == torch.float32
    assert layer.weight.dtype == torch.float32  # the weights stay fp32


def test_tf32_is_refused_in_one_line_on_a_device_without_tensor_cores() -> None:
    from dmlbench.errors import SpecError
    from dmlbench.train.hardware import autocast_for

    before = torch.get_float32_matmul_precision()
    with pytest.raises(SpecError, match=r"has no TF32 tensor cores.*use precision=fp32"):
        autocast_for("tf32", torch.device("cpu"))
    assert torch.get_float32_matmul_precision() == before  # nothing changed on the way


def test_the_l2_penalty_counts_weight_matrices_and_kernels_only() -> None:
    from dmlbench.optim import l2_penalty

    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    weight = model[0].weight
    expected = 0.5 * 0.1 * (weight * weight).sum().item()  # not the bias, not the norm
    penalty = l2_penalty(model, 0.1)
    assert penalty.item() == pytest.approx(expected)
    penalty.backward()
    assert torch.allclose(weight.grad, 0.1 * weight)  # its gradient is c·w
    assert float(l2_penalty(nn.BatchNorm1d(2), 0.1)) == 0.0  # nothing to penalise
