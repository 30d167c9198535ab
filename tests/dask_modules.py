"""Modules the Dask tests train. A module of its own so spawned Dask worker processes can
import them (PYTHONPATH holds tests/, see conftest)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from dmlbench.dask.dampers import Constant, TrainState


class HiddenLayer(nn.Module):
    """The issue's example regressor: one hidden layer."""

    def __init__(self, features: int = 10, hidden: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Broken(nn.Module):
    def __init__(self, features: int = 10) -> None:
        super().__init__()
        raise RuntimeError("this module cannot be built")


class DiesOnce(nn.Module):
    """Kills the worker process it runs in (once: it deletes ``marker`` first) after
    ``after`` forward passes in that process."""

    def __init__(
        self, features: int = 64, classes: int = 10, marker: str = "", after: int = 5
    ) -> None:
        super().__init__()
        self.fc = nn.Linear(features, classes)
        self.marker = marker
        self.after = after
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.after and self.marker and x.shape[0] > 2:
            try:
                Path(self.marker).unlink()
            except FileNotFoundError:
                pass
            else:
                os._exit(17)  # a hard worker death, no cleanup, no exception
        return self.fc(x)


@dataclass(frozen=True)
class KillsAWorker(Constant):
    """A constant batch that, asked before update ``at`` (the driver asks its damper
    between updates), SIGKILLs the worker process whose pid is in ``pid_file`` (once: it
    deletes the file), waits until it is gone, then ``settle_s`` more seconds."""

    at: int = 3
    pid_file: str = ""
    settle_s: float = 0.0

    def wanted(self, state: TrainState) -> float:
        path = Path(self.pid_file)
        if state.updates == self.at and path.exists():
            pid = int(path.read_text())
            path.unlink()
            os.kill(pid, signal.SIGKILL)
            while Path(f"/proc/{pid}").exists():  # reaped by its nanny
                time.sleep(0.01)
            time.sleep(self.settle_s)
        return super().wanted(state)
