"""The adadamp paper's Table 2 replayed cell by cell: its 15 simulated training times
against dmlbench's model of the authors' own simulation, and the idealised engine.

    python benchmarks/replay_adadamp.py
    python benchmarks/replay_adadamp.py --json benchmarks/results/replays/adadamp.json

Holt & Sievert (SciPy 2021) trained WRN-16-4 on CIFAR-10 once per batch-size schedule on
a T4 GPU, then *simulated* each schedule's training time on their real Dask engine with
every gradient task sleeping instead of computing (their ``exp-dask``). Table 2 gives the
times of three such simulations: the centralised engine as implemented, and the
decentralised model broadcast over a 54 Gbit/s / 0.05 µs and an 800 Gbit/s / 0.025 µs
network.

dmlbench's prediction (``dmlbench.dask.simulate.SleepEngine``) charges each update what
their simulation charged it at P = B/128 gradient tasks: the tasks run in waves of 4 (the
simulations' one Dask worker of 4 threads), each sleeping 78.32 ms for its gradient plus
the model's copy (a measured 58.56 ms deep copy, centralised; log2 P hops of the model
over the link, decentralised), plus the engine's own cost per update and per task. Every
input comes from the authors' repository (``PAPER_REPOSITORY``); the engine's cost is
fitted to their *grads-per-worker* simulation (batch 512 at P = 1 to 16), not to Table 2.
Updates are counted as adadamp counts them (every update a whole batch, ⌈50,000/B⌉ an
epoch), which gives Table 1's counts exactly.

The second, named column is dmlbench's idealised engine (``schedule_table``: one wave
of workers, 11 ms per update, bandwidth and latency alone), which is what dmlbench
printed for this table before: it leaves out the engine's per-task cost and the waves,
so it is about half the paper's time for the largest batches.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import torch
from summary import run_main, write_summary

from dmlbench.dask.dampers import PAPER_EPOCHS, PAPER_SCHEDULES
from dmlbench.dask.simulate import (
    PAPER_DEEPCOPY_S,
    PAPER_ENGINE_RUNS,
    PAPER_GRADIENT_S,
    PAPER_NETWORKS,
    PAPER_REPOSITORY,
    PAPER_TABLE_2,
    PAPER_THREADS,
    UpdateTime,
    paper_engine_cost,
    paper_engines,
    schedule_table,
    sleep_engine_table,
)
from dmlbench.models.wide_resnet import WideResNet

CIFAR_TRAIN = 50_000
COLUMNS = ("centralised", "decentralised, 54 Gbit/s", "decentralised, 800 Gbit/s")


def wrn_bytes() -> int:
    with torch.device("meta"):
        model = WideResNet(depth=16, widen=4, dropout=0.3, num_classes=10)
    return 4 * sum(p.numel() for p in model.parameters())


def replay() -> dict:
    model_bytes = wrn_bytes()
    engines = paper_engines(model_bytes)
    replayed = sleep_engine_table(PAPER_SCHEDULES, CIFAR_TRAIN, PAPER_EPOCHS, engines)
    idealised_engine = UpdateTime(11e-3, 0.0, PAPER_GRADIENT_S, 128)
    idealised = schedule_table(
        PAPER_SCHEDULES, CIFAR_TRAIN, PAPER_EPOCHS, idealised_engine, model_bytes
    )
    replayed, idealised = replayed.set_index("schedule"), idealised.set_index("schedule")
    cells: list[dict[str, Any]] = []
    for schedule, published in PAPER_TABLE_2.items():
        for column, paper_min, engine, network in zip(
            COLUMNS, published, engines, (n.name for n in PAPER_NETWORKS), strict=True
        ):
            predicted = float(replayed.loc[schedule, engine]) / 60
            ideal = float(idealised.loc[schedule, network]) / 60
            cells.append(
                {
                    "schedule": schedule,
                    "column": column,
                    "updates": int(replayed.loc[schedule, "updates"]),
                    "max_workers": int(replayed.loc[schedule, "max_workers"]),
                    "published_min": paper_min,
                    "predicted_min": predicted,
                    "error": predicted / paper_min - 1,
                    "idealised_min": ideal,
                    "idealised_error": ideal / paper_min - 1,
                }
            )
    fixed, per_task = paper_engine_cost()
    return {
        "paper": "Holt & Sievert, Training machine learning models faster with Dask, "
        "SciPy 2021, Table 2",
        "inputs": {
            "repository": PAPER_REPOSITORY,
            "gradient_128_s": PAPER_GRADIENT_S,
            "deepcopy_s": PAPER_DEEPCOPY_S,
            "threads": PAPER_THREADS,
            "engine_runs_s_per_update": PAPER_ENGINE_RUNS,
            "engine_fixed_s": fixed,
            "engine_per_task_s": per_task,
            "model_bytes": model_bytes,
            "networks": {
                n.name: {
                    "gbit_per_s": n.link.bandwidth * 8 / 1e9,
                    "latency_us": n.link.latency_s * 1e6,
                }
                for n in PAPER_NETWORKS
            },
        },
        "cells": cells,
        "median_abs_error": statistics.median(abs(c["error"]) for c in cells),
        "idealised_median_abs_error": statistics.median(abs(c["idealised_error"]) for c in cells),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the cells here")
    args = parser.parse_args()
    result = replay()
    inputs = result["inputs"]
    print(f"{result['paper']}: 15 cells, minutes of training")
    print(
        f"inputs ({inputs['repository']}): gradient {inputs['gradient_128_s'] * 1e3:.2f} ms per "
        f"128 examples, deep copy {inputs['deepcopy_s'] * 1e3:.2f} ms, {inputs['threads']} "
        f"threads, engine {inputs['engine_fixed_s'] * 1e3:.1f} ms + "
        f"{inputs['engine_per_task_s'] * 1e3:.2f} ms per task (fitted to their P = 1..16 "
        f"runs), model {inputs['model_bytes'] / 1e6:.2f} MB"
    )
    print(
        "\n| schedule | updates | workers | column | published | dmlbench | error "
        "| idealised engine | error |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for c in result["cells"]:
        print(
            f"| {c['schedule']} | {c['updates']:,} | {c['max_workers']} | {c['column']} "
            f"| {c['published_min']:.1f} | {c['predicted_min']:.1f} | {c['error']:+.1%} "
            f"| {c['idealised_min']:.1f} | {c['idealised_error']:+.1%} |"
        )
    print(
        f"\nmedian |error|: {result['median_abs_error']:.1%} (the paper's engine), "
        f"{result['idealised_median_abs_error']:.1%} (the idealised engine)"
    )
    if args.json:
        write_summary(args.json, result)


if __name__ == "__main__":
    run_main(main)
