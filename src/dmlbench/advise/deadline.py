"""`advise-cluster TASK --cluster PROFILE --deadline S | --budget X`: the node count and local
batch (so the global batch) to train at, from the cluster model's time to train
(:mod:`dmlbench.perfmodel.cluster`) and a device's price."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dmlbench.errors import SpecError
from dmlbench.perfmodel.cluster import ClusterSimulation


def plan_cluster(
    results: Sequence[ClusterSimulation],
    price_per_device_hour: float,
    deadline_s: float | None = None,
    budget: float | None = None,
    train_examples: int | None = None,
) -> dict[str, Any]:
    """`advise-cluster`: each node count's time to train and cost (devices × hours ×
    price) at each local batch (a :func:`simulate_cluster` result each, with time to
    train added), judged at the band's slow end (a plan that meets the deadline only
    when training converges early is no plan), and the choice among them all: with a
    deadline the cheapest row that meets it, with a budget the fastest that fits it,
    with both the cheapest that meets both. A node count whose global batch is larger
    than the task's ``train_examples`` is left out (``past_data``): no step can take
    more examples than an epoch has, and `dmlbench run` refuses it."""
    rows, past = [], []
    for result in results:
        for row in result.rows:
            if train_examples and row["global_batch"] > train_examples:
                past.append(
                    {
                        "nodes": row["nodes"],
                        "local_batch": result.local_batch,
                        "global_batch": row["global_batch"],
                    }
                )
            else:
                rows.append(_row(result, row, price_per_device_hour, deadline_s, budget))
    fitting = [r for r in rows if r["meets_deadline"] and r["fits_budget"]]
    choice = None
    if fitting:
        key = (
            (lambda r: (r["slow_cost"], r["slow_s"]))
            if deadline_s is not None
            else (lambda r: (r["slow_s"], r["slow_cost"]))
        )
        choice = min(fitting, key=key)
    plan = {"rows": rows, "choice": choice, "deadline_s": deadline_s, "budget": budget}
    if past:
        plan["past_data"] = {"train_examples": train_examples, "left_out": past}
    return plan


def _row(
    result: ClusterSimulation,
    row: dict[str, Any],
    price_per_device_hour: float,
    deadline_s: float | None,
    budget: float | None,
) -> dict[str, Any]:
    if row.get("time_to_train_s") is None:
        raise SpecError(
            (result.convergence or {}).get("note")
            or "no time to train: the fit of samples to the target failed"
        )
    slow = row["time_to_train_band_s"][1]
    hourly = row["workers"] * price_per_device_hour / 3600
    return {
        "nodes": row["nodes"],
        "devices": row["workers"],
        "local_batch": result.local_batch,
        "global_batch": row["global_batch"],
        "time_to_train_s": row["time_to_train_s"],
        "slow_s": slow,
        "cost": row["time_to_train_s"] * hourly,
        "slow_cost": slow * hourly,
        "extrapolated": row["extrapolated"],
        "meets_deadline": deadline_s is None or slow <= deadline_s,
        "fits_budget": budget is None or slow * hourly <= budget,
    }
