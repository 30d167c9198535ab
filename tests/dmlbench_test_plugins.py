"""A user's task module, as a plugin: tasks whose model misbehaves on purpose.

``crash-kill`` SIGKILLs rank 1 during its 6th forward pass; ``crash-raise`` raises
there instead; ``crash-hang`` sleeps there for an hour; ``crash-memory`` joins the
memory cgroup named by ``DMLBENCH_TEST_CGROUP`` there and fills more than its limit, so
that the kernel's out-of-memory killer kills it; ``user-blobs`` is an ordinary user
task (open division).
"""

from __future__ import annotations

import os
import signal
import time

import torch
from torch import nn

from dmlbench.models import MLPOptions, ModelEntry, register_model
from dmlbench.models.mlp import MLP
from dmlbench.spec.recipe import ModelSpec, Recipe, StrictModel, WarmupStepSchedule
from dmlbench.tasks import TaskDefinition, get_task, register_task


class FaultyOptions(StrictModel):
    how: str = "kill"
    at_forward: int = 6
    rank: int = 1
    message: str = "deliberate failure in the user's model"


class Faulty(nn.Module):
    def __init__(self, options: FaultyOptions, features: int, outputs: int) -> None:
        super().__init__()
        self.options, self.calls = options, 0
        self.net = MLP(features, [16], outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        mine = int(os.environ.get("RANK", 0)) == self.options.rank
        if mine and self.training and self.calls == self.options.at_forward:
            if self.options.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.options.how == "hang":
                time.sleep(3600)
            if self.options.how == "memory":
                cgroup = os.environ["DMLBENCH_TEST_CGROUP"]
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
                    procs.write(str(os.getpid()))
                kept = [torch.ones(2**20) for _ in range(1024)]  # 4 MiB each, written
                raise ValueError(f"{len(kept)} MiB held under the cgroup's limit")
            raise ValueError(self.options.message)
        return self.net(x)


def _build(options, shape, outputs):
    return Faulty(options, shape[0], outputs)


register_model("faulty", ModelEntry(FaultyOptions, _build))

_blobs = get_task("synthetic-mlp")
for how in ("kill", "raise", "hang", "memory"):
    register_task(
        TaskDefinition(
            name=f"crash-{how}",
            summary="fails on purpose",
            dataset="synthetic",
            recipe=Recipe(
                model=ModelSpec(name="faulty", options={"how": how}),
                local_batch=16,
                max_epochs=50,
                schedule=WarmupStepSchedule(lr_per_sample=0.001),
                target=1.0,
            ),
            load=_blobs.load,
        ),
        replace=True,
    )

register_task(
    TaskDefinition(
        name="user-blobs",
        summary="a user's own task",
        dataset="synthetic",
        recipe=Recipe(
            model=ModelSpec(name="mlp", options=MLPOptions(hidden=[8]).model_dump()),
            local_batch=64,
            max_epochs=2,
            schedule=WarmupStepSchedule(lr_per_sample=0.01 / 64),
            target=0.5,
        ),
        load=_blobs.load,
    ),
    replace=True,
)
