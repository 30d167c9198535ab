"""Published scaling results on real clusters replayed cell by cell: Goyal et al. 2017
(ResNet-50 on up to 352 P100s), PyTorch's DDP benchmark (four ImageNet models on up to
16 V100s) and mlbench's task 2a (logistic regression on up to 64 cloud nodes), each with
the published figure, dmlbench's prediction and the error.

    python benchmarks/replay_clusters.py
    python benchmarks/replay_clusters.py --json benchmarks/results/replays/clusters.json \
        --png benchmarks/results/replays/goyal.png

Inputs come from the papers and the hardware profiles (``src/dmlbench/perfmodel/
hardware.yaml``, each figure with its data sheet); each replay calibrates compute from
the paper's smallest configuration and predicts the larger ones. What is assumed (where
no paper or data sheet says) is printed with the inputs. The adadamp paper's Table 2 is
``benchmarks/replay_adadamp.py``. Li et al. 2020 (the DDP paper) is not replayed: its
per-iteration latencies are in figures this machine cannot read (no copy of the paper);
the DDP benchmark table its authors published in torch's repository stands in.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from summary import run_main, write_summary

from dmlbench.files import write_figure
from dmlbench.perfmodel.cluster import task_cost
from dmlbench.perfmodel.hardware import load_hardware
from dmlbench.perfmodel.replays import (
    GOYAL_CLUSTER,
    GOYAL_TASK,
    ddp_benchmark,
    goyal,
    goyal_sensitivity,
    median_abs_error,
    mlbench_2a,
    published_points,
)
from dmlbench.report.prediction_figures import cluster_scaling


def show(unit: str, value: float) -> str:
    if not unit:
        return f"{value:.1%}"
    if unit == "×":
        return f"{value:.3f}×"
    if unit == "s" and value < 10:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.1f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the cells and inputs here")
    parser.add_argument("--png", type=Path, help="draw Goyal et al.'s points beside the model")
    args = parser.parse_args()
    cost = task_cost(GOYAL_TASK)
    hardware = load_hardware()
    replays = {
        "goyal": goyal(hardware, cost),
        "ddp-benchmark": ddp_benchmark(hardware),
        "mlbench-2a": mlbench_2a(),
    }
    result = {}
    for name, (cells, inputs) in replays.items():
        print(f"\n## {cells[0].paper}\n")
        for key, value in inputs.items():
            if key == "models":
                for model, figures in value.items():
                    print(f"- {model}: " + ", ".join(f"{k} {v:.4g}" for k, v in figures.items()))
            elif key.startswith("errors"):
                print(f"- {key}: " + ", ".join(f"{n} {e:+.1%}" for n, e in value.items()))
            elif key != "rows":
                print(f"- {key}: {value}")
        nulls = all(c.comm_free is not None for c in cells)
        print(
            "\n| workers | figure | published | dmlbench | error |"
            + (" comm free | error |" if nulls else "")
        )
        print("|---:|---|---:|---:|---:|" + ("---:|---:|" if nulls else ""))
        for c in cells:
            free = (
                f" {show(c.unit, c.comm_free)} | {c.comm_free_error:+.1%} |"
                if c.comm_free is not None and c.comm_free_error is not None
                else ""
            )
            print(
                f"| {c.workers} | {c.figure} | {show(c.unit, c.published)} "
                f"| {show(c.unit, c.predicted)} | {c.error:+.1%} |" + free
            )
        error = median_abs_error(cells)
        print(f"\nmedian |error|: {error:.1%}")
        if nulls:
            null = statistics.median(abs(c.comm_free_error or 0.0) for c in cells)
            print(f"median |error| of the communication-free null: {null:.1%}")
        if name == "goyal":
            print("\nsensitivity to the assumed constants of the 50 Gbit/s TCP link:")
            sensitivity = goyal_sensitivity(hardware, cost)
            for row in sensitivity:
                errors = ", ".join(f"{k}: {v:+.1%}" for k, v in row["errors"].items())
                print(
                    f"  {row['constant']} = {row['value']:g} (profile {row['profile']:g}): {errors}"
                )
            inputs["sensitivity"] = sensitivity
        print("\npredicted, every layout:")
        for row in inputs["rows"]:
            print(
                "  "
                + ", ".join(
                    f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in row.items()
                    if v is not None
                )
            )
        result[name] = {
            "cells": [
                {**vars(c), "error": c.error, "comm_free_error": c.comm_free_error} for c in cells
            ],
            "median_abs_error": error,
            "inputs": inputs,
        }
    if args.png:
        _, inputs = replays["goyal"]
        figure = cluster_scaling(
            GOYAL_TASK,
            hardware.cluster(GOYAL_CLUSTER).describe(),
            inputs["rows"],
            published_points(GOYAL_TASK, GOYAL_CLUSTER),
        )
        write_figure(figure, args.png, dpi=150)
        print(f"figure: {args.png}")
    if args.json:
        write_summary(args.json, {"replays": result})


if __name__ == "__main__":
    run_main(main)
