"""The all-reduce micro-benchmark: the worker function and the figures it yields.

On an emulated cluster (``nodes`` > 1) each size is measured three ways, each row
tagged with its ``scope``: ``all`` (one all-reduce over every rank: gloo's flat ring,
what training does), ``node`` (every node all-reduces among its own workers at once:
the intra-node link alone) and ``hierarchical`` (reduce to each node's first worker,
all-reduce among those, broadcast back: the two-level algorithm).

Definitions (NCCL-tests'): for an all-reduce of ``S`` bytes taking ``t`` seconds on
``n`` ranks, algorithm bandwidth ``algbw = S / t`` and bus bandwidth
``busbw = algbw × 2(n−1)/n``, the rate each link must sustain in a ring: comparable
across worker counts and with a link's nominal speed.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from dmlbench.comm.collectives import all_gather_floats
from dmlbench.comm.group import Member, join_group
from dmlbench.spec.bench import ELEMENT_BYTES, CommBenchSpec


def bus_factor(workers: int) -> float:
    """All-reduce bus-bandwidth factor ``2(n−1)/n`` (0 for one rank: nothing moves)."""
    return 2 * (workers - 1) / workers


def summarize_size(size: int, per_rank: list[list[float]], workers: int) -> dict[str, Any]:
    """One message size: a repeat takes as long as its slowest rank."""
    latencies = [max(rank[i] for rank in per_rank) for i in range(len(per_rank[0]))]
    median = statistics.median(latencies)
    algbw = size / median if median > 0 else 0.0
    return {
        "bytes": size,
        "repeats": len(latencies),
        "latency_s": median,
        "latency_min_s": min(latencies),
        "latency_max_s": max(latencies),
        "latency_std_s": statistics.stdev(latencies) if len(latencies) > 1 else 0.0,
        "algbw": algbw,
        "busbw": algbw * bus_factor(workers),
    }


class Scope:
    """How one all-reduce is done: over every rank, within each node, or in two levels."""

    def __init__(self, name: str, rank: int, world: int, per_node: int) -> None:
        self.name = name
        self.leader = rank // per_node * per_node  # the node's first rank
        self.is_leader = rank == self.leader
        self.ranks = per_node if name == "node" else world
        self.node_group = self.leaders = None
        if name != "all":  # every rank creates every group, in one order (torch's rule)
            starts = range(0, world, per_node)
            groups = [dist.new_group(list(range(s, s + per_node))) for s in starts]
            self.node_group = groups[rank // per_node]
            if name == "hierarchical":
                self.leaders = dist.new_group(list(starts))

    def all_reduce(self, tensor: torch.Tensor) -> None:
        if self.name == "all":
            dist.all_reduce(tensor)
        elif self.name == "node":
            dist.all_reduce(tensor, group=self.node_group)
        else:
            dist.reduce(tensor, dst=self.leader, group=self.node_group)
            if self.is_leader:
                dist.all_reduce(tensor, group=self.leaders)
            dist.broadcast(tensor, src=self.leader, group=self.node_group)


def _iterations(
    spec: CommBenchSpec, tensor: torch.Tensor, device: torch.device, cuda: bool, scope: Scope
) -> int:
    """All-reduces per timed repeat, so that a repeat lasts about ``spec.repeat_s``.

    One small all-reduce lasts less than the skew with which ranks leave a barrier;
    timing a run of them (as NCCL-tests does) measures the operation, not the skew.
    The warm-up all-reduces estimate its cost; ranks agree on the slowest estimate.
    """
    start = time.perf_counter()
    for _ in range(max(1, spec.warmup)):
        scope.all_reduce(tensor)
    if cuda:
        torch.cuda.synchronize(device)
    estimate = (time.perf_counter() - start) / max(1, spec.warmup)
    slowest = max(row[0] for row in all_gather_floats([estimate], device))
    return spec.iterations(slowest)


def _check(tensor: torch.Tensor, world: int, inner: int, size: int) -> None:
    """Every rank contributed the same values: the result must be exactly predictable."""
    expected = 1.0 / inner * world if inner == 1 else 1.0 / inner
    ends = (tensor[0].item(), tensor[-1].item())
    if any(abs(v - expected) > 1e-4 * abs(expected) for v in ends):
        raise RuntimeError(f"all-reduce of {size} bytes returned {ends}, expected {expected}")


def _measure(
    spec: CommBenchSpec, scope: Scope, size: int, device: torch.device, cuda: bool
) -> dict[str, Any]:
    """Time ``spec.repeats`` repeats of all-reduces of ``size`` bytes in ``scope``."""
    tensor = torch.ones(size // ELEMENT_BYTES, dtype=torch.float32, device=device)
    inner = _iterations(spec, tensor, device, cuda, scope)
    times = []
    for _ in range(spec.repeats):
        tensor.fill_(1.0 / inner)  # after `inner` sums every element is world / inner·…
        dist.barrier()
        start = time.perf_counter()
        for _ in range(inner):
            scope.all_reduce(tensor)
            if inner > 1:
                tensor.div_(scope.ranks)  # keep values bounded; costs far less than a send
        if cuda:
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) / inner)
    _check(tensor, scope.ranks, inner, size)
    row = summarize_size(size, all_gather_floats(times, device), scope.ranks)
    return {**row, "iterations": inner}


@record
def comm_bench_worker(spec_json: str, results_file: str) -> None:
    """Time all-reduces of every size; rank 0 writes the per-size summary to
    ``results_file`` (in the run's folder)."""
    spec = CommBenchSpec.model_validate(json.loads(spec_json))
    cuda = spec.device == "cuda" or (spec.device == "auto" and spec.backend == "nccl")
    me = Member.from_env(cuda)
    rank, world, device = me.rank, me.world_size, me.device
    join_group(spec.backend, rank=rank, world_size=world, threads=spec.threads())
    try:
        scopes = ["all", "node", "hierarchical"] if spec.nodes > 1 else ["all"]
        rows = []
        for name in scopes:
            scope = Scope(name, rank, world, spec.per_node)
            for size in spec.sizes():
                row = _measure(spec, scope, size, device, cuda)
                rows.append({**row, "scope": name} if spec.nodes > 1 else row)
        if rank == 0:
            Path(results_file).write_text(json.dumps(rows, indent=1))
    finally:
        dist.destroy_process_group()
