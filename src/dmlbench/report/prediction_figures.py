"""The figures of communication and of predictions: the measured all-reduce's bus
bandwidth, the predicted speedup of `simulate`, and `simulate-cluster`'s scaling beside
the published points. Drawn as the report's other figures are
(:mod:`dmlbench.report.figures`)."""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from dmlbench.report.drawing import (
    VARIANT_COLOURS,
    fit_labels,
    legend_below,
    log2_workers_axis,
    new_figure,
)
from dmlbench.report.formats import SCOPES, layout, plural

SCOPE_LINES = {"all": "-", "node": ":", "hierarchical": "--"}


def comm_bandwidth(frame: pd.DataFrame, title: str) -> Figure:
    """All-reduce latency and bus bandwidth against message size: a colour per run, and
    on an emulated cluster a line style per scope (over every rank, within a node, two
    levels), which are different operations and are not joined."""
    fig, (lat, bus) = new_figure(
        title, "All-reduce: latency and bus bandwidth vs message size", ncols=2
    )
    labels: dict[str, str] = {}
    for run_id, rows in frame.groupby("run_id", sort=False):
        first = rows.iloc[0]
        nodes = int(first.get("nodes") or 1)
        workers = int(first["workers"])
        network = first["network"]  # "none": the host's own, no emulated network
        labels[str(run_id)] = (
            f"{first['backend']} · {plural(workers, 'worker')}{layout(nodes, workers // nodes)}"
            + (f" · {network}" if network and network != "none" else " · unshaped")
        )
    repeated = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    scopes = frame["scope"].fillna("") if "scope" in frame else pd.Series("", frame.index)
    for i, (run_id, rows) in enumerate(frame.groupby("run_id", sort=False)):
        label = labels[str(run_id)]
        if label in repeated:  # two runs of one setting: tell them apart by run
            label += f" · run …{str(run_id)[-6:]}"
        colour = VARIANT_COLOURS[i % len(VARIANT_COLOURS)]
        for scope, part in rows.groupby(scopes[rows.index], sort=False):
            line = SCOPE_LINES.get(str(scope), "-")
            named = f"{label} · {SCOPES[str(scope)]}" if scope in SCOPES else label
            part = part.sort_values("bytes")
            lat.errorbar(
                part["bytes"],
                part["latency_s"] * 1e6,
                yerr=[
                    (part["latency_s"] - part["latency_min_s"]) * 1e6,
                    (part["latency_max_s"] - part["latency_s"]) * 1e6,
                ],
                fmt="o" + line,
                ms=3,
                capsize=2,
                color=colour,
                label=named,
            )
            bus.plot(part["bytes"], part["busbw"] / 1e6, "o" + line, ms=3, color=colour)
    for ax in (lat, bus):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size, bytes")
    lat.set_yscale("log")
    lat.set_ylabel("latency µs (median; bars: min–max)")
    bus.set_ylabel("bus bandwidth MB/s (median)")
    legend_below(fig, lat)
    return fig


def predicted_speedup(rows: list[dict], title: str) -> Figure:
    """The performance model's speedup in time to accuracy vs workers, per network."""
    fig, (ax,) = new_figure(title, "Predicted speedup vs workers")
    frame = pd.DataFrame(rows)
    workers = sorted(int(w) for w in frame["workers"].unique())
    n0 = min(workers)
    ax.plot(workers, [w / n0 for w in workers], "k--", lw=1, label="ideal (linear)")
    styles = {"ring": "o-", "halving-doubling": "D--", "tree": "s:", "ps": "^-."}
    for i, ((network, algo), group) in enumerate(
        frame.groupby(["network", "algorithm"], sort=False)
    ):
        colour = VARIANT_COLOURS[i % len(VARIANT_COLOURS)]
        group = group.sort_values("workers")
        ax.plot(
            group["workers"],
            group["speedup"],
            styles.get(str(algo), "o-"),
            color=colour,
            label=f"{network} · {algo}",
        )
    log2_workers_axis(ax, workers)
    ax.set_yscale("log", base=2)
    ax.set_ylabel(f"speedup in time to accuracy over {plural(n0, 'worker')} (×)")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    legend_below(fig, ax)
    return fit_labels(fig)  # simulate --png saves it as it is


def cluster_scaling(
    task: str, info: dict[str, Any], rows: list[dict[str, Any]], published: list[dict[str, Any]]
) -> Figure:
    """`dmlbench simulate-cluster --cluster`: predicted speedup and efficiency against devices,
    with a replay's published points where one matches the task and cluster."""
    fig, (speed, share) = new_figure(
        f"{task} on {info['name']}", "Predicted weak scaling (DDP overlap)", ncols=2
    )
    frame = pd.DataFrame(rows)
    workers = [int(w) for w in frame["workers"]]
    base = workers[0]
    speed.plot(workers, [w / base for w in workers], "k--", lw=1, label="ideal (linear)")
    speed.plot(workers, frame["speedup"], "o-", color=VARIANT_COLOURS[0], label="dmlbench")
    share.plot(workers, frame["efficiency"] * 100, "o-", color=VARIANT_COLOURS[0], label="dmlbench")
    for point in published:
        published_speedup = point["speedup"] * info["devices_per_node"] / base
        label = f"published ({point['source'].split(',')[0]})"
        speed.plot(point["workers"], published_speedup, "s", color=VARIANT_COLOURS[1], label=label)
        efficiency = 100 * published_speedup * base / point["workers"]
        share.plot(point["workers"], efficiency, "s", color=VARIANT_COLOURS[1], label=label)
    shown = sorted({*workers, *(int(p["workers"]) for p in published)})
    for ax in (speed, share):
        log2_workers_axis(ax, shown, thin=True)
        ax.set_xlabel("devices")
        ax.tick_params(axis="x", labelrotation=45)  # 256 and 352 sit close on a log axis
    speed.set_yscale("log", base=2)  # as the devices: "ideal" is a straight line
    speed.yaxis.set_major_formatter(ScalarFormatter())
    speed.set_ylabel(f"speedup over {base} devices (×)")
    share.set_ylabel("scaling efficiency (%)")
    share.set_ylim(0, 105)
    legend_below(fig, speed)
    return fit_labels(fig)  # simulate-cluster --png saves it as it is
