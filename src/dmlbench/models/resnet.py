"""ResNets for 32×32 images, written out so dmlbench does not depend on torchvision.

- ``m1``: He et al. 2015, "Deep Residual Learning", CIFAR variant: 6n+2 layers, basic
  blocks, three stages of 16/32/64 channels, parameter-free shortcuts (option A:
  stride-2 subsampling and zero-padded channels).
- ``m2``: He et al. 2016, "Identity Mappings in Deep Residual Networks": the same
  layout with pre-activation blocks (BN-ReLU-conv twice), 1×1 projection shortcuts
  where the shape changes, and a final BN-ReLU before pooling.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

Variant = Literal["m1", "m2"]


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)


def init_conv_bn(model: nn.Module) -> None:
    """He et al.'s initialisation: convolutions Kaiming-normal (fan-out), batch norms
    the identity."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


class PadShortcut(nn.Module):
    """Option A shortcut: subsample spatially and zero-pad the new channels."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.extra = out_channels - in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))


class BasicBlock(nn.Module):
    """He et al. 2015 block: conv-BN-ReLU-conv-BN, add, ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = _conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        changes = stride != 1 or in_channels != out_channels
        self.shortcut: nn.Module = (
            PadShortcut(in_channels, out_channels, stride) if changes else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class PreActBlock(nn.Module):
    """He et al. 2016 block: BN-ReLU-conv-BN-ReLU-conv, add (no activation after)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = _conv3x3(in_channels, out_channels, stride)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv2 = _conv3x3(out_channels, out_channels)
        changes = stride != 1 or in_channels != out_channels
        self.shortcut: nn.Module | None = (
            nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False) if changes else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(x))
        # The projection sees the pre-activated input, as in the paper's full pre-activation.
        shortcut = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + shortcut


class CifarResNet(nn.Module):
    """6n+2-layer ResNet for 32×32 inputs; ``depth`` in {20, 32, 44, 56, 110, ...}."""

    def __init__(
        self, depth: int = 20, variant: Variant = "m1", num_classes: int = 10, in_channels: int = 3
    ) -> None:
        super().__init__()
        if (depth - 2) % 6 or depth < 8:
            raise ValueError(f"ResNet depth must be 6n+2 with n ≥ 1, got {depth}")
        blocks = (depth - 2) // 6
        block = BasicBlock if variant == "m1" else PreActBlock
        self.variant = variant
        self.stem = _conv3x3(in_channels, 16)
        self.stem_bn = nn.BatchNorm2d(16) if variant == "m1" else None
        layers: list[nn.Module] = []
        channels = 16
        for stage, width in enumerate((16, 32, 64)):
            for index in range(blocks):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(block(channels, width, stride))
                channels = width
        self.layers = nn.Sequential(*layers)
        self.final_bn = nn.BatchNorm2d(channels) if variant == "m2" else None
        self.fc = nn.Linear(channels, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        init_conv_bn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.stem(x)
        if self.stem_bn is not None:
            out = F.relu(self.stem_bn(out))
        out = self.layers(out)
        if self.final_bn is not None:
            out = F.relu(self.final_bn(out))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)
