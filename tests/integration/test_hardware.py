"""The peak FLOP/s probe measured for real (alone and beside a CPU hog) and the tuned
allocator in fresh processes: the hardware facts a run reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dmlbench.train import allocator, hardware
from dmlbench.train.hardware import peak_flops


@pytest.mark.slow
def test_the_peak_is_probed_once_per_machine_and_threads_then_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLBENCH_CACHE", str(tmp_path))
    probes: list[int] = []
    real = hardware._probe

    def counted(
        device: torch.device, dtype: torch.dtype, threads: int, tf32: bool = False
    ) -> tuple[float, bool, str]:
        probes.append(threads)
        flops, _, fastest = real(device, dtype, threads, tf32)
        return flops, False, fastest  # as on a quiet machine

    monkeypatch.setattr(hardware, "_probe", counted)
    first = peak_flops(torch.device("cpu"), 1)
    again = peak_flops(torch.device("cpu"), 1)
    assert first == again and probes == [1]
    assert first.flops_per_s > 1e8
    paths = ("matmul", "oneDNN", "oneDNN, 32 images")  # hardware.gemm_paths, by name
    assert first.source in {f"GEMM probe: 2048², float32, 1 thread, {path}" for path in paths}
    stored = json.loads((tmp_path / hardware.CACHE_FILE).read_text())
    assert [entry["flops_per_s"] for entry in stored.values()] == [first.flops_per_s]
    configured = peak_flops(torch.device("cpu"), 1, configured_tflops=989.0)
    assert configured.flops_per_s == 989e12 and configured.source == "configured"
    (tmp_path / hardware.CACHE_FILE).write_text("{not json")  # a damaged cache: probe again
    assert peak_flops(torch.device("cpu"), 1).flops_per_s > 1e8 and probes == [1, 1]


@pytest.mark.slow
def test_a_peak_probed_on_a_busy_machine_is_named_so_and_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe beside a real CPU hog (a second process spinning on both cores)."""
    import subprocess
    import sys

    monkeypatch.setenv("DMLBENCH_CACHE", str(tmp_path))
    spin = (
        "import threading\ndef spin():\n    while True: pass\n"
        + "[threading.Thread(target=spin, daemon=True).start() for _ in range(2)]\nspin()"
    )
    hog = subprocess.Popen([sys.executable, "-c", spin])
    try:
        busy = peak_flops(torch.device("cpu"), 1)
    finally:
        hog.kill()
        hog.wait()
    assert busy.source.endswith(", on a busy machine")
    assert not (tmp_path / hardware.CACHE_FILE).exists()


ALLOCATION_CYCLES = """
import resource, sys, torch
from dmlbench.train.allocator import tune_allocator

in_effect = tune_allocator(sys.argv[1])
count, floats = (16, 2**18) if sys.argv[2] == "small" else (2, 2**24)

def cycle():  # a step's pattern: 16 MiB of 1 MiB tensors (or 128 of 64 MiB), then freed
    held = [torch.ones(floats) for _ in range(count)]
    del held

cycle()
cycle()
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    cycle()
print(in_effect, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / 10, sep="|")
"""


def _faults_per_cycle(
    setting: str, blocks: str = "small", env: dict[str, str] | None = None
) -> tuple[str, float]:
    # mallopt's thresholds last for the process, and glibc's own move with what the
    # process freed before: a fresh process for each setting
    done = subprocess.run(
        [sys.executable, "-c", ALLOCATION_CYCLES, setting, blocks],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    name, count = done.stdout.strip().splitlines()[-1].split("|")
    return name, float(count)


@pytest.mark.slow
def test_the_tuned_allocator_keeps_freed_memory_instead_of_faulting_it_in_again() -> None:
    default, default_faults = _faults_per_cycle("default")
    tuned, tuned_faults = _faults_per_cycle("tuned")
    assert default == "default" and tuned == allocator.TUNED
    # glibc's own: 4,064 faults a cycle on a quiet machine, 216–4,064 beside a CPU hog
    # (when its thresholds move depends on timing too), so it is reported, not bounded;
    # tuned, the freed MiBs are reused from the first cycle on: 0 faults a cycle here,
    # 51 once while this machine ran CI beside (a thread's first pages), against 4,064
    # pages when 16 MiB a cycle is faulted in again
    assert tuned_faults < 400, (default_faults, tuned_faults)


@pytest.mark.slow
def test_jemalloc_keeps_the_blocks_glibc_hands_back_at_any_threshold() -> None:
    """64 MiB blocks are past glibc's largest mmap threshold (32 MiB): even tuned, it
    maps them afresh each step, as it did ResNet-50's activations (589,579 faults a
    step). jemalloc, preloaded as the launcher does, keeps them."""
    env, absent = allocator.preload("jemalloc")
    if absent:
        pytest.skip(absent)
    tuned, tuned_faults = _faults_per_cycle("tuned", "large")
    kept, kept_faults = _faults_per_cycle("jemalloc", "large", env)
    assert tuned == allocator.TUNED
    assert kept.startswith("jemalloc ") and kept.endswith("(keeps freed memory)"), kept
    # 32,768 faults a cycle tuned here (4 KiB pages); kept, none after the first cycle
    assert kept_faults < max(50, tuned_faults / 100), (tuned_faults, kept_faults)
    # without the launcher's preload, the setting falls back to tuned glibc
    fallback, _ = _faults_per_cycle("jemalloc", "small")
    assert fallback == allocator.TUNED + " in place of jemalloc, which was not preloaded"
