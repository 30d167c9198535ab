"""How much of its hardware a worker uses: FLOPs per step, the machine's peak, memory.

- :func:`step_flops` counts one training step's FLOPs (forward and backward) with torch's
  flop counter, on a copy of the model so the run's weights, statistics and random
  streams are untouched. The counter knows the GPU kernels of
  ``scaled_dot_product_attention`` but not the CPU one; its formulas are registered for
  that kernel here, so attention counts on every device. Its convolution backward counts
  a grouped convolution's weight gradient ``groups`` times over (to torch 2.13 at least:
  pytorch/pytorch#183405); the count here divides it, so ResNeXt's step is 3× its forward
  as for any convolution, not 4.7×.
- :func:`peak_flops` is the peak a worker is measured against: a configured figure
  (an accelerator's data sheet), or a short GEMM probe on this machine with the
  worker's threads (the faster of torch's BLAS matmul and oneDNN: :func:`gemm_paths`),
  cached per machine so it runs once (``DMLBENCH_CACHE`` moves the cache; the default
  is ``~/.cache/dmlbench``). A probe during which other processes took cores is used
  for that run, named so, and not cached.
- :func:`peak_memory_bytes`: the process's peak resident memory on a CPU, the device's
  peak allocation on a GPU.
- :func:`tune_allocator` keeps the memory a step frees for the next step. glibc
  returns freed blocks above its mmap threshold to the kernel, and the next step faults
  them in again page by page; the threshold rises only after the process frees a block
  that large, so a step's cost depends on the process's history. Here a ResNet-20 step
  at batch 32 in a fresh process faulted 6,000 pages and took 38 ms, against 29 ms once
  tuned; :class:`FaultCounter` counts the faults of the training steps.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import json
import os
import platform
import resource
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import (
    FlopCounterMode,
    conv_flop_count,
    flop_registry,
    register_flop_formula,
    sdpa_backward_flop,
    sdpa_backward_flop_count,
    sdpa_flop,
)

from dmlbench.results.contention import OUTSIDE_CORES
from dmlbench.results.rundir import write_json
from dmlbench.system import machine_cpu_s

PROBE_SIZE = 2048  # a square GEMM this size keeps every core busy
PROBE_REPEATS = 8
PROBE_VERSION = 3  # in the cache's key: 1 timed torch.matmul alone; 2 no cuDNN path
CACHE_FILE = "peak-flops.json"
# The launcher's figure, handed to its workers ({"key", "flops_per_s", "source"} as JSON):
# workers that probed at once would each see the others as load, probe for nothing on a
# busy machine, and start seconds later.
PEAK_ENV = "DMLBENCH_PEAK"
# glibc's mallopt parameters (malloc.h) and the values a tuned allocator sets: blocks up
# to glibc's largest mmap threshold come from the heap, and up to 1 GiB freed at its top
# stays there instead of going back to the kernel
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20  # glibc's maximum on 64-bit machines
TRIM_THRESHOLD = 2**30
TUNED = "tuned (glibc keeps freed memory: mmap threshold 32 MiB, trim threshold 1 GiB)"
RETURN_THRESHOLD = 128 * 2**10  # glibc's default start, fixed: no dynamic raise
RETURNING = "returning (glibc gives back every block over 128 KiB when freed)"


def cache_dir() -> Path:
    return Path(os.environ.get("DMLBENCH_CACHE", Path.home() / ".cache" / "dmlbench"))


@dataclass(frozen=True)
class Peak:
    """A worker's peak FLOP/s and where the figure came from."""

    flops_per_s: float
    source: str  # "configured" or "GEMM probe: 2048², float32, 2 threads, oneDNN"


@contextlib.contextmanager
def forked_rng(device: torch.device) -> Iterator[None]:
    """Random draws inside leave the CPU's (and ``device``'s) random streams as they were."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        yield


def _count_cpu_attention() -> None:
    """Count the CPU's fused attention kernel as torch counts the GPU's (forward: the
    scores and the weighted sum; backward: both again and their gradients)."""
    aten = torch.ops.aten
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", sdpa_flop),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", sdpa_backward_flop),
    ):
        op = getattr(aten, name, None)
        if op is not None and op not in flop_registry and op.default not in flop_registry:
            register_flop_formula(op, get_raw=True)(formula)  # torch's, already shape-wrapped


_count_cpu_attention()


def _swap(shape: Sequence[int]) -> list[int]:
    return [shape[1], shape[0], *shape[2:]]


def _weight_gradient_flops(
    grad_out: Sequence[int], x: Sequence[int], weight: Sequence[int], transposed: bool
) -> int:
    """The weight gradient's FLOPs as torch's formula counts them (all groups as one)."""
    a, b = (grad_out, x) if transposed else (x, grad_out)
    return int(conv_flop_count(_swap(a), _swap(b), _swap(weight), transposed=False))


_torch_conv_backward = flop_registry[torch.ops.aten.convolution_backward]  # shape-wrapped


@cache
def _torch_overcounts_groups() -> bool:
    """Whether this torch counts a grouped convolution's weight gradient ``groups``
    times: a depthwise 1×1 convolution of 4 channels takes 8 FLOPs forward, and its input
    and weight gradients 8 each."""
    shape, weight = [1, 4, 1, 1], [4, 1, 1, 1]
    args = (shape, shape, weight, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 4)
    total = _torch_conv_backward(*args, [True, True, False], out_val=[shape, weight, None])
    return int(total) != 16


def _conv_backward_flop(
    grad_out_shape: Sequence[int],
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    bias: object,
    stride: object,
    padding: object,
    dilation: object,
    transposed: bool,
    output_padding: object,
    groups: int,
    output_mask: Sequence[bool],
    out_shape: Sequence[Sequence[int] | None],
    **kwargs: object,
) -> int:
    """torch's convolution backward count, its weight gradient divided by ``groups``."""
    args = (grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed)
    flops = int(_torch_conv_backward(*args, output_padding, groups, output_mask, out_val=out_shape))
    weight = out_shape[1]
    if groups > 1 and output_mask[1] and weight is not None and _torch_overcounts_groups():
        term = _weight_gradient_flops(grad_out_shape, x_shape, weight, transposed)
        flops -= term - term // groups
    return flops


def _attention_backward_flop(
    grad_out_shape: Sequence[int],
    query_shape: Sequence[int],
    key_shape: Sequence[int],
    value_shape: Sequence[int],
    *args: object,
    **kwargs: object,
) -> int:
    """A fused attention's backward as the model's FLOPs: the four products of its
    gradients, without the kernel's recomputation of the scores (MFU counts the model's
    work; the unfused path, which keeps the scores, does exactly these four)."""
    b, heads, s_q, d_q = query_shape
    s_k = key_shape[2]
    recompute = 2 * b * heads * s_q * d_q * s_k
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape) - recompute


def step_flops(
    model: nn.Module, step: Callable[[nn.Module], torch.Tensor], device: torch.device
) -> int:
    """FLOPs of ``step(model)`` (a forward pass returning the loss) and its backward, on a
    copy of ``model``; the caller's random streams are restored after. Model FLOPs: a
    grouped convolution's weight gradient once, a fused attention's backward without
    its recomputation."""
    shadow = copy.deepcopy(model)
    grouped = {
        torch.ops.aten.convolution_backward: _conv_backward_flop,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: (
            _attention_backward_flop
        ),
    }
    with (
        forked_rng(device),
        FlopCounterMode(display=False, custom_mapping=grouped) as counter,
    ):
        step(shadow).backward()
    return int(counter.get_total_flops())


def gemm_paths(a: torch.Tensor, b: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """The ways torch can compute ``a @ b`` on ``a``'s device, by name; a 1×1 convolution
    over a channels-last image of one row is the same GEMM.

    On a CPU, ``torch.matmul`` calls the BLAS (MKL), while convolutions run on oneDNN's
    own kernels, which can be twice as fast (an AMD EPYC here: 210 against 450 GFLOP/s).
    On a GPU, torch's defaults run float32 convolutions on TF32 tensor cores (cuDNN) but
    float32 matmuls in full precision: an H200 gave 48 TFLOP/s by matmul, while a
    ResNet-50 step of 256 images reached 74, so a matmul-only peak put its MFU at 153%."""
    paths: dict[str, Callable[[], torch.Tensor]] = {"matmul": lambda: a @ b}
    conv = {"cpu": torch.backends.mkldnn.is_available(), "cuda": torch.backends.cudnn.enabled}
    if conv.get(a.device.type):
        n, k = a.shape
        weight = a.reshape(n, k, 1, 1)
        image = b.reshape(1, k, 1, b.shape[1]).contiguous(memory_format=torch.channels_last)
        name = "oneDNN" if a.device.type == "cpu" else "cuDNN"
        paths[name] = lambda: torch.nn.functional.conv2d(image, weight)
    return paths


def _probe(device: torch.device, dtype: torch.dtype, threads: int) -> tuple[float, bool, str]:
    """The best FLOP/s of a few ``PROBE_SIZE``² GEMMs on ``device`` by each of torch's
    paths, whether other processes used the machine's cores meanwhile (then the figure
    is too low to keep), and the fastest path's name."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(PROBE_SIZE, PROBE_SIZE, device=device, dtype=dtype)
        b = torch.randn(PROBE_SIZE, PROBE_SIZE, device=device, dtype=dtype)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        best: dict[str, float] = {}
        busy, cpu, wall = machine_cpu_s()[0], time.process_time(), time.perf_counter()
        for name, gemm in gemm_paths(a, b).items():
            gemm()  # warm-up: thread pool, kernels
            sync()
            best[name] = float("inf")
            for _ in range(PROBE_REPEATS):
                start = time.perf_counter()
                gemm()
                sync()
                best[name] = min(best[name], time.perf_counter() - start)
        others = (machine_cpu_s()[0] - busy) - (time.process_time() - cpu)
        disturbed = others > OUTSIDE_CORES * (time.perf_counter() - wall)  # NaN: not known
    finally:
        torch.set_num_threads(before)
    fastest = min(best, key=best.__getitem__)
    return 2 * PROBE_SIZE**3 / best[fastest], disturbed, fastest


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def cache_key(device: torch.device, dtype: torch.dtype, threads: int) -> str:
    from dmlbench.results.environment import cpu_model

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    return (
        f"{where} · {_name(dtype)} · {threads} threads · torch {torch.__version__} · "
        f"GEMM probe {PROBE_VERSION}"
    )


def _handed_down(key: str) -> Peak | None:
    """The launcher's figure for ``key`` (see ``PEAK_ENV``), if it measured this one."""
    with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
        entry = json.loads(os.environ.get(PEAK_ENV, "{}"))
        if entry.get("key") == key:
            return Peak(float(entry["flops_per_s"]), str(entry["source"]))
    return None


def hand_down(peak: Peak, device: torch.device, threads: int, precision: str) -> dict[str, str]:
    """The environment that gives a worker with ``threads`` threads on ``device`` this
    peak instead of a probe of its own."""
    key = cache_key(device, _dtype(precision), threads)
    return {PEAK_ENV: json.dumps({"key": key, **asdict(peak)})}


def _dtype(precision: str) -> torch.dtype:
    return torch.bfloat16 if precision == "bf16" else torch.float32


def peak_flops(
    device: torch.device,
    threads: int,
    *,
    dtype: torch.dtype = torch.float32,
    configured_tflops: float | None = None,
) -> Peak:
    """The peak a worker on ``device`` with ``threads`` threads is measured against."""
    if configured_tflops:
        return Peak(configured_tflops * 1e12, "configured")
    key = cache_key(device, dtype, threads)
    if handed := _handed_down(key):
        return handed
    path = cache_dir() / CACHE_FILE
    cached: dict[str, dict[str, object]] = {}
    with contextlib.suppress(OSError, ValueError):
        cached = json.loads(path.read_text())
    if isinstance(cached, dict) and isinstance(entry := cached.get(key), dict):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            return Peak(float(entry["flops_per_s"]), str(entry["source"]))  # type: ignore[arg-type]
    peak, disturbed = probe_peak(device, threads, dtype)
    if disturbed:  # other processes took cores: not this machine's peak, probe next time
        return peak
    with contextlib.suppress(OSError):  # a read-only home: probe again next time
        cached = cached if isinstance(cached, dict) else {}
        cached[key] = asdict(peak)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, cached)
    return peak


def probe_peak(device: torch.device, threads: int, dtype: torch.dtype) -> tuple[Peak, bool]:
    """One probe's peak, and whether other processes disturbed it (then its source says
    "on a busy machine"). :func:`peak_flops` keeps it under :func:`cache_key` unless
    disturbed."""
    kind = "GPU" if device.type == "cuda" else f"{threads} thread{'' if threads == 1 else 's'}"
    flops, disturbed, fastest = _probe(device, dtype, threads)
    source = f"GEMM probe: {PROBE_SIZE}², {_name(dtype)}, {kind}, {fastest}"
    return Peak(flops, source + (", on a busy machine" if disturbed else "")), disturbed


def peak_for(
    device: torch.device, threads: int, precision: str, configured_tflops: float | None
) -> Peak:
    """The peak for a worker of a recipe with ``precision`` (``fp32`` or ``bf16``)."""
    return peak_flops(device, threads, dtype=_dtype(precision), configured_tflops=configured_tflops)


def tune_allocator(setting: str) -> str:
    """Apply the run's ``cpu_allocator`` setting to this process; returns what is in
    effect. ``tuned`` on glibc fixes its mmap and trim thresholds high, so a step's freed
    tensors are reused by the next step instead of being returned to the kernel and
    faulted in again, whatever the process did before; the settings last for the
    process. ``returning`` fixes them low instead: every block over 128 KiB goes back to
    the kernel when freed, so resident memory follows the live tensors (slower; for
    measuring memory). Elsewhere, and for ``default``, the C library's own behaviour
    stays."""
    if setting not in ("tuned", "returning"):
        return "default"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "default (the C library is not glibc)"
    libc = ctypes.CDLL(None)
    low = setting == "returning"
    answers = [
        libc.mallopt(M_MMAP_THRESHOLD, RETURN_THRESHOLD if low else MMAP_THRESHOLD),
        libc.mallopt(M_TRIM_THRESHOLD, RETURN_THRESHOLD if low else TRIM_THRESHOLD),
    ]
    if answers != [1, 1]:
        return "default (glibc refused the thresholds)"
    return RETURNING if low else TUNED


def page_faults() -> int:
    """Page faults of this process so far (minor: memory the kernel had to map in)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class FaultCounter:
    """This process's page faults over the spans it ran (the training steps, not the
    evaluations between them)."""

    def __init__(self) -> None:
        self.count = 0
        self._mark: int | None = None

    def resume(self) -> None:
        self._mark = page_faults()

    def pause(self) -> None:
        if self._mark is not None:
            self.count += page_faults() - self._mark
            self._mark = None

    def restart(self) -> None:
        """Count from now on only (the end of the warm-up steps)."""
        self.count, self._mark = 0, page_faults()


def compiled_graphs() -> int:
    """Graphs ``torch.compile`` has made in this process so far (dynamo's own count: a
    new input shape or a guard that failed makes another)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this worker: allocated on its GPU, or its process's resident set."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes
