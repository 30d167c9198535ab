"""Joining a process group: the one place a worker (training, micro-benchmark or Dask
task) finds its rank and device and calls ``init_process_group``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT = timedelta(minutes=10)


@dataclass(frozen=True)
class Member:
    """Where the launcher placed this process (torch elastic's ``RANK``... variables)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @classmethod
    def from_env(cls, cuda: bool) -> Member:
        """This process's place; with ``cuda`` its GPU is the local rank's, made current."""
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        world = int(os.environ.get("WORLD_SIZE", 1))
        return cls(int(os.environ.get("RANK", 0)), world, local_rank, device)


def join_group(
    backend: str,
    *,
    rank: int,
    world_size: int,
    threads: int | None = None,
    store: dist.Store | None = None,
    timeout: timedelta = DEFAULT_TIMEOUT,
) -> None:
    """Set torch's intra-op threads, then join the group (a no-op when already joined).
    Without ``store`` the rendezvous is the launcher's (``MASTER_ADDR``/``MASTER_PORT``)."""
    if threads:
        torch.set_num_threads(threads)
    if dist.is_initialized():
        return
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
