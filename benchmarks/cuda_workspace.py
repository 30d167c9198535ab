"""cuBLAS's workspaces measured apart from any training run: the check of a GPU worker's
runtime ``K`` (``perfmodel.memory.cuda_workspace_bytes``, taken from PyTorch's source)
that the H200 runs it was added after could not give.

    python benchmarks/cuda_workspace.py [--out cuda_workspace.json]     # needs a GPU

In a fresh process: a matrix product in this thread, then a linear layer with a bias
(cuBLASLt's path), then backward (autograd's device thread: a cuBLAS handle of its
own). After each, the CUDA allocator's allocated bytes beyond the tensors the step made
are the workspaces it added.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from summary import run_main, write_summary

from dmlbench.perfmodel.memory import cuda_workspace_bytes

MIB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("cuda_workspace.py measures a CUDA device's workspaces: none is here")
    device = torch.device("cuda")
    torch.manual_seed(0)
    a = torch.randn(256, 256, device=device, requires_grad=True)
    b = torch.randn(256, 256, device=device)
    bias = torch.randn(256, device=device)
    tensor = a.numel() * a.element_size()
    torch.cuda.synchronize()

    def allocated() -> int:
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated(device)

    start = allocated()
    product = a @ b  # the first cuBLAS call of this thread
    after_mm = allocated() - start - tensor
    start = allocated()
    linear = torch.nn.functional.linear(product, b, bias)  # addmm: cuBLASLt where used
    after_linear = allocated() - start - tensor
    start = allocated()
    linear.sum().backward()  # autograd's own thread: another handle
    after_backward = allocated() - start - tensor  # less a's gradient
    measured = {
        "forward_matmul": after_mm,
        "forward_linear_with_bias": after_linear,
        "backward": after_backward,
    }
    total = sum(max(0, v) for v in measured.values())
    capability = torch.cuda.get_device_capability(device)
    stated = cuda_workspace_bytes(capability)
    for name, value in measured.items():
        print(f"{name:26} {value / MIB:8.2f} MiB beyond its tensors")
    print(
        f"{torch.cuda.get_device_name(device)} (capability {capability[0]}.{capability[1]}): "
        f"{total / MIB:.2f} MiB measured, {stated / MIB:.2f} MiB in dmlbench's K "
        f"({total / stated - 1:+.1%})"
    )
    if args.out:
        write_summary(
            args.out,
            {
                "device": torch.cuda.get_device_name(device),
                "capability": list(capability),
                "measured_bytes": measured,
                "stated_bytes": stated,
            },
        )


if __name__ == "__main__":
    run_main(main)
