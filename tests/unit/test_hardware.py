"""Hardware use: a step's FLOPs, the machine's peak (probed once, then cached), memory."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dmlbench.models.flops import step_flops
from dmlbench.train import hardware
from dmlbench.train.hardware import peak_memory_bytes


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


@pytest.mark.parametrize("groups", [1, 4, 16])
def test_a_convolutions_backward_counts_twice_its_forward_whatever_its_groups(
    groups: int,
) -> None:
    """Input and weight gradients each take the forward's multiply-adds; torch's own
    formula counts a grouped weight gradient ``groups`` times (pytorch#183405)."""
    conv = nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=groups, bias=False)
    x = torch.randn(2, 16, 9, 9, requires_grad=True)
    # 2 flops a multiply-add · batch 2 · 32 outputs · their inputs · 3×3 · a 5×5 output
    forward = 2 * 2 * 32 * (16 // groups) * 9 * 5 * 5
    flops = step_flops(conv, lambda m: m(x).sum(), torch.device("cpu"))
    assert flops == 3 * forward


@pytest.mark.parametrize(
    ("columns", "names"),
    [(80, {"matmul", "oneDNN"}), (128, {"matmul", "oneDNN", "oneDNN, 2 images"})],
)
def test_every_gemm_path_of_the_probe_computes_the_same_product(
    columns: int, names: set[str]
) -> None:
    """A batch of 8×8 images holds the columns where they fill it; this machine's torch
    has oneDNN."""
    a = torch.randn(64, 48, dtype=torch.float64)
    b = torch.randn(48, columns, dtype=torch.float64)
    paths = hardware.gemm_paths(a.float(), b.float())
    assert set(paths) == names
    for name, gemm in paths.items():
        out = gemm()
        product = (
            out.reshape(64, columns) if out.dim() == 2 else out.transpose(0, 1).reshape(64, columns)
        )
        assert torch.allclose(product.double(), a @ b, rtol=1e-4, atol=1e-4), name


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


def test_a_worker_takes_the_launchers_peak_for_its_own_threads_and_precision_only(
    monkeypatch, tmp_path
) -> None:
    """Workers that probed at once would each see the others as load: the launcher's
    figure reaches them, and only a worker it was measured for uses it."""
    monkeypatch.setenv("DMLBENCH_CACHE", str(tmp_path))
    probed: list[int] = []

    def probe(
        device: torch.device, dtype: torch.dtype, threads: int, tf32: bool = False
    ) -> tuple[float, bool, str]:
        probed.append(threads)
        return 1e9, True, "matmul"  # a busy machine: not cached

    monkeypatch.setattr(hardware, "_probe", probe)
    cpu = torch.device("cpu")
    launcher = hardware.peak_for(cpu, 2, "fp32", None)
    assert probed == [2] and launcher.source.endswith("on a busy machine")
    for name, value in hardware.hand_down(launcher, cpu, 2, "fp32").items():
        monkeypatch.setenv(name, value)
    assert hardware.peak_for(cpu, 2, "fp32", None) == launcher and probed == [2]
    hardware.peak_for(cpu, 1, "fp32", None)  # other threads: a figure of its own
    hardware.peak_for(cpu, 2, "bf16", None)  # another precision too
    hardware.peak_for(cpu, 2, "tf32", None)  # float32 tensors, but other arithmetic
    assert probed == [2, 1, 2, 2]
    monkeypatch.setenv(hardware.PEAK_ENV, "{not json")
    hardware.peak_for(cpu, 2, "fp32", None)
    assert probed == [2, 1, 2, 2, 2]
