"""Constant batch against GeoDamp on scikit-learn's digits, trained on a real Dask
LocalCluster, and what the schedules would save at scale (the adadamp paper's claim).

    python benchmarks/dask_damping.py                      # 3 seeds, 40 epochs, 2 workers
    python benchmarks/dask_damping.py --seeds 0 --epochs 20 --out /tmp/damping
    python benchmarks/dask_damping.py --dataset cifar10 --hidden 256 --epochs 24 --delay 3
    python benchmarks/dask_damping.py --replot benchmarks/results/dask/damping-cifar10.json

Both schedules train the same MLP with the same optimizer, learning rate, epochs and
example order; GeoDamp doubles the batch every ``--delay`` epochs and the cluster grows
with it (``grads_per_worker`` examples per worker, up to ``--workers``). After every
epoch the test accuracy is measured (outside the timed training). Reported per
schedule: model updates, the updates needed to first reach ``--target`` test accuracy
(by default the lower of the two schedules' final accuracies: a level both reach),
the final accuracy and the training wall clock; the plot shows accuracy, batch size
and workers against model updates.

The simulation then takes the per-update time *measured* in these fits
(:func:`dmlbench.dask.simulate.measure_update_time`) to tabulate updates and wall-clock
time at larger worker limits, and, with the performance model's calibration from
``--store`` (``benchmarks/results/perfmodel``), centralised (one server) against
decentralised (ring) exchange on 54 and 800 Gbit/s links.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from distributed import Client, LocalCluster
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from summary import run_main, write_summary

from dmlbench.dask import DaskClassifier, History, plot_histories
from dmlbench.dask.dampers import Constant, GeoDamp
from dmlbench.dask.simulate import measure_update_time, network_table, schedule, simulate
from dmlbench.models.mlp import MLP
from dmlbench.netem.profiles import parse_rate
from dmlbench.perfmodel.calibrate import calibrate_comm, comm_for
from dmlbench.perfmodel.model import CommCalibration, Link

HERE = Path(__file__).parent


def dataset(name: str, data_dir: Path) -> tuple[np.ndarray, ...]:
    """(x_train, x_test, y_train, y_test), standardised per feature, flattened."""
    if name == "digits":
        x, y = load_digits(return_X_y=True)
        x_train, x_test, y_train, y_test = train_test_split(
            x.astype(np.float32), y, test_size=0.25, random_state=0, stratify=y
        )
    else:
        from dmlbench.data import cifar10

        (x_train, y_train), (x_test, y_test) = (
            (images.reshape(len(images), -1).numpy().astype(np.float32) / 255, labels.numpy())
            for images, labels in cifar10.load(data_dir)
        )
    scaler = StandardScaler().fit(x_train)
    return (
        scaler.transform(x_train).astype(np.float32),
        scaler.transform(x_test).astype(np.float32),
        y_train,
        y_test,
    )


def train(
    client: Client, damper: Any, seed: int, args: argparse.Namespace, data: tuple[np.ndarray, ...]
) -> tuple[DaskClassifier, float]:
    x_train, x_test, y_train, y_test = data
    est = DaskClassifier(
        MLP,
        module__in_features=x_train.shape[1],
        module__hidden=[args.hidden],
        module__num_outputs=10,
        optimizer=torch.optim.SGD,
        optimizer__lr=args.lr,
        optimizer__momentum=0.9,
        batch_size=damper,
        grads_per_worker=args.grads_per_worker,
        min_workers=1,
        max_workers=args.workers,
        client=client,
        random_state=seed,
    )
    training = 0.0
    for _ in range(args.epochs):
        start = time.perf_counter()
        est.partial_fit(x_train, y_train)
        training += time.perf_counter() - start
        est.history_[-1]["test_accuracy"] = float(est.score(x_test, y_test))
    est._close_engine()
    return est, training


def schedule_names(batch: int, factor: float, delay: float, max_batch: int | None) -> list[str]:
    """The two schedules' names, as the table, the JSON and the figure's legend give them."""
    cap = f", at most {max_batch}" if max_batch else ""
    return [f"constant batch of {batch}", f"GeoDamp: batch ×{factor:g} every {delay:g} epochs{cap}"]


def figure_title(
    dataset: str, train: int, test: int, hidden: int, epochs: int, seeds: int, workers: int
) -> str:
    return (
        f"Constant batch against GeoDamp on {dataset} ({train:,} train / {test:,} test), "
        f"MLP with {hidden} hidden units, {epochs} epochs, ≤ {workers} Dask workers; "
        f"seed 0 of {seeds}"
    )


def replot(saved: Path) -> Path:
    """Draw the figure again from a saved JSON (its first seed), without training."""
    data = json.loads(saved.read_text())
    args = data["args"]
    cap = None if args.get("max_batch", "None") == "None" else int(args["max_batch"])
    names = schedule_names(int(args["batch"]), float(args["factor"]), float(args["delay"]), cap)
    histories = {
        name: History(runs[0]) for name, runs in zip(names, data["histories"].values(), strict=True)
    }
    sizes = {"cifar10": (50_000, 10_000), "digits": (1_347, 450)}[args["dataset"]]
    title = figure_title(
        args["dataset"].replace("cifar10", "CIFAR-10"),
        *sizes,
        int(args["hidden"]),
        int(args["epochs"]),
        len(json.loads(args["seeds"])),
        int(args["workers"]),
    )
    return plot_histories(
        histories,
        saved.parent / f"geodamp-{args['dataset']}.png",
        metric="test_accuracy",
        title=title,
    )


def epochs_only(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in epoch.items() if k != "updates"} for epoch in history]


def updates_to(history: list[dict], target: float) -> int | None:
    for epoch in history:
        if epoch["test_accuracy"] >= target:
            return int(epoch["n_updates"])
    return None


def comm_calibration(store: Path, host_bandwidth: float | None) -> tuple[CommCalibration, str]:
    from dmlbench.results import ResultsStore

    source = f"calibrated from {store}"
    try:
        calibration = comm_for(calibrate_comm(ResultsStore(store).comm_runs()), 2)
    except Exception:
        calibration, source = CommCalibration(alpha_s=50e-6, host_busbw=1.3e9), "assumed"
    if host_bandwidth:
        calibration = CommCalibration(
            calibration.alpha_s,
            host_bandwidth,
            calibration.link_efficiency,
            calibration.latencies_per_step,
        )
        source += f", host bandwidth set to {host_bandwidth * 8 / 1e9:g} Gbit/s"
    return calibration, source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["digits", "cifar10"], default="digits")
    parser.add_argument(
        "--data-dir", type=Path, default=HERE.parent.parent / "shared" / "data" / "cifar10"
    )
    parser.add_argument("--hidden", type=int, default=128, help="the MLP's hidden width")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch", type=int, default=32, help="constant batch, GeoDamp's first")
    parser.add_argument("--delay", type=float, default=5, help="GeoDamp: epochs per doubling")
    parser.add_argument("--factor", type=float, default=2)
    parser.add_argument(
        "--max-batch",
        type=int,
        default=None,
        help="GeoDamp's max_batch_size: past it the learning rate decays",
    )
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        help="test accuracy (default: the lower final accuracy of the two)",
    )
    parser.add_argument("--workers", type=int, default=2, help="most Dask workers")
    parser.add_argument("--grads-per-worker", type=int, default=64)
    parser.add_argument("--store", type=Path, default=HERE / "results" / "perfmodel")
    parser.add_argument("--host-bandwidth", default="2tbit")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "dask")
    parser.add_argument("--replot", type=Path, help="only redraw the figure from this JSON")
    args = parser.parse_args()
    if args.replot:
        print(f"plot: {replot(args.replot)}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    data = dataset(args.dataset, args.data_dir)
    geodamp = GeoDamp(args.batch, args.delay, args.factor, args.max_batch)
    constant_name, geodamp_name = schedule_names(
        args.batch, args.factor, args.delay, args.max_batch
    )
    dampers = {constant_name: Constant(args.batch), geodamp_name: geodamp}
    cluster = LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        env={"OMP_NUM_THREADS": "1"},
    )
    fits: dict[str, list[tuple[DaskClassifier, float]]] = {name: [] for name in dampers}
    with cluster, Client(cluster, set_as_default=False) as client:
        for seed in args.seeds:
            for name, damper in dampers.items():
                fits[name].append(train(client, damper, seed, args, data))
                est = fits[name][-1][0]
                print(
                    f"seed {seed} {name}: {est.n_updates_} updates, test accuracy "
                    f"{est.history_[-1]['test_accuracy']:.4f}",
                    flush=True,
                )

    finals = [statistics.mean(e.history_[-1]["test_accuracy"] for e, _ in r) for r in fits.values()]
    args.target = args.target or min(finals)
    print(
        f"\n{args.dataset} ({len(data[0])} train / {len(data[1])} test), MLP "
        f"{data[0].shape[1]}-{args.hidden}-10, SGD lr "
        f"{args.lr} momentum 0.9, {args.epochs} epochs, ≤ {args.workers} Dask workers, "
        f"{len(args.seeds)} seeds; target {args.target:.2%} test accuracy"
    )
    print(f"{'schedule':44} {'updates':>8} {'to target':>10} {'final acc':>15} {'train s':>8}")
    summary: dict[str, Any] = {}
    for name, runs in fits.items():
        to_target = [updates_to(e.history_, args.target) for e, _ in runs]
        finals = [e.history_[-1]["test_accuracy"] for e, _ in runs]
        reached = [u for u in to_target if u is not None]
        summary[name] = {
            "updates": statistics.mean(e.n_updates_ for e, _ in runs),
            "updates_to_target": statistics.mean(reached) if reached else None,
            "reached": f"{len(reached)}/{len(runs)}",
            "final_accuracy": statistics.mean(finals),
            "final_accuracy_std": statistics.pstdev(finals),
            "train_s": statistics.mean(t for _, t in runs),
        }
        s = summary[name]
        shown = f"{s['updates_to_target']:.0f} ({s['reached']})" if reached else "never"
        print(
            f"{name:44} {s['updates']:8.0f} {shown:>10} {s['final_accuracy']:9.4f} ± "
            f"{s['final_accuracy_std']:.4f} {s['train_s']:8.1f}"
        )
    names = list(fits)
    a, b = summary[names[0]], summary[names[1]]
    print(
        f"updates, constant / GeoDamp: {a['updates'] / b['updates']:.1f}× in all, "
        + (
            f"{a['updates_to_target'] / b['updates_to_target']:.1f}× to the target"
            if a["updates_to_target"] and b["updates_to_target"]
            else "target not reached"
        )
    )

    figure = plot_histories(
        {n: runs[0][0].history_ for n, runs in fits.items()},
        args.out / f"geodamp-{args.dataset}.png",
        metric="test_accuracy",
        title=figure_title(
            args.dataset.replace("cifar10", "CIFAR-10"),
            len(data[0]),
            len(data[1]),
            args.hidden,
            args.epochs,
            len(args.seeds),
            args.workers,
        ),
    )
    print(f"plot: {figure}")

    # ---- simulation from the measured per-update time
    records = [u for runs in fits.values() for e, _ in runs for u in e.history_.update_records()]
    update_time = measure_update_time(records, args.grads_per_worker)
    n = len(data[0])
    schedules = {name: schedule(damper, n, args.epochs) for name, damper in dampers.items()}
    table = simulate(schedules, update_time, [1, 2, 8, 32])
    print(
        f"\nmeasured per update: {update_time.fixed_s * 1e3:.2f} ms fixed + "
        f"{update_time.per_task_s * 1e3:.2f} ms per task + {update_time.compute_s * 1e3:.2f}"
        f" ms compute per {args.grads_per_worker}-example task"
    )
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    gradient_bytes = 4 * sum(p.numel() for p in runs[0][0].module_.parameters())
    calibration, source = comm_calibration(args.store, parse_rate(args.host_bandwidth) / 8)
    links = {label: Link(parse_rate(label) / 8, 0.0) for label in ("54gbit", "800gbit")}
    net = network_table(schedules, update_time, gradient_bytes, links, calibration, 32)
    print(
        f"\ncentralised (ps) vs decentralised (ring) at ≤ 32 workers, {gradient_bytes / 1e3:.0f}"
        f" kB gradients; comm {source}"
    )
    print(net.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    write_summary(
        args.out / f"damping-{args.dataset}.json",
        {
            "args": {k: str(v) for k, v in vars(args).items()},
            "summary": summary,
            "simulation": table.to_dict("records"),
            "network": net.to_dict("records"),
            # epoch records only: the update records of a CIFAR run are tens of MB
            "histories": {n: [epochs_only(e.history_) for e, _ in r] for n, r in fits.items()},
        },
    )


if __name__ == "__main__":
    run_main(main)
