"""Small fully connected models: an MLP and the linear model of logistic regression."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """Flatten, then Linear-ReLU for each hidden width, then a Linear classifier."""

    def __init__(self, in_features: int, hidden: list[int], num_outputs: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        layers.append(nn.Linear(width, num_outputs))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Linear(nn.Module):
    """``w·x + b``, one output per class (one score for a ±1 binary task)."""

    def __init__(self, in_features: int, num_outputs: int, zero_init: bool = True) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(in_features, num_outputs)
        if zero_init:  # logistic regression's usual start; makes runs identical across seeds
            nn.init.zeros_(self.fc.weight)
            nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flatten(x))
