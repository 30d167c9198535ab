"""Multi-node figures on an emulated cluster, and the two-level model against them (root).

Every layout has 4 workers: 1×4 (one node), 2×2 and 4×1 (nodes × workers per node),
the link between nodes shaped to 10 Gbit/s or 1 Gbit/s, inside a node the node's
loopback. Measured side by side in one run:

- all-reduce (``bench allreduce --nodes``) at 1 MiB and 4 MiB, flat ring and
  hierarchical;
- training steps of digits-mlp and cifar10-resnet20 (``max_steps``): step time and
  comm share;

and compared with the two-level α-β model (``perfmodel.cluster_allreduce_time``),
calibrated once on this host: an unshaped 4-worker all-reduce benchmark (overhead,
host bandwidth) and each task's unshaped 1×4 run, repeated right before each layout's
run (``--no-recalibrate``: once), as this machine's speed drifts by ±20% within
minutes (gradient bytes, and the part of its step the network does not change: its
step time less the modelled 1×4 all-reduce;
with 4 workers on 2 cores that part includes waiting for descheduled peers, which the
mean compute phase does not). The model knows only the layout and the profile's
nominal bandwidth and latency.

    sudo .venv/bin/python benchmarks/multinode.py --cifar-dir ../shared/data/cifar10

Prints the tables for BENCHMARKS.md and writes ``benchmarks/results/multinode.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from summary import run_main, write_summary

from dmlbench.launch import run_benchmark
from dmlbench.launch.bench import resolve_bench, run_comm_bench
from dmlbench.netem.profiles import NetworkSpec
from dmlbench.perfmodel import Layout, Link, calibrate_comm, cluster_allreduce_time
from dmlbench.perfmodel.calibrate import compute_step_s
from dmlbench.perfmodel.model import Algorithm
from dmlbench.resolve import resolve_spec
from dmlbench.results import ResultsStore

LAYOUTS = ((1, 4), (2, 2), (4, 1))
NETWORKS = ("10gbit", "1gbit")
SIZES = (2**20, 2**22)


def bench(store: ResultsStore, nodes: int, network: str | None, repeats: int) -> list[dict]:
    low, high = (4, SIZES[1]) if network is None else SIZES
    spec = resolve_bench(
        {
            "workers": 4,
            "nodes": nodes,
            "min_bytes": low,
            "max_bytes": high,
            "factor": 4,
            "repeats": repeats,
            "warmup": 2,
            "network": {"profile": network} if network else {},
        }
    )
    outcome = run_comm_bench(spec, store)
    if outcome.status != "success":
        sys.exit(f"all-reduce benchmark failed: {outcome.error}")
    return outcome.rows


@dataclass(frozen=True)
class Trained:
    """What a training run gives this benchmark."""

    step_time_s: float
    gradient_bytes: int
    compute_s: float  # the compute phases a step, mean over the ranks
    comm_share: float  # of the step, mean over the ranks


def train(
    store: ResultsStore,
    task: str,
    nodes: int,
    network: str | None,
    steps: int,
    data_dir: Path | None,
) -> Trained:
    spec = resolve_spec(
        task,
        overrides=[f"max_steps={steps}", "stop_at_target=false", "eval_every_epochs=1000"],
        nodes=nodes,
        nproc_per_node=4 // nodes,
        network={"profile": network} if network else None,
        data_dir=str(data_dir) if data_dir else None,
    )
    outcome = run_benchmark(spec, store, echo=False)
    if outcome.status == "failed":
        sys.exit(f"{task} {nodes}×{4 // nodes} failed: {outcome.error}")
    summary = outcome.summary
    step, grads, shares = summary.step_time_s, summary.gradient_bytes, summary.phase_shares
    timed = summary.phases_steady and summary.steady_steps
    if not timed or not shares or step is None or grads is None:
        sys.exit(f"{task} {nodes}×{4 // nodes} timed no steady steps: give it more steps")
    return Trained(step, grads, compute_step_s(summary), shares["comm"]["mean"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cifar-dir", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60, help="digits-mlp steps per run")
    parser.add_argument("--cifar-steps", type=int, default=25)
    parser.add_argument(
        "--recalibrate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a 1×4 run of the task right before each layout's run, for its "
        "compute (against the machine's drift)",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/multinode.json"))
    args = parser.parse_args()
    store = ResultsStore(Path(tempfile.mkdtemp(prefix="dmlbench-multinode-")))
    bench(store, 1, None, args.repeats)  # calibration: unshaped, 4 workers, 4 B to 4 MiB
    calibration = calibrate_comm(store.comm_runs())[4]
    print(
        f"calibration: alpha {calibration.alpha_s * 1e6:.0f} us, host busbw "
        f"{calibration.host_busbw / 1e6:,.0f} MB/s (4 workers, unshaped)"
    )
    tasks = {"digits-mlp": (args.steps, None)}
    if args.cifar_dir:
        tasks["cifar10-resnet20"] = (args.cifar_steps, args.cifar_dir)
    base = {task: train(store, task, 1, None, steps, data) for task, (steps, data) in tasks.items()}
    one_host = {
        task: cluster_allreduce_time(
            "ring", 4, summary.gradient_bytes, Link(float("inf")), Layout(1), calibration
        )
        for task, summary in base.items()
    }
    compute = {task: summary.step_time_s - one_host[task] for task, summary in base.items()}
    for task, summary in base.items():
        print(
            f"{task}: {summary.gradient_bytes / 1e6:.3f} MB of gradients, step "
            f"{summary.step_time_s * 1e3:.1f} ms at 1×4 of which compute phases "
            f"{summary.compute_s * 1e3:.1f} ms; network-independent part "
            f"{compute[task] * 1e3:.1f} ms"
        )
    model_rows: list[dict[str, Any]] = []
    training: list[dict[str, Any]] = []
    one_node = {r.bytes: r.latency_s for r in store.comm_runs()[0].results}
    for size in SIZES:
        predicted = cluster_allreduce_time(
            "ring", 4, size, Link(float("inf")), Layout(1), calibration
        )
        model_rows.append(
            {
                "network": "-",
                "layout": "1×4",
                "what": f"all-reduce {size // 2**20} MiB",
                "predicted_s": predicted,
                "measured_s": one_node[size],
            }
        )
    for task, summary in base.items():
        training.append(
            {
                "task": task,
                "network": "-",
                "layout": "1×4",
                "step_s": summary.step_time_s,
                "comm_share": summary.comm_share,
            }
        )
    for network in NETWORKS:
        resolved = NetworkSpec(profile=network).resolve()
        link = Link((resolved.rate_bps or float("inf")) / 8, resolved.delay_s)
        for nodes, per_node in LAYOUTS[1:]:
            layout = Layout(nodes)
            rows = bench(store, nodes, network, args.repeats)
            for row in rows:
                if row["scope"] not in ("all", "hierarchical") or row["bytes"] not in SIZES:
                    continue
                algorithm: Algorithm = "ring" if row["scope"] == "all" else "hierarchical"
                predicted = cluster_allreduce_time(
                    algorithm, 4, row["bytes"], link, layout, calibration
                )
                form = "flat" if algorithm == "ring" else "hierarchical"
                model_rows.append(
                    {
                        "network": network,
                        "layout": f"{nodes}×{per_node}",
                        "what": f"all-reduce {row['bytes'] // 2**20} MiB {form}",
                        "predicted_s": predicted,
                        "measured_s": row["latency_s"],
                    }
                )
            for task, (steps, data) in tasks.items():
                if args.recalibrate:  # this machine drifts by ±20% in minutes: a 1×4 run
                    fresh = train(store, task, 1, None, steps, data)  # right before
                    compute[task] = fresh.step_time_s - one_host[task]
                summary = train(store, task, nodes, network, steps, data)
                comm = cluster_allreduce_time(
                    "ring", 4, summary.gradient_bytes, link, layout, calibration
                )
                training.append(
                    {
                        "task": task,
                        "network": network,
                        "layout": f"{nodes}×{per_node}",
                        "step_s": summary.step_time_s,
                        "comm_share": summary.comm_share,
                    }
                )
                model_rows.append(
                    {
                        "network": network,
                        "layout": f"{nodes}×{per_node}",
                        "what": f"{task} step",
                        "predicted_s": compute[task] + comm,
                        "measured_s": summary.step_time_s,
                    }
                )
    print("\n| task | inter-node | layout | step ms | comm share |")
    print("|---|---|---|---|---|")
    for row in training:
        print(
            f"| {row['task']} | {row['network']} | {row['layout']} | {row['step_s'] * 1e3:,.1f} "
            f"| {row['comm_share']:.0%} |"
        )
    print("\n| inter-node | layout | what | predicted ms | measured ms | error |")
    print("|---|---|---|---|---|---|")
    errors = []
    for row in model_rows:
        row["error"] = (row["predicted_s"] - row["measured_s"]) / row["measured_s"]
        errors.append(abs(row["error"]))
        print(
            f"| {row['network']} | {row['layout']} | {row['what']} | "
            f"{row['predicted_s'] * 1e3:,.2f} | {row['measured_s'] * 1e3:,.2f} | "
            f"{row['error']:+.1%} |"
        )
    median = statistics.median(errors)
    print(f"\nmedian absolute error: {median:.1%} over {len(errors)} comparisons (target <= 15%)")
    write_summary(
        args.out,
        {
            "calibration": calibration.__dict__,
            "compute_s": compute,
            "training": training,
            "gradient_bytes": {task: summary.gradient_bytes for task, summary in base.items()},
            "model": model_rows,
            "median_abs_error": median,
        },
    )
    return 0


if __name__ == "__main__":
    run_main(main)
