"""Wide residual networks for 32×32 images (Zagoruyko & Komodakis 2016), written out so
dmlbench does not depend on torchvision.

WRN-d-k: ``(d − 4) / 6`` pre-activation blocks in each of three stages of ``16k``,
``32k`` and ``64k`` channels after a 16-channel stem; each block is BN-ReLU-conv3×3,
dropout, BN-ReLU-conv3×3, with a 1×1 projection shortcut where the shape changes; a
final BN-ReLU, global average pooling and a linear layer. WRN-16-4 (the adadamp
paper's model) has 2,748,890 weights for 10 classes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dmlbench.models.resnet import init_conv_bn


class WideBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, padding=1, bias=False)
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.bn1(x))
        out = self.conv2(F.relu(self.bn2(self.dropout(self.conv1(pre)))))
        return out + (self.shortcut(pre) if self.shortcut is not None else x)


class WideResNet(nn.Module):
    """WRN-``depth``-``widen``; ``depth`` is 6n+4 (10, 16, 22, 28, 40)."""

    def __init__(
        self,
        depth: int = 16,
        widen: int = 4,
        dropout: float = 0.3,
        num_classes: int = 10,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if (depth - 4) % 6 or depth < 10:
            raise ValueError(f"Wide ResNet depth must be 6n+4 with n ≥ 1, got {depth}")
        blocks = (depth - 4) // 6
        self.stem = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        layers: list[nn.Module] = []
        channels = 16
        for stage, width in enumerate((16 * widen, 32 * widen, 64 * widen)):
            for index in range(blocks):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(WideBlock(channels, width, stride, dropout))
                channels = width
        self.layers = nn.Sequential(*layers)
        self.final_bn = nn.BatchNorm2d(channels)
        self.fc = nn.Linear(channels, num_classes)
        init_conv_bn(self)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.final_bn(self.layers(self.stem(x))))
        return self.fc(F.adaptive_avg_pool2d(out, 1).flatten(1))
