"""What a worker measures about its run beyond its phase timers: the run's clock, the
CPU clocks of the contention check, memory peaks with and without evaluation, page
faults in steady steps, and graphs ``torch.compile`` made inside the clock. The trainer
marks the moments (clock start, end of warm-up, each epoch's steps); ``run_stop``
gathers :meth:`RunMeasures.of_this_rank` from every rank."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dmlbench.comm.sharded import shard_units
from dmlbench.models.flops import forked_rng, step_flops
from dmlbench.results.contention import FIELDS as CONTENTION_FIELDS
from dmlbench.system import machine_cpu_s, machine_id, thread_wait_s
from dmlbench.train.allocator import release_free_heap
from dmlbench.train.hardware import FaultCounter, compiled_graphs, peak_memory_bytes
from dmlbench.train.memory import (
    AsOnDevice,
    SavedForBackward,
    local_bytes,
    optimizer_state,
    peak_bytes,
    resident_bytes,
    restart_peak,
    state_slots,
    step_temporary_bytes,
)


def cpu_sample(helpers_s: float = 0.0) -> list[float]:
    """Clocks for the contention check: wall, this process's CPU (with ``helpers_s``, the
    CPU of processes its exchange started) and CPU wait, and the machine's busy and
    stolen core-seconds (see :mod:`dmlbench.results.contention`)."""
    busy, steal = machine_cpu_s()
    cpu = time.process_time() + helpers_s
    return [time.perf_counter(), cpu, thread_wait_s(), busy, steal]


class RunMeasures:
    """One worker's measurements of its run; made before the model exists, so that the
    resident memory at the start is the process's own."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        if device.type == "cpu":
            release_free_heap()  # the start is what the process holds, not what it freed
        self.resident_start = resident_bytes(device)
        self.training_peak = 0  # the most resident memory while steps ran (not evaluation)
        self.whole_peak = 0  # the run's peak before each restart of the steps' peak
        self.faults = FaultCounter()  # over the steady steps
        self.graphs = 0  # compiled_graphs() when the clock started
        self.start = 0.0  # perf_counter() when the run's clock started
        self.cpu_start: list[float] = []  # cpu_sample() when the timed steps began
        self.warm: list[float] | None = None  # phase totals when warm-up ended
        self.helpers_s: Callable[[], float] = lambda: 0.0  # CPU of the worker's helpers

    def cpu_now(self) -> list[float]:
        return cpu_sample(self.helpers_s())

    def start_clock(self) -> None:
        self.graphs = compiled_graphs()
        self.start = time.perf_counter()
        self.cpu_start = self.cpu_now()

    def elapsed(self) -> float:
        """Seconds since the run's clock started."""
        return time.perf_counter() - self.start

    def warmed_up(self, phases: list[float]) -> None:
        """Warm-up ended with these phase totals: the steady clocks start here."""
        self.warm = phases
        self.cpu_start = self.cpu_now()
        self.faults.restart()

    @contextmanager
    def steps(self) -> Iterator[None]:
        """An epoch's steps: their own memory peak, without evaluation's, and their page
        faults."""
        self.whole_peak = max(self.whole_peak, peak_bytes(self.device))
        restart_peak(self.device)
        self.faults.resume()
        try:
            yield
        finally:
            self.faults.pause()
            self.training_peak = max(self.training_peak, peak_bytes(self.device))

    def recompiles(self) -> int:
        """Graphs ``torch.compile`` made inside the clock: their compile time is in the
        steps it measured."""
        return compiled_graphs() - self.graphs

    def of_this_rank(self, phases: list[float], steps: int, excluded: int) -> dict[str, Any]:
        """This rank's share of ``run_stop``: whole-run and steady phase seconds, the CPU
        used over the steady steps with the machine it ran on, page faults a steady
        step, and peak memory."""
        warm = self.warm if self.warm is not None else [0.0] * len(phases)
        used = [end - begin for end, begin in zip(self.cpu_now(), self.cpu_start, strict=True)]
        return {
            "phases": phases,
            "steady": [total - before for total, before in zip(phases, warm, strict=True)],
            "cpu": [*used, machine_id(), float(os.cpu_count() or 0), torch.get_num_threads()],
            "faults": self.faults.count / max(1, steps - excluded),
            "memory": float(max(peak_memory_bytes(self.device), self.whole_peak)),
        }

    def memory_of_this_rank(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """What this rank held: resident memory at the start and while steps ran, its
        parameters' and its optimizer state's bytes."""
        return {
            "start": self.resident_start,
            "training_peak": self.training_peak,
            "parameters": local_bytes(model.parameters()),
            "optimizer_state": local_bytes(optimizer_state(optimizer)),
        }


@dataclass(frozen=True, slots=True)
class StepCount:
    """One worker's training step as counted on the meta device."""

    flops: int = 0  # of one forward and backward
    kept_bytes: int = 0  # what forward keeps for backward
    output_bytes: int = 0  # the model's output (backward's first gradients are its size)

    def memory_account(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        runtime: float = 0.0,
        flight_records: int = 0,
    ) -> dict[str, Any]:
        """The model's memory accounting in whole-model bytes, with the worker's
        ``runtime`` (and the Flight Recorder's records it counts) and each optimizer
        group's parameter sizes in elements, which ZeRO partitions (see perfmodel.memory)."""
        params = list(model.parameters())
        whole = float(sum(p.numel() * p.element_size() for p in params))
        units = [
            float(sum(p.numel() * p.element_size() for p in unit.parameters()))
            for unit in shard_units(model)
        ]
        slots = state_slots(optimizer)
        return {
            "parameters": whole,
            "gradients": float(
                sum(p.numel() * p.element_size() for p in params if p.requires_grad)
            ),
            "optimizer_state": slots * whole,
            "optimizer_temporaries": float(step_temporary_bytes(optimizer)),
            "activations": float(self.kept_bytes),
            "outputs": float(self.output_bytes),
            "largest_unit": max(units, default=0.0),
            "root": whole - sum(units),
            "runtime": runtime,
            "flight_records": flight_records,
            "parameter_groups": [
                [int(p.numel()) for p in group["params"]] for group in optimizer.param_groups
            ],
        }


def count_step_flops(
    replica: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: torch.device,
    precision: str,
) -> StepCount:
    """FLOPs of one forward and backward of the batch ``x, y``, the bytes its forward
    keeps for backward and those of the model's output, counted on a ``replica()`` of
    the model made on the meta device: no memory (the run's peak memory is its own), no
    collectives (a sharded model's would be)."""
    x, y = x.to("meta"), y.to("meta")
    with forked_rng(device), torch.device("meta"):
        shadow = replica()
    dtype = torch.bfloat16 if precision == "bf16" else None  # tf32 keeps float32 tensors
    kept = output = 0

    def forward(model: nn.Module) -> torch.Tensor:
        nonlocal kept, output
        with SavedForBackward(model) as saved:
            out = model(x)
            loss = loss_fn(out, y).mean()
        kept, output = saved.bytes, out.numel() * out.element_size()
        return loss

    # backward too: activation checkpointing recomputes forward there, as it ran
    with AsOnDevice(device.type, dtype):
        flops = step_flops(shadow, forward, device)
    return StepCount(flops, kept, output)


def cpu_samples(ranks: list[list[float]]) -> list[dict[str, float | None]]:
    """Each rank's contention clocks by name; a clock the machine does not have is None."""
    samples = [dict(zip(CONTENTION_FIELDS, rank, strict=True)) for rank in ranks]
    return [{k: None if math.isnan(v) else v for k, v in sample.items()} for sample in samples]
