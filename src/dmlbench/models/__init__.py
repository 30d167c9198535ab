"""Model registry: a name, a typed options class, and a builder.

A task's recipe names its model (``recipe.model.name``) with options; options are
validated here before any process starts. Register your own with ``register_model``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

import torch
from pydantic import Field, ValidationError
from torch import nn

from dmlbench.errors import SpecError, unknown
from dmlbench.models.gpt import GPT
from dmlbench.models.imagenet import VGG16, AlexNet, ImageNetResNet, VisionTransformer
from dmlbench.models.mlp import MLP, Linear
from dmlbench.models.resnet import CifarResNet
from dmlbench.models.wide_resnet import WideResNet
from dmlbench.spec.overrides import MODEL_OPTIONS
from dmlbench.spec.recipe import Inputs, ModelSpec, StrictModel

if TYPE_CHECKING:
    from dmlbench.tasks.base import TaskDefinition


class ResNetOptions(StrictModel):
    depth: int = Field(20, ge=8, description="6n+2 layers: 20, 32, 44, 56, 110")
    variant: Literal["m1", "m2"] = Field("m1", description="m1: He 2015; m2: pre-activation")


class WideResNetOptions(StrictModel):
    depth: int = Field(16, ge=10, description="6n+4 layers: 10, 16, 22, 28, 40")
    widen: int = Field(4, ge=1, le=20, description="width multiplier k")
    dropout: float = Field(0.3, ge=0.0, lt=1.0, description="between each block's convs")


class ImageNetResNetOptions(StrictModel):
    depth: Literal[18, 34, 50, 101, 152] = Field(50, description="ResNet-18 to ResNet-152")
    zero_init_residual: bool = Field(
        False, description="each block's last batch-norm γ starts at 0 (Goyal et al.)"
    )
    groups: int = Field(1, ge=1, description="ResNeXt's cardinality: 32 for ResNeXt 32×4d")
    width_per_group: int = Field(
        64, ge=1, description="channels of each group at the first stage: 4 for 32×4d"
    )


class NoOptions(StrictModel):
    pass


class ViTOptions(StrictModel):
    patch: int = Field(16, ge=1, description="patch side in pixels")
    width: int = Field(768, ge=1, description="embedding width")
    depth: int = Field(12, ge=1, description="transformer blocks")
    heads: int = Field(12, ge=1, description="attention heads (divide the width)")
    mlp: int = Field(3072, ge=1, description="hidden width of each block's MLP")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


class GPTOptions(StrictModel):
    width: int = Field(768, ge=1, description="embedding width (GPT-2 small: 768)")
    depth: int = Field(12, ge=1, description="decoder blocks")
    heads: int = Field(12, ge=1, description="attention heads (divide the width)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    checkpoint_activations: bool = Field(
        False, description="recompute each block in backward: less memory, more compute"
    )


class MLPOptions(StrictModel):
    hidden: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [128], description="hidden widths"
    )


class LinearOptions(StrictModel):
    zero_init: bool = True


@dataclass(frozen=True)
class ModelEntry:
    options: type[StrictModel]
    build: Callable[[StrictModel, tuple[int, ...], int], nn.Module]
    """(options, input shape of one example, number of outputs) → module"""
    summary: str = ""  # one line for `dmlbench models`
    inputs: tuple[Inputs, ...] = ("features", "image")  # what it takes (an image flattened)


MODELS: dict[str, ModelEntry] = {}
IMAGES: tuple[Inputs, ...] = ("image",)  # a convolutional model's, or a ViT's patches


def register_model(name: str, entry: ModelEntry) -> None:
    MODELS[name] = entry
    MODEL_OPTIONS[name] = tuple(entry.options.model_fields)  # `--set heads=8` finds them


def _build_resnet(options: StrictModel, shape: tuple[int, ...], outputs: int) -> nn.Module:
    assert isinstance(options, ResNetOptions)
    return CifarResNet(options.depth, options.variant, outputs, in_channels=shape[0])


def _build_wide_resnet(options: StrictModel, shape: tuple[int, ...], outputs: int) -> nn.Module:
    assert isinstance(options, WideResNetOptions)
    return WideResNet(options.depth, options.widen, options.dropout, outputs, in_channels=shape[0])


def _build_imagenet_resnet(options: StrictModel, shape: tuple[int, ...], outputs: int) -> nn.Module:
    assert isinstance(options, ImageNetResNetOptions)
    return ImageNetResNet(num_classes=outputs, in_channels=shape[0], **options.model_dump())


def _build_vgg16(options: StrictModel, shape: tuple[int, ...], outputs: int) -> nn.Module:
    return VGG16(outputs, in_channels=shape[0])


def _build_alexnet(options: StrictModel, shape: tuple[int, ...], outputs: int) -> nn.Module:
    return AlexNet(outputs, in_channels=shape[0])


def _build_vit(options: StrictModel, shape: tuple[int, ...], outputs: int) -> nn.Module:
    assert isinstance(options, ViTOptions)
    return VisionTransformer(outputs, image=shape[-1], in_channels=shape[0], **options.model_dump())


def _build_gpt(options: StrictModel, shape: tuple[int, ...], outputs: int) -> nn.Module:
    """``shape`` is (context,): tokens a sequence holds; ``outputs`` the vocabulary."""
    assert isinstance(options, GPTOptions)
    return GPT(outputs, shape[0], **options.model_dump())


def _build_mlp(options: StrictModel, shape: tuple[int, ...], outputs: int) -> nn.Module:
    assert isinstance(options, MLPOptions)
    return MLP(math.prod(shape), options.hidden, outputs)


def _build_linear(options: StrictModel, shape: tuple[int, ...], outputs: int) -> nn.Module:
    assert isinstance(options, LinearOptions)
    return Linear(math.prod(shape), outputs, options.zero_init)


for _name, _entry in {
    "resnet": ModelEntry(ResNetOptions, _build_resnet, "CIFAR ResNet (He et al. 2015)", IMAGES),
    "wide-resnet": ModelEntry(
        WideResNetOptions, _build_wide_resnet, "wide ResNet (Zagoruyko and Komodakis 2016)", IMAGES
    ),
    "imagenet-resnet": ModelEntry(
        ImageNetResNetOptions, _build_imagenet_resnet, "ImageNet ResNet-18 to 152, ResNeXt", IMAGES
    ),
    "vgg16": ModelEntry(NoOptions, _build_vgg16, "VGG-16 (Simonyan and Zisserman 2015)", IMAGES),
    "alexnet": ModelEntry(NoOptions, _build_alexnet, "AlexNet (Krizhevsky et al. 2012)", IMAGES),
    "vit": ModelEntry(
        ViTOptions, _build_vit, "vision transformer (Dosovitskiy et al. 2021)", IMAGES
    ),
    "gpt": ModelEntry(GPTOptions, _build_gpt, "GPT-2-style decoder on token ids", ("tokens",)),
    "mlp": ModelEntry(MLPOptions, _build_mlp, "multi-layer perceptron on flat features"),
    "linear": ModelEntry(LinearOptions, _build_linear, "a linear model (logistic regression)"),
}.items():
    register_model(_name, _entry)


def validate_model_spec(spec: ModelSpec) -> StrictModel:
    entry = MODELS.get(spec.name)
    if entry is None:
        raise SpecError(unknown("model", spec.name, MODELS))
    try:
        options = entry.options.model_validate(spec.options)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"model {spec.name} option {where}: {first['msg']}") from None
    if isinstance(options, ResNetOptions) and (options.depth - 2) % 6:
        raise SpecError(f"ResNet depth must be 6n+2 (20, 32, 44, 56...), got {options.depth}")
    if isinstance(options, WideResNetOptions) and (options.depth - 4) % 6:
        raise SpecError(f"Wide ResNet depth must be 6n+4 (10, 16, 22, 28...), got {options.depth}")
    if isinstance(options, GPTOptions | ViTOptions) and options.width % options.heads:
        raise SpecError(  # refused here, not in every worker as it builds the model
            f"model {spec.name}: the width ({options.width}) must split into "
            f"{options.heads} heads; choose heads that divide it"
        )
    return options


_INPUT_WORDS = {"features": "flat features", "image": "images", "tokens": "token ids"}


def inputs_text(kinds: tuple[Inputs, ...]) -> str:
    """``("features", "image")`` → ``flat features or images``."""
    return " or ".join(_INPUT_WORDS[kind] for kind in kinds)


def check_model_inputs(name: str, task: TaskDefinition) -> None:
    """Refuse, before any worker starts, a model that does not take the task's examples
    (a ResNet on digits' 64 features failed in every worker, inside conv2d)."""
    gives = task.example_inputs()
    takes = MODELS[name].inputs
    if gives is None or gives in takes:
        return
    fits = sorted(model for model, entry in MODELS.items() if gives in entry.inputs)
    raise SpecError(
        f"model {name} takes {inputs_text(takes)}; "
        f"{task.name}'s examples are {_INPUT_WORDS[gives]}: choose {', '.join(fits)} "
        "(`dmlbench models`)"
    )


def parameter_bytes(spec: ModelSpec, input_shape: tuple[int, ...], num_outputs: int) -> int:
    """The bytes of the parameters the spec's model has, from a build on the meta device:
    none of them allocated, so a model larger than the machine is measured too."""
    with torch.device("meta"):
        model = build_model(spec, input_shape, num_outputs)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def build_model(spec: ModelSpec, input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    """The model a spec names; a shape its options cannot take (heads that do not divide
    the width, an image the patches do not tile) is refused in one line."""
    try:
        return MODELS[spec.name].build(validate_model_spec(spec), input_shape, num_outputs)
    except ValueError as error:
        raise SpecError(f"model {spec.name}: {error}") from None
