"""The optimizer's step on each task's model: torch's fused kernel (dmlbench's default
since this benchmark) against its foreach implementation (the default before), side
by side.

For each task with an input shape, the recipe's model is built and its recipe's
optimizer made both ways over the same parameters. Both get the same gradients, and
their steps are timed in alternating rounds (a fresh model for each, so neither warms
the other's memory). The figure is the median step; the ratio is fused over foreach,
round by round. Threads: ``--threads`` (dmlbench's CPU worker takes the cores it is
given; 2 here).

    python benchmarks/optimizer_step.py --out benchmarks/results/optimizer_step.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from summary import run_main, write_summary

from dmlbench.models import build_model
from dmlbench.optim.build import OPTIMIZERS, parameter_groups
from dmlbench.tasks import get_task

TASKS = ["digits-mlp", "cifar10-resnet20", "cifar10-wrn16-4", "kjv-gpt", "imagenet-resnet50"]
# tasks whose data gives the shape (scikit-learn's digits: 8×8 pixels, 10 classes)
SHAPES = {"digits-mlp": ((64,), 10)}


def optimizer_for(task: str, implementation: str) -> tuple[torch.optim.Optimizer, int]:
    """The task's model (fresh, seeded) and its recipe's optimizer, run ``implementation``
    way, with a gradient on every parameter; and the parameter count."""
    definition = get_task(task)
    recipe = definition.recipe
    shape, outputs = SHAPES.get(task, (definition.input_shape, definition.num_outputs))
    assert shape is not None and outputs is not None, f"{task}: no input shape"
    torch.manual_seed(0)
    model = build_model(recipe.model, shape, outputs)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    spec = recipe.optimizer
    optimizer = OPTIMIZERS[spec.name](spec, parameter_groups(spec, model))
    for group in optimizer.param_groups:  # before the first step, as optim.build switches
        group["fused"], group["foreach"] = implementation == "fused", implementation == "foreach"
        group["lr"] = 0.01
    return optimizer, sum(p.numel() for p in model.parameters())


def step_ms(optimizer: torch.optim.Optimizer, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        optimizer.step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for task in args.tasks:
        spec = get_task(task).recipe.optimizer
        times: dict[str, list[float]] = {"foreach": [], "fused": []}
        params = 0
        for round_ in range(args.rounds):
            order = ["foreach", "fused"] if round_ % 2 == 0 else ["fused", "foreach"]
            for implementation in order:
                optimizer, params = optimizer_for(task, implementation)
                times[implementation].append(step_ms(optimizer, args.warmup, args.steps))
                del optimizer
        ratios = [f / e for f, e in zip(times["fused"], times["foreach"], strict=True)]
        row = {
            "task": task,
            "optimizer": spec.name,
            "parameters": params,
            "foreach_ms": statistics.median(times["foreach"]),
            "fused_ms": statistics.median(times["fused"]),
            "ratio_rounds": [round(r, 3) for r in ratios],
            "ratio": statistics.median(ratios),
        }
        rows.append(row)
        print(
            f"{task:18} {spec.name:5} {params / 1e6:7.2f} M parameters: foreach "
            f"{row['foreach_ms']:8.2f} ms, fused {row['fused_ms']:8.2f} ms, fused / foreach "
            f"{row['ratio']:.2f} (rounds {', '.join(f'{r:.2f}' for r in ratios)})",
            flush=True,
        )
    if args.out:
        write_summary(args.out, {"threads": args.threads, "rows": rows})


if __name__ == "__main__":
    run_main(main)
