"""What `dmlbench simulate` computes: the model's predictions for one task over networks ×
algorithms × worker counts (or node layouts), calibrated from a results store.

    sim = simulate(ResultsStore(path), "cifar10-resnet20", [1, 8, 64], ["10gbit"], ["ring"])
    sim.rows        # one dict per (network, algorithm, workers): step, comm, TTA, cost
    sim.to_json()   # what the store keeps under predictions/ for the report
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dmlbench.errors import DmlbenchError, SpecError
from dmlbench.perfmodel.calibrate import TaskCalibration, calibrate_comm, calibrate_task, comm_for
from dmlbench.perfmodel.model import (
    TWO_LEVEL,
    CommCalibration,
    Layout,
    Link,
    algorithms_named,
    predict,
)

if TYPE_CHECKING:
    from dmlbench.prices import Price
    from dmlbench.results.store import ResultsStore


@dataclass
class Simulation:
    task: str
    calibration: TaskCalibration
    comm: dict[int, CommCalibration]  # by worker count measured
    rows: list[dict[str, Any]]
    price: str  # the price's label
    unpriced: str | None = None  # why there is no cost: the price is for another device
    currency: str = "USD"  # the cost's

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "calibration": {
                **dataclasses.asdict(self.calibration),
                "comm": {n: dataclasses.asdict(c) for n, c in self.comm.items()},
            },
            "predictions": self.rows,
            "price": self.price,
            "unpriced": self.unpriced,
            "currency": self.currency,
        }


def resolve_links(names: Sequence[str]) -> tuple[dict[str, Link], dict[str, Link]]:
    """Each network name's link between nodes, and within a node where the profile says.

    A name is a profile, a bare rate (``54gbit``), or ``none`` (the measured host network).
    """
    from dmlbench.netem.profiles import NetworkSpec, load_profiles, parse_rate

    known = load_profiles()
    links, intra = {}, {}
    for name in names:
        if name == "none":
            links[name] = Link(math.inf, 0.0)
        elif name not in known and name[:1].isdigit():
            links[name] = Link(parse_rate(name) / 8, 0.0)
        else:
            resolved = NetworkSpec(profile=name).resolve()
            links[name] = Link((resolved.rate_bps or math.inf) / 8, resolved.delay_s)
            intra[name] = Link((resolved.intra_rate_bps or math.inf) / 8, resolved.intra_delay_s)
    return links, intra


def refuse_batches_past_the_data(
    task: str, batches: Mapping[int, int], examples: int | None, option: str, unit: str
) -> None:
    """Refuse the counts (of workers or nodes) whose global batch (``batches``: count →
    global batch) is larger than the task's ``examples`` (None or 0: unknown): a step
    cannot take more examples than an epoch has, and `dmlbench run` refuses such a
    batch. Predicted anyway, an epoch took less time than one step."""
    if not examples:
        return
    for count, batch in batches.items():
        if batch > examples:
            raise SpecError(
                f"{option} {count}: a global batch of {batch:,} is larger than the "
                f"{examples:,} training examples of {task}; the most {unit} at this local "
                f"batch is {examples // (batch // count):,}"
            )


def simulate(
    store: ResultsStore,
    task: str,
    counts: Sequence[int],
    networks: Sequence[str],
    algorithms: Sequence[str],
    *,
    price: Price,
    layouts: Sequence[tuple[int, int]] = (),
    epochs: float | None = None,
    host_bandwidth: str | None = None,
    calibrate_from: Sequence[str] = (),
) -> Simulation:
    """Predict every combination; with ``layouts`` ((nodes, per node) pairs) the worker
    counts are theirs and the two-level model is used. The speedup of a row is against
    the first count of its network and algorithm."""
    chosen = algorithms_named(algorithms)
    if layouts:
        counts = [nodes * per_node for nodes, per_node in layouts]
        if set(algorithms) - set(TWO_LEVEL):
            raise DmlbenchError("--nodes: the two-level model has ring and hierarchical")
    links, intra = resolve_links(networks)
    comm = calibrate_comm(store.comm_runs())
    if host_bandwidth is not None:
        from dmlbench.netem.profiles import parse_rate

        faster = parse_rate(host_bandwidth) / 8
        comm = {n: dataclasses.replace(c, host_busbw=faster) for n, c in comm.items()}
    calibration = calibrate_task(store.runs(task=task), task, calibrate_from=calibrate_from)
    from dmlbench.tasks import get_task

    examples = get_task(task).train_examples or calibration.train_examples  # the whole set's
    batches = {count: count * calibration.local_batch for count in counts}
    option = "--nodes × --nproc-per-node" if layouts else "--workers"
    refuse_batches_past_the_data(task, batches, examples, option, "workers")
    priced = price.covers(calibration.device)  # a CPU machine's price is no GPU's
    rows = []
    for name, link in links.items():
        for algorithm in chosen:
            base_tta = None
            for index, count in enumerate(counts):
                layout = (
                    Layout(layouts[index][0], intra.get(name, Link(math.inf))) if layouts else None
                )
                if epochs is not None and not calibration.epochs_by_batch:
                    assumed, measured = epochs, False
                else:
                    assumed, measured = calibration.epochs_to_target(
                        calibration.local_batch * count
                    )
                guess = predict(
                    workers=count,
                    algorithm=algorithm,
                    local_batch=calibration.local_batch,
                    compute_per_example_s=0.0,
                    compute_fixed_s=calibration.compute_step_s,
                    gradient_bytes=calibration.gradient_bytes,
                    train_examples=calibration.train_examples,
                    epochs_to_target=assumed,
                    # evaluation is sharded over the workers, as dmlbench's trainer does
                    eval_s_per_epoch=calibration.eval_s_per_epoch * calibration.workers / count,
                    link=link,
                    calibration=comm_for(comm, max(2, count)),
                    price_per_worker_hour=price.per_worker_hour if priced else None,
                    layout=layout,
                )
                base_tta = base_tta or guess.tta_s
                rows.append(
                    {
                        "network": name,
                        "algorithm": algorithm,
                        "workers": count,
                        "nodes": layout.nodes if layout else None,
                        "global_batch": guess.global_batch,
                        "step_s": guess.step_s,
                        "compute_s": guess.compute_s,
                        "comm_s": guess.comm_s,
                        "comm_ratio": guess.comm_ratio,
                        "epochs": assumed,
                        "epochs_measured": measured,
                        "tta_s": guess.tta_s,
                        "speedup": base_tta / guess.tta_s,
                        "cost": guess.cost,
                    }
                )
    unpriced = None if priced else price.unpriced(calibration.device)
    return Simulation(task, calibration, comm, rows, price.label, unpriced, price.currency)
