"""The standard ImageNet models, written out so dmlbench does not depend on torchvision
(which does not import beside every torch build). Architectures as torchvision defines
them, so that parameter counts equal the published ones exactly:

- ResNet-18/34/50/101/152 (He et al. 2015; torchvision's "v1.5": the stride of a
  bottleneck's downsampling sits on its 3×3 convolution), with the last batch norm of
  every residual branch optionally initialised to zero (Goyal et al. 2017, §5.1: each
  block starts as the identity), and ResNeXt (Xie et al. 2017: the bottleneck's 3×3
  convolution split into ``groups`` of ``width_per_group`` channels; ResNeXt-50 32×4d is
  ``ImageNetResNet(50, groups=32, width_per_group=4)``);
- VGG-16 (Simonyan & Zisserman 2014, configuration D, no batch norm);
- AlexNet (the one-GPU variant of Krizhevsky 2014's "one weird trick", as torchvision);
- ViT-B/16 (Dosovitskiy et al. 2020: 16×16 patches, 12 layers of width 768, 12 heads,
  MLP 3072, a class token), attention on ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from dmlbench.models.resnet import init_conv_bn

RESNET_LAYOUTS: dict[int, tuple[bool, tuple[int, int, int, int]]] = {
    18: (False, (2, 2, 2, 2)),  # (bottleneck?, blocks per stage)
    34: (False, (3, 4, 6, 3)),
    50: (True, (3, 4, 6, 3)),
    101: (True, (3, 4, 23, 3)),
    152: (True, (3, 8, 36, 3)),
}


def _conv_bn(
    in_channels: int, out_channels: int, kernel: int, stride: int = 1, groups: int = 1
) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(
            in_channels, out_channels, kernel, stride, kernel // 2, groups=groups, bias=False
        ),
        nn.BatchNorm2d(out_channels),
    )


class _Block(nn.Module):
    """A residual block: two 3×3 convolutions (basic) or 1×1, 3×3, 1×1 (bottleneck,
    ``4 × planes`` out, the 3×3 in ``groups``), each with its batch norm; a 1×1 projection
    where the shape changes."""

    def __init__(
        self,
        in_channels: int,
        planes: int,
        stride: int,
        bottleneck: bool,
        groups: int = 1,
        width_per_group: int = 64,
    ) -> None:
        super().__init__()
        out_channels = planes * 4 if bottleneck else planes
        if bottleneck:
            width = planes * width_per_group // 64 * groups
            layers = [
                _conv_bn(in_channels, width, 1),
                _conv_bn(width, width, 3, stride, groups),
                _conv_bn(width, out_channels, 1),
            ]
        else:
            layers = [_conv_bn(in_channels, planes, 3, stride), _conv_bn(planes, out_channels, 3)]
        self.branch = nn.ModuleList(layers)
        self.shortcut = (
            _conv_bn(in_channels, out_channels, 1, stride)
            if stride != 1 or in_channels != out_channels
            else nn.Identity()
        )
        self.out_channels = out_channels

    def last_norm(self) -> nn.BatchNorm2d:
        last = self.branch[-1]
        assert isinstance(last, nn.Sequential)
        norm = last[1]
        assert isinstance(norm, nn.BatchNorm2d)
        return norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for index, layer in enumerate(self.branch):
            out = layer(out)
            if index < len(self.branch) - 1:
                out = F.relu(out, inplace=True)
        return F.relu(out + self.shortcut(x), inplace=True)


class ImageNetResNet(nn.Module):
    """ResNet-``depth`` for 224×224 images (any size ≥ 32 works: the pool is adaptive);
    ResNeXt with ``groups`` > 1."""

    def __init__(
        self,
        depth: int,
        num_classes: int = 1000,
        *,
        in_channels: int = 3,
        zero_init_residual: bool = False,
        groups: int = 1,
        width_per_group: int = 64,
    ) -> None:
        super().__init__()
        if depth not in RESNET_LAYOUTS:
            raise ValueError(f"ResNet-{depth}: choose a depth of {sorted(RESNET_LAYOUTS)}")
        bottleneck, counts = RESNET_LAYOUTS[depth]
        if not bottleneck and (groups, width_per_group) != (1, 64):
            raise ValueError(
                f"ResNet-{depth} has basic blocks, which do not group; ResNeXt needs a "
                "bottleneck depth (50, 101 or 152)"
            )
        self.stem = _conv_bn(in_channels, 64, 7, 2)
        blocks: list[_Block] = []
        channels = 64
        for stage, count in enumerate(counts):
            for index in range(count):
                stride = 2 if stage > 0 and index == 0 else 1
                planes = 64 * 2**stage
                blocks.append(_Block(channels, planes, stride, bottleneck, groups, width_per_group))
                channels = blocks[-1].out_channels
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(channels, num_classes)
        init_conv_bn(self)
        if zero_init_residual:
            for block in blocks:
                nn.init.zeros_(block.last_norm().weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.stem(x), inplace=True), 3, 2, 1)
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


VGG16_LAYOUT: Sequence[int | str] = (
    *(64, 64, "pool", 128, 128, "pool"),
    *(256, 256, 256, "pool", 512, 512, 512, "pool", 512, 512, 512, "pool"),
)


class VGG16(nn.Module):
    """VGG-16 (configuration D): 13 3×3 convolutions, three fully connected layers."""

    def __init__(self, num_classes: int = 1000, *, in_channels: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = in_channels
        for item in VGG16_LAYOUT:
            if item == "pool":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                assert isinstance(item, int)
                layers += [nn.Conv2d(channels, item, 3, padding=1), nn.ReLU(inplace=True)]
                channels = item
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 7)
        return self.classifier(torch.flatten(x, 1))


class AlexNet(nn.Module):
    """AlexNet as torchvision has it: five convolutions (64, 192, 384, 256, 256)."""

    def __init__(self, num_classes: int = 1000, *, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 64, 11, 4, 2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
        )
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 6)
        return self.classifier(torch.flatten(x, 1))


class _EncoderBlock(nn.Module):
    """Pre-norm transformer block: attention, then an MLP, each added back."""

    def __init__(self, width: int, heads: int, mlp: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(width, mlp), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = (
            self.qkv(self.norm1(x))
            .view(batch, tokens, 3, self.heads, width // self.heads)
            .permute(2, 0, 3, 1, 4)
        )
        drop = self.dropout if self.training else 0.0
        attended = F.scaled_dot_product_attention(q, k, v, dropout_p=drop)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """ViT: ``patch``² patches embedded to ``width``, a class token, learned positions,
    ``depth`` pre-norm blocks, a linear head on the class token."""

    def __init__(
        self,
        num_classes: int = 1000,
        *,
        image: int = 224,
        patch: int = 16,
        width: int = 768,
        depth: int = 12,
        heads: int = 12,
        mlp: int = 3072,
        dropout: float = 0.0,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if image % patch or width % heads:
            raise ValueError(
                f"ViT: the image ({image}) must split into {patch}-pixel patches and the "
                f"width ({width}) into {heads} heads"
            )
        self.patch = nn.Conv2d(in_channels, width, patch, patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, width))
        self.position = nn.Parameter(torch.empty(1, (image // patch) ** 2 + 1, width))
        nn.init.normal_(self.position, std=0.02)
        self.blocks = nn.Sequential(
            *(_EncoderBlock(width, heads, mlp, dropout) for _ in range(depth))
        )
        self.norm = nn.LayerNorm(width, eps=1e-6)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(len(x), -1, -1), x], dim=1) + self.position
        return self.head(self.norm(self.blocks(x))[:, 0])
