"""The worker's place in the world: rank, device, backend, threads, process group."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from dmlbench.comm.group import Member, join_group
from dmlbench.spec import RunSpec
from dmlbench.train.hardware import uses_cuda


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    node: int = 0  # which node (host) this worker runs on: torch elastic's group rank
    nodes: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def node_of(self, rank: int) -> int:
        """The node a rank runs on: torch's agents number ranks node by node."""
        return rank // max(1, self.world_size // self.nodes)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @classmethod
    def initialize(cls, spec: RunSpec) -> DistContext:
        """Join the process group the launcher set up (``RANK``, ``MASTER_ADDR``... in env)."""
        cuda = uses_cuda(spec.device)
        me = Member.from_env(cuda)
        backend = spec.backend if spec.backend != "auto" else ("nccl" if cuda else "gloo")
        join_group(backend, rank=me.rank, world_size=me.world_size, threads=spec.threads())
        node = int(os.environ.get("GROUP_RANK", 0))
        nodes = int(os.environ.get("GROUP_WORLD_SIZE", 1))
        return cls(me.rank, me.world_size, me.local_rank, me.device, backend, node, nodes)

    def destroy(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
