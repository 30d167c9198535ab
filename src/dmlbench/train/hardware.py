"""How much of its hardware a worker uses: FLOPs per step, the machine's peak, memory.

- FLOPs per step are counted below, in :mod:`dmlbench.models.flops`.
- :func:`peak_flops` is the peak a worker is measured against: a configured figure
  (an accelerator's data sheet), or a short GEMM probe on this machine with the
  worker's threads (the fastest of torch's BLAS matmul and oneDNN's convolutions:
  :func:`gemm_paths`), cached per machine so it runs once (``DMLBENCH_CACHE`` moves the
  cache; the default is ``~/.cache/dmlbench``). A probe during which other processes
  took cores is used for that run, named so, and not cached.
- :func:`peak_memory_bytes`: the process's peak resident memory on a CPU, the device's
  peak allocation on a GPU.
- :class:`FaultCounter` counts the page faults of the training steps: memory a step
  frees and the allocator hands back to the kernel is faulted in again by the next
  (:mod:`dmlbench.train.allocator` keeps it instead).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from dmlbench.errors import SpecError
from dmlbench.results.contention import OUTSIDE_CORES
from dmlbench.results.rundir import write_json
from dmlbench.system import machine_cpu_s

PROBE_SIZE = 2048  # a square GEMM this size keeps every core busy
PROBE_REPEATS = 8
# in the cache's key: 1 timed torch.matmul alone; 2 no cuDNN path; 3 no batch of images
PROBE_VERSION = 4
TF32_NAME = "tfloat32"  # float32 tensors, TF32 tensor-core arithmetic (precision=tf32)
CACHE_FILE = "peak-flops.json"
# The launcher's figure, handed to its workers ({"key", "flops_per_s", "source"} as JSON):
# workers that probed at once would each see the others as load, probe for nothing on a
# busy machine, and start seconds later.
PEAK_ENV = "DMLBENCH_PEAK"


def cache_dir() -> Path:
    return Path(os.environ.get("DMLBENCH_CACHE", Path.home() / ".cache" / "dmlbench"))


@dataclass(frozen=True)
class Peak:
    """A worker's peak FLOP/s and where the figure came from."""

    flops_per_s: float
    source: str  # "configured" or "GEMM probe: 2048², float32, 2 threads, oneDNN"


def gemm_paths(a: torch.Tensor, b: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """The ways torch can compute ``a @ b`` on ``a``'s device, by name. A 1×1 convolution
    is the same GEMM, over a channels-last image of one row, or over a batch of 8×8
    images whose pixels are ``b``'s columns (where their count is a multiple of 64).

    On a CPU, ``torch.matmul`` calls the BLAS (MKL), while convolutions run on oneDNN's
    own kernels, which pick their code by the layout and the thread count. On an AMD
    EPYC with AVX-512, 2048² in float32: with two threads, 217 GFLOP/s by matmul and 437
    by oneDNN on one row; with one thread, 111 by matmul, 111 on one row and 209 on 32
    images of 8×8, while ResNet-20's step reached 136. On a GPU, torch's defaults run
    float32 convolutions on TF32 tensor cores (cuDNN) but float32 matmuls in full
    precision: an H200 gave 48 TFLOP/s by matmul, while a ResNet-50 step of 256 images
    reached 74, so a matmul-only peak put its MFU at 153%."""
    paths: dict[str, Callable[[], torch.Tensor]] = {"matmul": lambda: a @ b}
    conv = {"cpu": torch.backends.mkldnn.is_available(), "cuda": torch.backends.cudnn.enabled}
    if conv.get(a.device.type):
        (n, k), columns = a.shape, b.shape[1]
        weight = a.reshape(n, k, 1, 1)
        row = b.reshape(1, k, 1, columns).contiguous(memory_format=torch.channels_last)
        name = "oneDNN" if a.device.type == "cpu" else "cuDNN"
        paths[name] = lambda: torch.nn.functional.conv2d(row, weight)
        if columns % 64 == 0:  # pixel (i, y, x) is column 64·i + 8·y + x; channels last
            images = b.t().contiguous().reshape(columns // 64, 8, 8, k).permute(0, 3, 1, 2)
            paths[f"{name}, {columns // 64} images"] = lambda: torch.nn.functional.conv2d(
                images, weight
            )
    return paths


@contextlib.contextmanager
def tf32_math(enabled: bool = True) -> Iterator[None]:
    """Float32 matmuls on TF32 tensor cores meanwhile (cuDNN's convolutions already are,
    by torch's default); nothing when not ``enabled``."""
    before = torch.get_float32_matmul_precision()
    if enabled:
        torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _probe(
    device: torch.device, dtype: torch.dtype, threads: int, tf32: bool = False
) -> tuple[float, bool, str]:
    """The best FLOP/s of a few ``PROBE_SIZE``² GEMMs on ``device`` by each of torch's
    paths (on TF32 tensor cores with ``tf32``), whether other processes used the
    machine's cores meanwhile (then the figure is too low to keep), and the fastest
    path's name."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tf32_math(tf32):
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


def _name(dtype: torch.dtype, tf32: bool = False) -> str:
    return TF32_NAME if tf32 else str(dtype).removeprefix("torch.")


def uses_cuda(device: str) -> bool:
    """Whether a run's ``device`` setting (auto, cpu or cuda) puts its workers on a GPU
    on this host: cuda, or auto where torch sees one."""
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def device_name(device: torch.device) -> str:
    """What the worker computes on: the GPU's name, or the CPU's model."""
    from dmlbench.results.environment import cpu_model

    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def cache_key(device: torch.device, dtype: torch.dtype, threads: int, tf32: bool = False) -> str:
    return (
        f"{device_name(device)} · {_name(dtype, tf32)} · {threads} threads · "
        f"torch {torch.__version__} · GEMM probe {PROBE_VERSION}"
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
    key = cache_key(device, _dtype(precision), threads, precision == "tf32")
    return {PEAK_ENV: json.dumps({"key": key, **asdict(peak)})}


def _dtype(precision: str) -> torch.dtype:
    return torch.bfloat16 if precision == "bf16" else torch.float32


def peak_flops(
    device: torch.device,
    threads: int,
    *,
    dtype: torch.dtype = torch.float32,
    tf32: bool = False,
    configured_tflops: float | None = None,
) -> Peak:
    """The peak a worker on ``device`` with ``threads`` threads is measured against (in
    ``dtype``; float32 on TF32 tensor cores with ``tf32``)."""
    if configured_tflops:
        return Peak(configured_tflops * 1e12, "configured")
    key = cache_key(device, dtype, threads, tf32)
    if handed := _handed_down(key):
        return handed
    path = cache_dir() / CACHE_FILE
    cached: dict[str, dict[str, object]] = {}
    with contextlib.suppress(OSError, ValueError):
        cached = json.loads(path.read_text())
    if isinstance(cached, dict) and isinstance(entry := cached.get(key), dict):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            flops, source = entry["flops_per_s"], entry["source"]
            if isinstance(flops, int | float) and isinstance(source, str):
                return Peak(float(flops), source)
    peak, disturbed = probe_peak(device, threads, dtype, tf32)
    if disturbed:  # other processes took cores: not this machine's peak, probe next time
        return peak
    with contextlib.suppress(OSError):  # a read-only home: probe again next time
        cached = cached if isinstance(cached, dict) else {}
        cached[key] = asdict(peak)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, cached)
    return peak


def probe_peak(
    device: torch.device, threads: int, dtype: torch.dtype, tf32: bool = False
) -> tuple[Peak, bool]:
    """One probe's peak, and whether other processes disturbed it (then its source says
    "on a busy machine"). :func:`peak_flops` keeps it under :func:`cache_key` unless
    disturbed."""
    kind = "GPU" if device.type == "cuda" else f"{threads} thread{'' if threads == 1 else 's'}"
    flops, disturbed, fastest = _probe(device, dtype, threads, tf32)
    source = f"GEMM probe: {PROBE_SIZE}², {_name(dtype, tf32)}, {kind}, {fastest}"
    return Peak(flops, source + (", on a busy machine" if disturbed else "")), disturbed


def peak_for(
    device: torch.device, threads: int, precision: str, configured_tflops: float | None
) -> Peak:
    """The peak for a worker of a recipe with ``precision`` (``fp32``, ``tf32`` or
    ``bf16``)."""
    return peak_flops(
        device,
        threads,
        dtype=_dtype(precision),
        tf32=precision == "tf32",
        configured_tflops=configured_tflops,
    )


def runtime_for(exchange: str, device: torch.device) -> tuple[float, int]:
    """The memory account's runtime ``K`` for this worker of ``exchange`` on ``device``
    (a GPU's depends on its compute capability) as it stands now, with the records its
    Flight Recorder holds (a CPU worker's grows with them), and how many those are."""
    from dmlbench.perfmodel.memory import runtime_bytes
    from dmlbench.train.memory import flight_records

    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    records = flight_records()
    return runtime_bytes(exchange, device.type, capability, flight_records=records), records


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


def check_precision(precision: str, device: torch.device) -> None:
    """Refuses in one line a ``precision`` that ``device`` cannot run."""
    if precision == "tf32" and (
        device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 0)
    ):
        raise SpecError(
            f"precision tf32: {device_name(device)} has no TF32 tensor cores (an NVIDIA GPU "
            "of compute capability 8.0 or later has them); use precision=fp32"
        )
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise SpecError(
            f"precision {precision}: {torch.cuda.get_device_name(device)} has no "
            "bfloat16; use precision=fp32"
        )


def autocast_for(precision: str, device: torch.device) -> Callable[[], AbstractContextManager]:
    """A context that runs forward (and the loss) in ``precision``; refused in one line on
    a device that cannot. ``tf32`` needs no context: it lets this process's float32
    matmuls run on TF32 tensor cores from now on (an Ampere or later GPU)."""
    check_precision(precision, device)
    if precision == "fp32":
        return contextlib.nullcontext
    if precision == "tf32":
        torch.set_float32_matmul_precision("high")
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def to_channels_last(model: nn.Module) -> nn.Module:
    """The model's parameters and buffers in channels-last layout (4-D ones; in place)."""
    return model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
