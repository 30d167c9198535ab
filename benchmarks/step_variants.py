"""One training step of dmlbench's ResNet-20 in a tight loop (no data loading, no
bookkeeping), under each of the settings dmlbench can turn on and inductor's two other
CPU options, in fresh processes, interleaved: what each setting is worth on its own.

    python benchmarks/step_variants.py                 # 3 rounds × 7 variants, ~4 min
    python benchmarks/step_variants.py --profile       # and torch.profiler's top ops

Each variant runs in a process of its own, since the allocator's thresholds last for a
process and glibc's own depend on what the process freed before. A variant's figure is
the median step over ``--steps`` steps after 15 warm-up steps; the ratio is against
the first variant (glibc's defaults, the default memory layout, eager) of the same
round. The JSON summary goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from summary import run_main, write_summary

HERE = Path(__file__).parent
VARIANTS = {  # name: (channels_last, cpu_allocator, how it is compiled or None)
    "eager, default layout, glibc's allocator": (False, "default", None),
    "eager, default layout, tuned allocator": (False, "tuned", None),
    "eager, channels-last, glibc's allocator": (True, "default", None),
    "eager, channels-last, tuned allocator (dmlbench's default)": (True, "tuned", None),
    "compiled, channels-last, tuned allocator": (True, "tuned", "default"),
    "compiled with max-autotune, channels-last, tuned": (True, "tuned", "max-autotune"),
    "compiled with the C++ wrapper, channels-last, tuned": (True, "tuned", "cpp-wrapper"),
}
PROFILED = (
    "eager, channels-last, tuned allocator (dmlbench's default)",
    "compiled, channels-last, tuned allocator",
)


def one_variant(
    channels_last: bool,
    allocator: str,
    compile_: str | None,
    steps: int,
    threads: int,
    profile: bool,
) -> dict[str, Any]:
    """Runs in its own process: time ``steps`` steps; page faults per step."""
    from dmlbench.train.allocator import tune_allocator
    from dmlbench.train.hardware import page_faults

    in_effect = tune_allocator(allocator)  # first, as a worker does before its model
    import torch
    import torch.nn.functional as F

    from dmlbench.models import build_model
    from dmlbench.spec.recipe import ModelSpec

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model(
        ModelSpec(name="resnet", options={"depth": 20, "variant": "m1"}), (3, 32, 32), 10
    )
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        x = x.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4, foreach=True
    )
    if compile_ == "cpp-wrapper":  # inductor's generated host code in C++, not Python
        import torch._inductor.config

        torch._inductor.config.cpp_wrapper = True
    mode = "max-autotune" if compile_ == "max-autotune" else None
    net = torch.compile(model, mode=mode) if compile_ else model

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        optimizer.step()

    for _ in range(15):
        step()
    faults, times = page_faults(), []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    result: dict[str, Any] = {
        "step_s": statistics.median(times),
        "allocator": in_effect,
        "page_faults_per_step": (page_faults() - faults) / steps,
    }
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiler

        with profiler(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(20):
                step()
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
        result["top_ops"] = {e.key: e.self_cpu_time_total / total for e in top}
        result["convolution_share"] = (
            sum(e.self_cpu_time_total for e in events if "convolution" in e.key) / total
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--profile", action="store_true", help="also torch.profiler's top ops, eager and compiled"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "step_variants.json")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # internal: one child process
    args = parser.parse_args()
    if args.variant:
        layout, allocator, compile_ = VARIANTS[args.variant]
        profile = args.profile and args.variant in PROFILED
        print(
            json.dumps(one_variant(layout, allocator, compile_, args.steps, args.threads, profile))
        )
        return
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        row: dict[str, Any] = {}
        for name in VARIANTS:
            command = [
                sys.executable,
                __file__,
                "--variant",
                name,
                "--steps",
                str(args.steps),
                "--threads",
                str(args.threads),
                *(["--profile"] * args.profile),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            row[name] = json.loads(done.stdout.strip().splitlines()[-1])
        base = row[next(iter(VARIANTS))]["step_s"]
        for name, result in row.items():
            result["ratio"] = result["step_s"] / base
            print(
                f"round {number + 1}: {name}: {result['step_s'] * 1e3:.1f} ms "
                f"({result['ratio']:.2f}×), {result['page_faults_per_step']:,.0f} page "
                "faults a step",
                flush=True,
            )
        rounds.append(row)
    medians = {
        name: {
            key: statistics.median(r[name][key] for r in rounds)
            for key in ("step_s", "ratio", "page_faults_per_step")
        }
        for name in VARIANTS
    }
    for name, figures in medians.items():
        print(
            f"median {name}: {figures['step_s'] * 1e3:.1f} ms, {figures['ratio']:.2f}×, "
            f"{figures['page_faults_per_step']:,.0f} page faults a step"
        )
    profiles = {
        name: rounds[-1][name]["top_ops"] for name in PROFILED if "top_ops" in rounds[-1][name]
    }
    for name, top_ops in profiles.items():
        share = rounds[-1][name]["convolution_share"]
        print(
            f"torch.profiler, {name}, share of self CPU time (last round; "
            f"convolutions {share:.1%}):"
        )
        for op, share in top_ops.items():
            print(f"  {share:6.1%}  {op[:70]}")
    write_summary(
        args.out,
        {
            "threads": args.threads,
            "rounds": rounds,
            "medians": medians,
            "profiles": profiles,
        },
    )


if __name__ == "__main__":
    run_main(main)
