"""Hardware use: a step's FLOPs, the machine's peak (probed once, then cached), memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from dmlbench.train import hardware
from dmlbench.train.hardware import peak_flops, peak_memory_bytes, step_flops


def test_a_steps_flops_are_counted_on_a_copy_and_leave_the_random_streams_alone() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 30), nn.Dropout(0.5), nn.Linear(30, 5))
    x, y = torch.randn(8, 20), torch.randint(0, 5, (8,))
    before = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(1)

    def forward(m: nn.Module) -> torch.Tensor:
        return nn.functional.cross_entropy(m(x), y)

    flops = step_flops(model, forward, torch.device("cpu"))
    # forward 2·b·(20·30 + 30·5); backward: both weight gradients, and the input
    # gradient of the second layer only (the first layer's input needs none)
    b = 8
    assert flops == 2 * b * (20 * 30 + 30 * 5) + 2 * b * (20 * 30 + 30 * 5) + 2 * b * 30 * 5
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    torch.manual_seed(1)
    untouched = torch.rand(3)
    torch.manual_seed(1)
    step_flops(model, forward, torch.device("cpu"))
    assert torch.equal(torch.rand(3), untouched)  # the dropout's draws were forked


def test_the_peak_is_probed_once_per_machine_and_threads_then_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLBENCH_CACHE", str(tmp_path))
    probes: list[int] = []
    real = hardware._probe

    def counted(device: torch.device, dtype: torch.dtype, threads: int) -> tuple[float, bool, str]:
        probes.append(threads)
        flops, _, fastest = real(device, dtype, threads)
        return flops, False, fastest  # as on a quiet machine

    monkeypatch.setattr(hardware, "_probe", counted)
    first = peak_flops(torch.device("cpu"), 1)
    again = peak_flops(torch.device("cpu"), 1)
    assert first == again and probes == [1]
    assert first.flops_per_s > 1e8
    assert first.source in {
        f"GEMM probe: 2048², float32, 1 thread, {path}" for path in ("matmul", "oneDNN")
    }
    stored = json.loads((tmp_path / hardware.CACHE_FILE).read_text())
    assert [entry["flops_per_s"] for entry in stored.values()] == [first.flops_per_s]
    configured = peak_flops(torch.device("cpu"), 1, configured_tflops=989.0)
    assert configured.flops_per_s == 989e12 and configured.source == "configured"
    (tmp_path / hardware.CACHE_FILE).write_text("{not json")  # a damaged cache: probe again
    assert peak_flops(torch.device("cpu"), 1).flops_per_s > 1e8 and probes == [1, 1]


def test_every_gemm_path_of_the_probe_computes_the_same_product() -> None:
    a, b = torch.randn(64, 48, dtype=torch.float64), torch.randn(48, 80, dtype=torch.float64)
    paths = hardware.gemm_paths(a.float(), b.float())
    assert set(paths) == {"matmul", "oneDNN"}  # this machine's torch has oneDNN
    for name, gemm in paths.items():
        product = gemm().reshape(64, 80).double()
        assert torch.allclose(product, a @ b, rtol=1e-4, atol=1e-4), name


def test_compiled_graphs_counts_each_graph_torch_compile_makes() -> None:
    net = torch.compile(nn.Linear(4, 2), backend="eager")  # dynamo's graphs, no inductor
    before = hardware.compiled_graphs()
    net(torch.randn(3, 4))
    net(torch.randn(3, 4))  # the same shape: the graph is reused
    assert hardware.compiled_graphs() == before + 1
    net(torch.randn(5, 4))  # a new shape: another graph
    assert hardware.compiled_graphs() == before + 2


def test_peak_memory_is_the_processes_resident_peak_on_a_cpu() -> None:
    before = peak_memory_bytes(torch.device("cpu"))
    block = torch.ones(64 * 2**20, dtype=torch.uint8)  # 64 MiB touched
    assert peak_memory_bytes(torch.device("cpu")) >= before
    assert peak_memory_bytes(torch.device("cpu")) >= 64 * 2**20 and block.sum() > 0


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
from dmlbench.train.hardware import tune_allocator

in_effect = tune_allocator(sys.argv[1])

def cycle():  # a step's pattern: 16 MiB of 1 MiB tensors written, then freed
    held = [torch.ones(2**18) for _ in range(16)]
    del held

cycle()
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    cycle()
print(in_effect, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / 10, sep="|")
"""


def _faults_per_cycle(setting: str) -> tuple[str, float]:
    # mallopt's thresholds last for the process, and glibc's own move with what the
    # process freed before: a fresh process for each setting
    done = subprocess.run(
        [sys.executable, "-c", ALLOCATION_CYCLES, setting],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    name, count = done.stdout.strip().splitlines()[-1].split("|")
    return name, float(count)


def test_the_tuned_allocator_keeps_freed_memory_instead_of_faulting_it_in_again() -> None:
    default, default_faults = _faults_per_cycle("default")
    tuned, tuned_faults = _faults_per_cycle("tuned")
    assert default == "default" and tuned == hardware.TUNED
    # glibc's own: 4,064 faults a cycle on a quiet machine, 216–4,064 beside a CPU hog
    # (when its thresholds move depends on timing too), so it is reported, not bounded;
    # tuned, the freed MiBs are reused from the first cycle on
    assert tuned_faults < 50, (default_faults, tuned_faults)
