"""The ImageNet model zoo: parameter counts equal the published ones exactly, FLOPs per
224×224 image agree with the published multiply-add counts, and each model trains."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dmlbench.models import build_model
from dmlbench.models.imagenet import VGG16, AlexNet, ImageNetResNet, VisionTransformer
from dmlbench.spec.recipe import ModelSpec

# (parameters, GMACs per 224×224 image): torchvision's model documentation, whose
# figures are the papers' architectures (its "GFLOPS" column counts multiply-adds)
PUBLISHED = {
    "resnet18": (11_689_512, 1.81),
    "resnet34": (21_797_672, 3.66),
    "resnet50": (25_557_032, 4.09),
    "resnet101": (44_549_160, 7.80),
    "resnet152": (60_192_808, 11.51),
    "resnext50_32x4d": (25_028_904, 4.23),
    "resnext101_32x8d": (88_791_336, 16.41),
    "vgg16": (138_357_544, 15.47),
    "alexnet": (61_100_840, 0.71),
    "vit_b_16": (86_567_656, 17.56),
}


def _model(name: str) -> torch.nn.Module:
    if name.startswith("resnet"):
        return ImageNetResNet(int(name.removeprefix("resnet")))
    if name.startswith("resnext"):
        depth, shape = name.removeprefix("resnext").split("_")
        groups, width = shape.split("x")
        return ImageNetResNet(int(depth), groups=int(groups), width_per_group=int(width[:-1]))
    return {"vgg16": VGG16, "alexnet": AlexNet, "vit_b_16": VisionTransformer}[name]()


@pytest.mark.parametrize("name", PUBLISHED)
def test_parameters_and_flops_are_the_published_ones(name: str) -> None:
    parameters, gmacs = PUBLISHED[name]
    with torch.device("meta"):  # shapes only: no memory, no arithmetic
        model = _model(name)
        image = torch.empty(1, 3, 224, 224)
    assert sum(p.numel() for p in model.parameters()) == parameters
    with FlopCounterMode(display=False) as counter:
        model.eval()(image)
    assert counter.get_total_flops() == pytest.approx(2 * gmacs * 1e9, rel=0.02)


def test_zero_init_residual_starts_every_block_as_the_identity() -> None:
    torch.manual_seed(0)
    model = ImageNetResNet(50, 10, zero_init_residual=True)
    gammas = [block.last_norm().weight for block in model.blocks]
    assert len(gammas) == 16 and all(torch.count_nonzero(g) == 0 for g in gammas)
    plain = ImageNetResNet(50, 10)
    assert all(torch.all(block.last_norm().weight == 1) for block in plain.blocks)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("imagenet-resnet", {"depth": 18, "zero_init_residual": True}),
        ("imagenet-resnet", {"depth": 50, "groups": 8, "width_per_group": 4}),
        ("vgg16", {}),
        ("alexnet", {}),
        ("vit", {"patch": 8, "width": 32, "depth": 2, "heads": 4, "mlp": 64}),
    ],
)
def test_each_registered_model_builds_from_a_spec_and_trains(name: str, options: dict) -> None:
    """Built from a run spec's model section for 64×64 images and 4 classes: a training
    step gives every parameter a finite gradient, and the step moves the outputs."""
    torch.manual_seed(0)
    model = build_model(ModelSpec(name=name, options=options), (3, 64, 64), 4)
    x, y = torch.randn(4, 3, 64, 64), torch.arange(4)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
    assert sum(float(g.norm()) for g in grads if g is not None) > 0
    model.eval()
    before = model(x).detach()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
    assert not torch.allclose(model(x), before)


def test_impossible_shapes_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="choose a depth of"):
        ImageNetResNet(42)
    from dmlbench.errors import SpecError

    with pytest.raises(SpecError, match="basic blocks, which do not group"):
        build_model(
            ModelSpec(name="imagenet-resnet", options={"depth": 18, "groups": 32}),
            (3, 224, 224),
            10,
        )

    with pytest.raises(SpecError, match="into 5 heads"):
        build_model(ModelSpec(name="vit", options={"heads": 5}), (3, 224, 224), 10)
