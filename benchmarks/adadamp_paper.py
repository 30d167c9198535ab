"""The adadamp paper's experiment (Holt & Sievert, SciPy 2021): WRN-16-4 on CIFAR-10, its
five batch-size schedules, and its two tables, reproduced from the schedules and from
per-update times measured here.

    python benchmarks/adadamp_paper.py                  # calibrate WRN-16-4, print the tables
    python benchmarks/adadamp_paper.py --train --data-dir ../shared/data/cifar10
    python benchmarks/adadamp_paper.py --gpu-compute-ms 40 --gpu-fixed-ms 5

What it does:

1. **Calibrates** one gradient of 128 CIFAR-sized examples through WRN-16-4
   (forward and backward, ``--threads`` torch threads; median of ``--repeats``) and counts
   its FLOPs with torch's flop counter.
2. With ``--train``, **trains for real** on the Dask estimator: ``--examples`` CIFAR-10
   training images (normalised, not augmented) for one epoch with the paper's optimizer
   (Nesterov 0.9, weight decay 5e-4, lr 0.05), once at a constant batch of 128 and once
   with GeoDamp from 128 (×2 every ``--delay`` epochs, at most 1,024, then the rate
   decays). Two Dask worker processes of one thread each; ``--grads-per-worker`` 64 so
   that both schedules keep both cores busy. Test accuracy on ``--test-examples`` test
   images after the epoch. The engine's overhead per update (wall clock less the
   slowest task's compute) is the median over both fits' updates with no more tasks
   than workers (where no task waits for another on the same worker).
3. **Tabulates** the paper's schedules over CIFAR-10's 50,000 examples for 200 epochs
   (:func:`dmlbench.dask.simulate.schedule_table`): model updates, epochs, maximum
   workers (one per 128 examples), and training time with a free network, with the
   centralised engine on 54 Gbit/s / 0.05 µs, and with decentralised all-reduce on
   54 Gbit/s / 0.05 µs and 800 Gbit/s / 0.025 µs. Twice: with the per-update time
   measured here (one worker is this machine), and with a GPU's (``--gpu-compute-ms``
   per 128-example gradient, ``--gpu-fixed-ms`` per update; by default the authors' own
   figures for their GPU: 78.3 ms and 11 ms, from ``exp-dask/simulation-sleep-time`` in
   their adadamp-experiments repository).

The JSON summary and the figure go to ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from summary import run_main, write_summary
from torch.utils.flop_counter import FlopCounterMode

from dmlbench.dask.dampers import PAPER_EPOCHS, PAPER_SCHEDULES, Constant, Damper, GeoDamp
from dmlbench.dask.simulate import PAPER_NETWORKS, UpdateTime, schedule_table
from dmlbench.models.wide_resnet import WideResNet

HERE = Path(__file__).parent
CIFAR_TRAIN = 50_000
PAPER_GRADS_PER_WORKER = 128
DEFINITIONS = {  # the paper's words for each schedule
    "128 → 128": "batch 128; the rate ÷5 at epochs 60, 120, 180",
    "128 → 640": "batch 128, ×5 at epoch 60 to 640; then the rate ÷5",
    "128 → 3,200": "batch 128, ×5 at epochs 60, 120 to 3,200; then the rate ÷5",
    "128 → 16,000": "batch 128, ×5 at epochs 60, 120, 180 to 16,000",
    "256 → 5,120 (*2)": "batch 256, ×5 at epochs 60, 120 to 5,120 (6,400 wanted: the rate ×0.8); "
    "then the rate ÷5",
}


def wrn() -> WideResNet:
    return WideResNet(depth=16, widen=4, dropout=0.3, num_classes=10)


def calibrate(threads: int, repeats: int, batch: int = PAPER_GRADS_PER_WORKER) -> dict[str, Any]:
    """Seconds and FLOPs of one gradient of ``batch`` examples through WRN-16-4 here."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, loss = wrn(), torch.nn.CrossEntropyLoss()
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))

    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss(model(x), y).backward()

    with FlopCounterMode(display=False) as counter:
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    flops = counter.get_total_flops()
    return {
        "threads": threads,
        "batch": batch,
        "seconds": seconds,
        "all_seconds": times,
        "gflop": flops / 1e9,
        "gflop_per_s": flops / seconds / 1e9,
        "weights": sum(p.numel() for p in model.parameters()),
    }


def cifar_subset(data_dir: Path, examples: int, test_examples: int) -> tuple[np.ndarray, ...]:
    """The first ``examples`` training and ``test_examples`` test images, normalised."""
    from dmlbench.data import cifar10
    from dmlbench.data.augment import ChannelNormalize

    (train_x, train_y), (test_x, test_y) = cifar10.load(data_dir)
    normalize = ChannelNormalize(cifar10.MEAN, cifar10.STD)
    return (
        normalize(train_x[:examples]).numpy(),
        normalize(test_x[:test_examples]).numpy(),
        train_y[:examples].numpy(),
        test_y[:test_examples].numpy(),
    )


def train(args: argparse.Namespace) -> tuple[dict[str, Any], float]:
    """Constant 128 against GeoDamp 128 → 1,024 for one epoch on a real LocalCluster;
    each fit's figures, and the engine's overhead per update."""
    from distributed import Client, LocalCluster

    from dmlbench.dask import DaskClassifier, plot_histories

    x_train, x_test, y_train, y_test = cifar_subset(
        args.data_dir, args.examples, args.test_examples
    )
    dampers: dict[str, Damper] = {
        "constant batch of 128": Constant(128),
        f"GeoDamp 128 → 1,024 (×2 every {args.delay:g} epochs)": GeoDamp(
            128, delay=args.delay, factor=2, max_batch_size=1024
        ),
    }
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        env={"OMP_NUM_THREADS": "1"},
    )
    fits: dict[str, Any] = {}
    histories = {}
    overheads: list[float] = []
    with cluster, Client(cluster, set_as_default=False) as client:
        for name, damper in dampers.items():
            est = DaskClassifier(
                WideResNet,
                module__depth=16,
                module__widen=4,
                module__dropout=0.3,
                module__num_classes=10,
                optimizer=torch.optim.SGD,
                optimizer__lr=0.05,
                optimizer__momentum=0.9,
                optimizer__nesterov=True,
                optimizer__weight_decay=5e-4,
                batch_size=damper,
                max_epochs=1,
                grads_per_worker=args.grads_per_worker,
                min_workers=2,
                max_workers=2,
                torch_threads=1,
                client=client,
                random_state=0,
                timeout=600,
            )
            start = time.perf_counter()
            est.fit(x_train, y_train)
            wall = time.perf_counter() - start
            begin = time.perf_counter()
            accuracy = float(est.score(x_test, y_test))
            evaluation = time.perf_counter() - begin
            updates = est.history_.frame("updates")
            alone = updates[updates["tasks"] <= updates["workers"]]  # no task waits for another
            overhead = alone["wall_s"] - alone["compute_s"]
            overheads.extend(overhead)
            fits[name] = {
                "updates": int(est.n_updates_),
                "batches": sorted({int(b) for b in updates["batch_size"]}),
                "train_s": wall,
                "per_update_s": float(updates["wall_s"].median()),
                "compute_per_task_s": float(updates["compute_s"].median()),
                "overhead_per_update_s": float(overhead.median()),
                "updates_one_task_per_worker": len(alone),
                "train_loss": float(est.history_[-1]["train_loss"]),
                "test_accuracy": accuracy,
                "evaluation_s": evaluation,
            }
            est.history_[-1]["test_accuracy"] = accuracy
            histories[name] = est.history_
            print(
                f"{name}: {est.n_updates_} updates in {wall:.0f} s, median "
                f"{fits[name]['per_update_s']:.2f} s per update "
                f"(overhead {fits[name]['overhead_per_update_s'] * 1e3:.0f} ms), "
                f"train loss {fits[name]['train_loss']:.3f}, test accuracy {accuracy:.2%}",
                flush=True,
            )
    figure = plot_histories(
        histories,
        args.out / "wrn16-4-short.png",
        title=f"WRN-16-4 on {args.examples:,} CIFAR-10 images, one epoch on 2 Dask workers "
        f"(2 cores): training loss, batch and workers",
    )
    print(f"plot: {figure}")
    return fits, statistics.median(overheads)


def table_lines(table: Any) -> list[str]:
    """The schedule table in Markdown, times in minutes."""
    networks = [network.name for network in PAPER_NETWORKS]
    head = ["schedule", "updates", "epochs", "max workers", "no network", *networks]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for row in table.to_dict("records"):
        times = [f"{row[key] / 60:,.1f} min" for key in ("compute_s", *networks)]
        cells = [
            row["schedule"],
            f"{row['updates']:,}",
            str(row["epochs"]),
            str(row["max_workers"]),
            *times,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads to calibrate with")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--train", action="store_true", help="also the real short run")
    parser.add_argument(
        "--data-dir", type=Path, default=HERE.parent.parent / "shared" / "data" / "cifar10"
    )
    parser.add_argument("--examples", type=int, default=25_600)
    parser.add_argument("--test-examples", type=int, default=2_000)
    parser.add_argument("--delay", type=float, default=0.2, help="GeoDamp: epochs per doubling")
    parser.add_argument("--grads-per-worker", type=int, default=64)
    parser.add_argument("--gpu-compute-ms", type=float, default=78.3)
    parser.add_argument("--gpu-fixed-ms", type=float, default=11.0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "adadamp")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    measured = calibrate(args.threads, args.repeats)
    print(
        f"WRN-16-4 ({measured['weights']:,} weights): one gradient of 128 examples takes "
        f"{measured['seconds']:.2f} s on {args.threads} threads here (median of "
        f"{args.repeats}), {measured['gflop']:.0f} GFLOP, "
        f"{measured['gflop_per_s']:.0f} GFLOP/s",
        flush=True,
    )
    fits, overhead = train(args) if args.train else ({}, 0.0)
    here = UpdateTime(overhead, 0.0, measured["seconds"], PAPER_GRADS_PER_WORKER)
    gpu = UpdateTime(
        args.gpu_fixed_ms / 1e3, 0.0, args.gpu_compute_ms / 1e3, PAPER_GRADS_PER_WORKER
    )
    gradient_bytes = 4 * measured["weights"]
    tables = {
        "here": schedule_table(PAPER_SCHEDULES, CIFAR_TRAIN, PAPER_EPOCHS, here, gradient_bytes),
        "gpu": schedule_table(PAPER_SCHEDULES, CIFAR_TRAIN, PAPER_EPOCHS, gpu, gradient_bytes),
    }
    print("\nThe schedules (the paper's definitions):")
    for name, words in DEFINITIONS.items():
        print(f"- {name}: {words}")
    print(
        f"\nPer update on this machine: {here.compute_s:.2f} s per 128-example gradient + "
        f"{here.fixed_s * 1e3:.0f} ms of engine overhead"
        + (" (measured in the real run)" if fits else " (no --train: overhead left out)")
        + f"; gradients {gradient_bytes / 1e6:.1f} MB"
    )
    print("\n".join(table_lines(tables["here"])))
    print(
        f"\nPer update on a GPU: {args.gpu_compute_ms:g} ms per 128-example gradient + "
        f"{args.gpu_fixed_ms:g} ms ({here.compute_s / gpu.compute_s:.0f}× faster compute "
        "than here)"
    )
    print("\n".join(table_lines(tables["gpu"])))
    base = tables["gpu"].set_index("schedule")["compute_s"]
    print(
        "\nGPU, no network: "
        + ", ".join(f"{name} {base[name] / 60:.0f} min" for name in base.index)
        + f"; the fastest is {base.max() / base.min():.2f}× faster than 128 → 128"
    )
    summary = {
        "calibration": measured,
        "short_run": {"fits": fits, "overhead_per_update_s": overhead},
        "update_time": {"here": vars(here), "gpu": vars(gpu)},
        "networks": [
            {
                "name": n.name,
                "algorithm": n.algorithm,
                "gbit_per_s": n.link.bandwidth * 8 / 1e9,
                "latency_us": n.link.latency_s * 1e6,
            }
            for n in PAPER_NETWORKS
        ],
        "tables": {key: table.to_dict("records") for key, table in tables.items()},
    }
    write_summary(args.out / "paper.json", summary)


if __name__ == "__main__":
    run_main(main)
