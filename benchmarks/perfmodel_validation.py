"""Validate the performance model against measurements on emulated networks (needs root).

Calibrates once on the unshaped host network: an all-reduce micro-benchmark gives the
per-message overhead and the hosts' bandwidth, and an unshaped 2-worker training run
gives compute per step and gradient bytes. Then, for 3 bandwidths × 2 latencies, it
measures all-reduce time at 2 message sizes and a training run's step time, and
compares each with the model's prediction, which knows only the profile's nominal
bandwidth and latency.

    sudo python benchmarks/perfmodel_validation.py --store benchmarks/results/perfmodel

Prints one row per comparison and the median absolute error (target ≤ 15%).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from summary import run_main

from dmlbench.launch import run_benchmark
from dmlbench.launch.bench import resolve_bench, run_comm_bench
from dmlbench.netem.profiles import NetworkSpec
from dmlbench.perfmodel import Link, allreduce_time, calibrate_comm
from dmlbench.perfmodel.calibrate import compute_step_s
from dmlbench.resolve import resolve_spec
from dmlbench.results import ResultsStore
from dmlbench.results.records import RunSummary

BANDWIDTHS = ("50mbit", "200mbit", "1gbit")
LATENCIES = ("1ms", "5ms")
SIZES = (65536, 2097152)
MODEL = {"recipe.model.options.hidden": [256, 256]}  # 0.09 M parameters, 0.35 MB a step


def bench(
    store: ResultsStore, network: dict, repeats: int, sizes: tuple[int, int, int] | None = None
) -> dict[int, float]:
    low, high, factor = sizes or (SIZES[0], SIZES[1], SIZES[1] // SIZES[0])
    spec = resolve_bench(
        {
            "workers": 2,
            "min_bytes": low,
            "max_bytes": high,
            "factor": factor,
            "repeats": repeats,
            "warmup": 2,
            "network": network,
        }
    )
    outcome = run_comm_bench(spec, store)
    if outcome.status != "success":
        sys.exit(f"all-reduce benchmark failed: {outcome.error}")
    return {row["bytes"]: row["latency_s"] for row in outcome.rows}


def train(store: ResultsStore, network: dict, steps: int) -> RunSummary:
    overrides = [f"{k}={v}" for k, v in MODEL.items()]
    spec = resolve_spec(
        "digits-mlp",
        overrides=[*overrides, f"max_steps={steps}", "stop_at_target=false"],
        workers=2,
        network=network,
    )
    outcome = run_benchmark(spec, store, echo=False)
    if outcome.status == "failed":
        sys.exit(f"training run failed: {outcome.error}")
    return outcome.summary


def compute_per_step(summary: RunSummary) -> float:
    if not summary.phases_steady or not summary.steady_steps:
        sys.exit("the calibration run timed no steady steps: give it more --steps")
    return compute_step_s(summary)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", type=Path, default=Path("benchmarks/results/perfmodel"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args()
    store = ResultsStore(args.store)
    bench(store, {}, args.repeats, sizes=(4, 4 * 2**20, 4))  # the whole range, unshaped
    calibration = calibrate_comm(store.comm_runs())[2]
    base = train(store, {}, args.steps)
    compute, grads = compute_per_step(base), base.gradient_bytes
    if grads is None:
        sys.exit("the calibration run recorded no gradient size")
    print(
        f"calibration: alpha {calibration.alpha_s * 1e6:.0f} us, host busbw "
        f"{calibration.host_busbw / 1e6:,.0f} MB/s, compute {compute * 1e3:.2f} ms/step, "
        f"{grads / 1e6:.3f} MB of gradients"
    )
    rows = []
    for bandwidth in BANDWIDTHS:
        for latency in LATENCIES:
            network = {"bandwidth": bandwidth, "latency": latency}
            resolved = NetworkSpec(**network).resolve()
            link = Link((resolved.rate_bps or math.inf) / 8, resolved.delay_s)
            measured = bench(store, network, args.repeats)
            for size in SIZES:
                predicted = allreduce_time("ring", 2, size, link, calibration)
                rows.append(
                    (
                        f"{bandwidth} {latency}",
                        f"all-reduce {size // 1024} KiB",
                        predicted,
                        measured[size],
                    )
                )
            summary = train(store, network, args.steps)
            predicted = compute + allreduce_time("ring", 2, grads, link, calibration)
            step = summary.step_time_s or math.nan
            rows.append((f"{bandwidth} {latency}", "training step", predicted, step))
    print("| network | what | predicted ms | measured ms | error |")
    print("|---|---|---|---|---|")
    errors = []
    for where, what, model, seen in rows:
        error = (model - seen) / seen
        errors.append(abs(error))
        print(f"| {where} | {what} | {model * 1e3:,.2f} | {seen * 1e3:,.2f} | {error:+.1%} |")
    median = statistics.median(errors)
    print(f"\nmedian absolute error: {median:.1%} over {len(errors)} comparisons (target <= 15%)")
    return 0


if __name__ == "__main__":
    run_main(main)
