"""A worker's memory under each data-parallel strategy, from the model's own accounting.

The accounting (made by every run: see the trainer's ``memory_account``) is the whole
model's parameters ``P``, gradients ``G`` and optimizer state ``O`` in bytes, the
activations autograd keeps for backward of one worker's batch ``A``, the temporaries
the optimizer's step allocates ``T`` (none for torch's fused kernels, dmlbench's
default; where foreach ones run, FSDP's shards: Adam and AdamW one parameter-sized
tensor per parameter, the second moment's square root, and SGD with weight decay a copy
of the decayed parameters' gradients), the model's
output for one worker's batch ``L`` (its logits), and the largest FSDP unit's
parameters ``U`` with the parameters that stay with the root ``R``, and on a CPU the
worker's runtime ``K``: what its exchange and trainer allocate whatever the model
(DDP's reducer, ZeRO's and FSDP's Python state, the run's own objects), a measured
constant (:data:`RUNTIME_CPU_BYTES`), and the records torch's Flight Recorder keeps of
its collectives, which grow with the run up to 2,000 (:func:`flight_recorder_bytes`:
about 2 MiB when full, which on ``digits-mlp`` more than doubled a long run's figure); on
a GPU, cuBLAS's workspaces as PyTorch sizes
them (:func:`cuda_workspace_bytes`; cuDNN's, which grow with the batch, are not counted).

A worker's memory peaks either at the start of backward (every activation kept, and
backward's first two gradients, the loss's with respect to the log-probabilities and
the softmax's with respect to the logits: ``2L``, which a language model's vocabulary
makes large) or during the optimizer's step (every gradient there, activations freed).
With ``N`` workers it holds throughout (``held``), and adds at each of the two moments:

==================  ===================================  ===========  ================
exchange            held                                 backward     optimizer step
==================  ===================================  ===========  ================
``allreduce``       P + O + G (the flat gradient buffer)  A + 2L       T
``ddp``             P + O + G (DDP's buckets)             A + 2L       G + T
``zero1``           P + O/N + G (DDP's buckets)           A + 2L       G + T/N
``fsdp``            (P + O)/N                             A+2L+R+2U    G/N + T/N
``fsdp``, kept      (P + O)/N                             A + 2L + P   G/N + T/N
==================  ===================================  ===========  ================

and ``K`` held besides, for every exchange. ZeRO's ``/N`` is the largest rank's share
of the parameters' elements as torch partitions them (:func:`zero_largest_share`),
where the account records their sizes.

(``fsdp``: the root's parameters stay gathered for the whole forward, one unit is
gathered and the next prefetched; "kept" is ``reshard_after_forward=false``: every unit
stays gathered from its forward to its backward.)

On a CPU the measured figure is the worker's peak resident memory during training steps
less its resident memory when the trainer started; it follows the live tensors only
when the C library gives freed memory back (``cpu_allocator=returning``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SHARDED = ("zero1", "fsdp")

# K: a worker's memory in training steps that no model accounts for, by exchange, on a
# CPU (2 workers, glibc returning freed blocks of a page or more, torch 2.13, Python
# 3.11). Measured on a model with almost nothing in it (``digits-mlp --model linear``:
# 650 parameters) as measured less predicted and less its Flight Recorder's records
# (below; 14-24 of them), the most of two runs' workers, before and apart from the
# tasks it is added to: ``python benchmarks/memory_tasks.py --runtime``
# (benchmarks/results/memory/runtime.json), with the start read after glibc gave back
# its free pages, glibc's thresholds in effect from the workers' start and MKL keeping no
# buffers (the two runs of each agree within 16 KiB).
# Other exchanges take DDP's. A GPU's measured memory is its allocated tensors only:
# its K is cuBLAS's workspaces (below).
RUNTIME_CPU_BYTES = {"ddp": 1_475_516.0, "zero1": 1_293_740.0, "fsdp": 3_082_156.0}

# c10d's Flight Recorder: torch keeps a record of every collective, gloo's too (for
# debugging hangs), up to TORCH_FR_BUFFER_SIZE records, 2,000 by default (torch 2.13,
# torch/csrc/distributed/c10d/FlightRecorder.hpp). Its records sit in a vector that
# doubles as it fills (1, 2, 4, ... 2,048 slots for 2,000), each slot FLIGHT_SLOT_BYTES,
# and each record holds FLIGHT_RECORD_BYTES more of its own on the heap. Both measured
# apart from any run, from glibc's allocated bytes while a two-process gloo group makes
# all-reduces and broadcasts of one small tensor in turn (python
# benchmarks/memory_tasks.py --flight-recorder,
# benchmarks/results/memory/flight_recorder.json): a record's own from the growth
# between 1,250 records and full (the same 2,048 slots), a slot's from what is left when
# full. 2.07 MiB for 2,000 records, and 5 KiB more over 1,000 calls beyond.
FLIGHT_RECORDER_CAPACITY = 2000
FLIGHT_RECORD_BYTES = 484.0
FLIGHT_SLOT_BYTES = 565.0


def flight_recorder_slots(records: int) -> int:
    """The slots of the vector that holds ``records`` records: it doubles as it fills,
    to the power of two at or above them."""
    return 1 << (records - 1).bit_length() if records > 0 else 0


def flight_recorder_bytes(records: int) -> float:
    """What the Flight Recorder holding ``records`` records takes: their own bytes and
    the slots of the vector they sit in."""
    if records <= 0:
        return 0.0
    return FLIGHT_RECORD_BYTES * records + FLIGHT_SLOT_BYTES * flight_recorder_slots(records)


# PyTorch's cuBLAS workspace, per cuBLAS handle and stream, from its caching allocator
# (aten/src/ATen/cuda/CublasHandlePool.cpp, torch 2.x): 32 MiB on compute capability 9.0
# (Hopper: cuBLAS's own recommendation), else 4,096 KiB × 2 + 16 KiB × 8; cuBLASLt's
# beside it, 1 MiB. A training step uses two handles: forward's thread and autograd's
# backward thread each take one from their own pool window.
MIB = 1024 * 1024
CUBLAS_HANDLES_PER_STEP = 2
CUBLASLT_WORKSPACE_BYTES = 1 * MIB


def cuda_workspace_bytes(capability: tuple[int, int]) -> float:
    """The cuBLAS and cuBLASLt workspaces a training step holds on a GPU of ``capability``."""
    cublas = 32 * MIB if tuple(capability) == (9, 0) else 4096 * 1024 * 2 + 16 * 1024 * 8
    return float(CUBLAS_HANDLES_PER_STEP * (cublas + CUBLASLT_WORKSPACE_BYTES))


def flight_recorder_capacity() -> int:
    """How many records torch's Flight Recorder keeps at most in this environment
    (``TORCH_FR_BUFFER_SIZE``, torch's default where unset or unreadable)."""
    try:
        return max(0, int(os.environ.get("TORCH_FR_BUFFER_SIZE", FLIGHT_RECORDER_CAPACITY)))
    except ValueError:
        return FLIGHT_RECORDER_CAPACITY


def runtime_bytes(
    exchange: str,
    device_type: str,
    capability: tuple[int, int] | None = None,
    *,
    flight_records: int = 0,
) -> float:
    """``K`` for a run of this exchange on this kind of device: on a CPU, the measured
    constant and the Flight Recorder's ``flight_records`` records (a whole training run
    fills it: :func:`flight_recorder_capacity`); on a GPU (of ``capability``), cuBLAS's
    workspaces (the recorder is host memory, which a GPU's figure does not count)."""
    if device_type == "cuda":
        return cuda_workspace_bytes(capability) if capability else 0.0
    if device_type != "cpu":
        return 0.0
    constant = RUNTIME_CPU_BYTES.get(exchange, RUNTIME_CPU_BYTES["ddp"])
    return constant + flight_recorder_bytes(flight_records)


def zero_largest_share(groups: Sequence[Sequence[float]], workers: int) -> float:
    """The largest rank's share of the parameters' elements (so of their optimizer
    state) when torch's ``ZeroRedundancyOptimizer`` partitions parameters of these sizes,
    by optimizer group, among ``workers``: each group's parameters, largest first, go
    to the rank holding the fewest elements so far. A model with a few large matrices
    is partitioned unevenly: one hidden layer of 2,048 gives one of two ranks 85%."""
    sizes = [0.0] * max(1, workers)
    for group in groups:
        for size in sorted(group, reverse=True):
            sizes[sizes.index(min(sizes))] += size
    total = sum(sizes)
    return max(sizes) / total if total else 1.0 / len(sizes)


@dataclass(frozen=True)
class MemoryAccount:
    parameters: float
    gradients: float
    optimizer_state: float
    activations: float  # kept for backward, for one worker's batch
    optimizer_temporaries: float = 0.0  # allocated within the optimizer's step
    outputs: float = 0.0  # the model's output for one worker's batch (0: not counted)
    largest_unit: float = 0.0  # parameters of FSDP's largest unit
    root: float = 0.0  # parameters FSDP keeps with the root module
    runtime: float = 0.0  # the worker's own, whatever the model (0: not counted)
    # each optimizer group's parameter sizes in elements: ZeRO's partition (): not known
    parameter_groups: tuple[tuple[float, ...], ...] = ()

    @classmethod
    def from_summary(cls, account: Mapping[str, Any]) -> MemoryAccount:
        groups = account.get("parameter_groups") or ()
        sizes = {
            k: float(account.get(k) or 0.0)
            for k in cls.__dataclass_fields__
            if k != "parameter_groups"
        }
        return cls(**sizes, parameter_groups=tuple(tuple(map(float, g)) for g in groups))

    def zero_share(self, workers: int) -> float:
        """The largest rank's share of the optimizer state under ZeRO: its partition's,
        where the parameters' sizes are known, else 1/N."""
        if self.parameter_groups:
            return zero_largest_share(self.parameter_groups, workers)
        return 1.0 / max(1, workers)


def predicted_bytes(
    account: MemoryAccount,
    exchange: str,
    workers: int,
    options: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """The parts of a worker's peak memory (at the start of backward or in the
    optimizer's step, whichever holds more), their ``total`` and the other moment's
    total (``other``), in bytes; ``at`` says which moment (1.0 backward, 0.0 step)."""
    n = max(1, workers)
    p, g, o = account.parameters, account.gradients, account.optimizer_state
    a, t = account.activations, account.optimizer_temporaries
    if exchange == "fsdp":
        kept = not (options or {}).get("reshard_after_forward", True)
        held = {"parameters": p / n, "optimizer_state": o / n}
        backward = {
            "activations": a,
            "first_gradients": 2 * account.outputs,
            "gathered": p if kept else account.root + 2 * account.largest_unit,
        }
        step = {"gradients": g / n, "optimizer_temporaries": t / n}
    else:
        share = account.zero_share(n) if exchange == "zero1" else 1.0  # the largest rank's
        held = {
            "parameters": p,
            "optimizer_state": o * share,
            "buckets" if exchange in ("ddp", "zero1") else "gradients": g,
        }
        backward = {"activations": a, "first_gradients": 2 * account.outputs}
        step = {"optimizer_temporaries": t * share}
        if exchange in ("ddp", "zero1"):
            step["gradients"] = g
    if account.runtime:
        held["runtime"] = account.runtime
    at_backward = sum(backward.values()) >= sum(step.values())
    parts = {**held, **(backward if at_backward else step)}
    other = sum(held.values()) + sum((step if at_backward else backward).values())
    return {**parts, "total": sum(parts.values()), "other": other, "at": float(at_backward)}
