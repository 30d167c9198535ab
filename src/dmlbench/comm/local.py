"""Exchanges whose replicas drift apart between agreements (open division).

``local-sgd``: H local steps, then the replicas' parameters are averaged (torch's
``model_averaging.utils.average_parameters``); post-local SGD with ``sync_epochs`` of
synchronous SGD first. ``gossip``: decentralised SGD, each worker mixing its
parameters with its neighbours' in a graph after every step, point to point.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.distributed as dist
from pydantic import Field
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from dmlbench.comm.collectives import world_size
from dmlbench.comm.sync import AllReduceExchange
from dmlbench.strict import StrictModel


def average_replicas(params: list[nn.Parameter]) -> int:
    """Give every worker the average of the workers' ``params`` (torch's
    ``average_parameters``: one coalesced all-reduce); the bytes handed to it."""
    if world_size() == 1:
        return 0
    from torch.distributed.algorithms.model_averaging.utils import average_parameters

    average_parameters(iter(params), dist.group.WORLD)  # type: ignore[arg-type]
    return sum(p.numel() * p.element_size() for p in params)


class LocalSGDOptions(StrictModel):
    period: int = Field(4, ge=1, le=100_000, description="H: local steps between averages")
    sync_epochs: float = Field(
        0.0, ge=0.0, description="post-local SGD: synchronous SGD for the first E epochs"
    )


class ReplicaExchange(AllReduceExchange):
    """Each worker keeps a replica of its own and steps on its own gradients; the
    replicas are mixed now and then, not every step: an approximation of synchronous
    SGD (open division), whose stop votes are spread out as its messages are."""

    exact = False
    vote_every = 16
    modules = ("torch.distributed.algorithms.model_averaging.utils",)


class LocalSGDExchange(ReplicaExchange):
    """Local SGD (Stich 2019; Lin et al. 2020 for post-local SGD): every worker steps on
    its own gradients; every H steps the replicas' parameters are averaged (torch's
    ``average_parameters``, one coalesced all-reduce). With ``sync_epochs`` the first E
    epochs are synchronous SGD. Before an evaluation the replicas are averaged, so the
    model evaluated is the one the workers agree on. With H = 1 and SGD it is
    synchronous SGD: averaging is linear, and so is each replica's update."""

    name = "local-sgd"
    Options = LocalSGDOptions

    def prepare(self, model: nn.Module) -> nn.Module:
        prepared = super().prepare(model)
        options = self.options_as(LocalSGDOptions)
        self.period = options.period
        self.sync_steps = round(options.sync_epochs * self.steps_per_epoch)
        self.step = 0
        return prepared

    def exchange(self, stop: bool | None) -> bool:
        if self.step < self.sync_steps:
            return super().exchange(stop)  # synchronous SGD first
        return self._vote_alone(stop)

    def after_step(self) -> bool:
        self.step += 1
        if self.step <= self.sync_steps or (self.step - self.sync_steps) % self.period:
            return False
        self._average()
        return True

    def _average(self) -> None:
        self.bytes_sent += average_replicas(self.params)

    def sync_buffers(self, model: nn.Module) -> None:
        self._average()  # evaluate the model the replicas agree on
        super().sync_buffers(model)


Topology = Literal["ring", "torus", "exponential", "complete"]


def torus_shape(world: int) -> tuple[int, int]:
    """Rows × columns of the squarest torus with ``world`` nodes (a ring when prime)."""
    rows = max(d for d in range(1, math.isqrt(world) + 1) if world % d == 0)
    return rows, world // rows


def gossip_peers(topology: str, rank: int, world: int) -> tuple[list[int], list[int]]:
    """(out-peers, in-peers) of ``rank``: whom it sends to and whom it hears from.

    ring: the two neighbours; torus: the four on a rows × columns grid that wraps;
    exponential: rank + 2^k for every 2^k < world (directed, Assran et al. 2019);
    complete: everyone. Every node has as many in-peers as out-peers, and the same
    number as every other node, so uniform weights 1 / (peers + 1) make the mixing
    matrix doubly stochastic.
    """
    if topology == "torus":
        rows, cols = torus_shape(world)
        row, col = divmod(rank, cols)
        around = [
            ((row + dr) % rows) * cols + (col + dc) % cols
            for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))
        ]
        peers = sorted(set(around) - {rank})
        return peers, peers
    if topology == "ring":
        offsets = [1, -1]
    elif topology == "exponential":
        offsets = [2**k for k in range(max(world - 1, 1).bit_length()) if 2**k < world]
    elif topology == "complete":
        offsets = list(range(1, world))
    else:
        raise ValueError(f"unknown gossip topology {topology!r}")
    out = sorted({(rank + o) % world for o in offsets} - {rank})
    into = sorted({(rank - o) % world for o in offsets} - {rank})
    return out, into


def mixing_matrix(topology: str, world: int) -> torch.Tensor:
    """W with W[i, j] the weight node i gives node j's parameters (for tests and docs)."""
    weights = torch.zeros(world, world, dtype=torch.float64)
    for rank in range(world):
        _, into = gossip_peers(topology, rank, world)
        for j in [rank, *into]:
            weights[rank, j] = 1.0 / (len(into) + 1)
    return weights


class GossipOptions(StrictModel):
    topology: Topology = Field("ring", description="the graph workers mix over")


class GossipExchange(ReplicaExchange):
    """Decentralised SGD (Lian et al. 2017), adapt then combine: every worker steps on
    its own gradient, then replaces its parameters by the uniform average of its own
    and its in-peers' (sent with isend/irecv: no all-reduce, no barrier beyond the
    neighbours). An evaluation scores the replicas' average (one all-reduce, counted
    in the bytes) and each worker then goes on from its own weights; the saved model is
    rank 0's. On the complete graph it is synchronous SGD."""

    name = "gossip"
    Options = GossipOptions

    def prepare(self, model: nn.Module) -> nn.Module:
        prepared = super().prepare(model)
        options = self.options_as(GossipOptions)
        world = world_size()
        rank = dist.get_rank() if world > 1 else 0
        self.out_peers, self.in_peers = gossip_peers(options.topology, rank, world)
        self._own: torch.Tensor | None = None
        return prepared

    def exchange(self, stop: bool | None) -> bool:
        return self._vote_alone(stop)  # gradients stay local

    def after_step(self) -> bool:
        if not self.out_peers and not self.in_peers:
            return False
        mine = parameters_to_vector(self.params)
        theirs = [torch.empty_like(mine) for _ in self.in_peers]
        requests = [dist.isend(mine, peer) for peer in self.out_peers]
        requests += [dist.irecv(t, peer) for t, peer in zip(theirs, self.in_peers, strict=True)]
        for request in requests:
            if request is not None:  # None only for a rank outside the group
                request.wait()
        self.bytes_sent += mine.numel() * mine.element_size() * len(self.out_peers)
        for t in theirs:
            mine += t
        vector_to_parameters(mine / (len(theirs) + 1), self.params)
        return True

    def sync_buffers(self, model: nn.Module) -> None:
        if world_size() > 1:
            self._own = parameters_to_vector(self.params)  # a copy, given back afterwards
            self.bytes_sent += average_replicas(self.params)
        super().sync_buffers(model)

    def after_evaluate(self, model: nn.Module) -> None:
        if self._own is not None:
            vector_to_parameters(self._own, self.params)
            self._own = None
