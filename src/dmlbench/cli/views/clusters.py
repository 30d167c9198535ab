"""What `dmlbench simulate-cluster`, `advise-cluster` and `bench curve` print: a
task on a hardware profile, the profiles, a device's curve and the plan for a deadline
or a budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from dmlbench.perfmodel.cluster import ClusterSimulation
    from dmlbench.perfmodel.curve import Curve

from dmlbench.cli.views import figures_table
from dmlbench.report.formats import (
    microseconds,
    milliseconds,
    percent,
    plural,
    seconds,
    share,
)


def cluster_table(result: ClusterSimulation) -> Group:
    """`dmlbench simulate-cluster TASK --cluster PROFILE`: the scaling table and its inputs."""
    info = result.cluster
    table = figures_table(
        escape(f"{result.task} on {info['name']}: weak scaling, DDP overlap"),
        escape(
            f"step, comm, exposed: ms · {info['accelerator']} × {info['devices_per_node']} a "
            "node · inside: "
            f"{info['intra']} · between: {info['inter']}"
        ),
    )
    columns = ("nodes", "dev", "step", "comm", "exposed", "samples/s", "epoch")
    for column in (*columns, "speedup", "eff."):
        wide = {"epoch": 7, "eff.": 6}.get(column)  # "921.4 s", "100.0%"
        table.add_column(column, justify="right", no_wrap=True, min_width=wide)
    for row in result.rows:
        table.add_row(
            str(row["nodes"]),
            str(row["workers"]),
            f"{1e3 * row['step_s']:.1f}",
            f"{1e3 * row['allreduce_s']:.1f}",
            f"{1e3 * row['exposed_comm_s']:.1f}",
            f"{row['samples_per_s']:,.0f}",
            seconds(row["epoch_s"], unit=True) if row["epoch_s"] else "—",
            f"{row['speedup']:.1f}×",
            percent(row["efficiency"]),
        )
    trained = "time_to_train_s" in result.rows[0]
    tables = [table, _time_to_train_table(result)] if trained else [table]
    lines = [
        f"compute: {1e3 * result.rows[0]['compute_s']:.1f} ms a step = "
        f"{result.flops_per_step / 1e9:,.1f} GFLOP (local batch {result.local_batch}) "
        f"÷ ({result.peak_flops / 1e12:g} TFLOP/s {result.dtype} "
        f"peak × {share(result.efficiency)} efficiency, {result.efficiency_source})",
        f"comm: all-reduce ({result.algorithm}) of "
        f"{result.gradient_bytes / 1e6:,.1f} MB of gradients in DDP's buckets (1 MiB, "
        "then 25 MiB); exposed: the ms of it past the end of backward",
        f"hardware: {info['source']}",
    ]
    if not result.rows[0]["epoch_s"]:
        lines.append(
            f"epoch: — because {result.task} declares no training-set size before its "
            "data is read (a language model's samples depend on its tokenizer)"
        )
    convergence = result.convergence or {}
    if trained:
        lines.append(
            f"to train: samples to the target at B (McCandlish's E = E_min(1 + B/B_noise), "
            f"{fitted_on(convergence)}: B_noise {convergence['b_noise']:,.0f}"
            + (
                f", the measured noise scale {convergence['noise_scale_prior']:,.0f} its prior"
                if convergence.get("noise_scale_prior")
                else ""
            )
            + ") ÷ samples/s, + evaluation "
            f"({convergence['eval_share']:.0%} of training, as in those runs)"
            + (
                "; † B outside the fitted batches: extrapolated"
                if any(r["extrapolated"] for r in result.rows)
                else ""
            )
        )
    elif convergence.get("note"):
        lines.append(convergence["note"])
    for point in result.published:
        lines.append(
            f"published: {plural(point['workers'], 'device')}, speedup {point['speedup']:.1f}× "
            f"({point['source']})"
        )
    return Group(*tables, *(Text(line) for line in lines))


def fitted_on(convergence: dict[str, Any]) -> str:
    """Which runs samples to the target were fitted on, and which were left out."""
    batches = ", ".join(f"{b:,.0f}" for b in convergence["batches"])
    text = f"fitted on {convergence['runs']} runs of {convergence['source']} at B = {batches}"
    left = convergence.get("open_left_out")
    if left:
        text += f", closed division only ({plural(left, 'open-division run')}: recipes changed)"
    others = convergence.get("other_counts_left_out") or {}
    if others:
        counted = ", ".join(f"{plural(n, 'run')} counting {size:,}" for size, n in others.items())
        epoch = convergence.get("epoch")
        counting = f"counting {epoch:,} samples an epoch" if epoch else "that count none"
        text += (
            f", those {counting} ({counted} left out: "
            "another dataset, or samples and batches in other units)"
        )
    if convergence.get("borrowed"):
        text += f" ({convergence['borrowed']})"
    return text


def _time_to_train_table(result: ClusterSimulation) -> Table:
    """Time to train on each row of a cluster simulation, beside the scaling table (one
    table of both would not fit a terminal of 80 columns)."""
    table = figures_table("time to train to the target")
    for column in ("nodes", "dev", "B", "samples", "to train", "95% band"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in result.rows:
        low, high = row["time_to_train_band_s"]
        table.add_row(
            str(row["nodes"]),
            str(row["workers"]),
            f"{row['global_batch']:,}",
            f"{row['samples_to_target']:,.0f}",
            seconds(row["time_to_train_s"], unit=True) + ("†" if row["extrapolated"] else ""),
            f"{seconds(low, unit=True)}–{seconds(high, unit=True)}",
        )
    return table


def hardware_table(hardware: Any) -> Group:
    """`dmlbench simulate-cluster --cluster list`: each profile's name, what --cluster
    takes, on a line of its own, its hardware and source indented below, as `dmlbench
    models` lists models (a five-column table cut "goyal2017-bigb…" at 80 columns)."""
    parts: list[Any] = [
        Text("Cluster profiles: --cluster NAME (your own: --hardware FILE)", style="bold")
    ]
    for key, profile in hardware.clusters.items():
        cluster = hardware.cluster(key)
        parts += [
            Text(),
            Text(f"  {key}", style="bold"),
            Padding(
                Text(f"{cluster.devices_per_node} × {cluster.accelerator.name} a node"),
                (0, 0, 0, 6),
            ),
        ]
        for name, value in (
            ("inside", cluster.intra.name),
            ("between", f"{cluster.inter.name} × {profile.nics_per_node}"),
            ("all-reduce", cluster.allreduce()),
            ("source", profile.source),
        ):
            parts.append(Padding(Text(f"{name}: {value}", style="dim"), (0, 0, 0, 8)))
    return Group(*parts)


def curve_table(curve: Curve, elsewhere: int = 0) -> Group:
    """`dmlbench bench curve`: step time and samples/s at each local batch, where they
    were measured, and the straight line through them (what the MLPerf replay reads)."""
    from dmlbench.perfmodel.curve import step_line

    table = figures_table(escape(f"{curve.task}: a step by local batch"))
    for column in ("local batch", "step (ms)", "samples/s", "a sample (µs)"):
        table.add_column(column, justify="right")
    for batch, step in curve.points:
        table.add_row(
            f"{batch:g}", milliseconds(step), f"{batch / step:,.1f}", microseconds(step / batch)
        )
    lines = [Text(f"measured{curve.measured_on()}: {plural(len(curve.runs), 'run')}")]
    if len(curve.points) > 1:
        fixed, slope = step_line(curve)
        per_sample = (  # a falling line is noise: more work does not take less time
            f"+ {microseconds(slope)} µs a sample"
            if slope >= 0
            else f"falling {microseconds(-slope)} µs a sample, which is noise: time more --steps"
        )
        lines.append(Text(f"least-squares line: {milliseconds(fixed)} ms fixed {per_sample}"))
    if elsewhere:
        lines.append(
            Text(f"left out: {plural(elsewhere, 'run')} on another device or compiled otherwise")
        )
    return Group(table, *lines)


def plan_table(plan: dict[str, Any]) -> Group:
    """`advise-cluster TASK --cluster PROFILE --deadline/--budget`: each node count and local
    batch, the choice."""
    info, currency = plan["cluster"], plan["price"]["currency"]
    wanted = []
    if plan["deadline_s"] is not None:
        wanted.append(f"within {seconds(plan['deadline_s'], unit=True)}")
    if plan["budget"] is not None:
        wanted.append(f"for at most {plan['budget']:,.2f} {currency}")
    table = figures_table(
        escape(f"{plan['task']} on {info['name']}: training to the target " + " and ".join(wanted))
    )
    costs = f"cost, {currency}"
    for column in ("nodes", "devices", "b", "B", "to train", "slow end", costs, "slow end ", ""):
        table.add_column(column, justify="right", no_wrap=True)
    choice = plan["choice"]
    for row in plan["rows"]:
        ok = row["meets_deadline"] and row["fits_budget"]
        mark = "←" if row is choice or row == choice else ("" if ok else "✗")
        table.add_row(
            str(row["nodes"]),
            str(row["devices"]),
            str(row["local_batch"]),
            f"{row['global_batch']:,}",
            seconds(row["time_to_train_s"], unit=True) + ("†" if row["extrapolated"] else ""),
            seconds(row["slow_s"], unit=True),
            f"{row['cost']:,.2f}",
            f"{row['slow_cost']:,.2f}",
            mark,
        )
    convergence, price = plan["convergence"], plan["price"]
    lines = [
        "slow end: the 95% band's slow end of samples to the target; a plan is judged "
        "there (←: the choice; ✗: misses what was asked); b: a device's batch, B: the "
        "global batch",
        f"cost at {price['per_device_hour']:g} {price['currency']} a device-hour ({price['name']})",
        *(
            f"compute at local batch {b} a device: {source}"
            for b, source in plan["compute"].items()
        ),
        f"communication: all-reduce ({plan['algorithm']})",
        f"samples to the target: {fitted_on(convergence)}"
        + ("; † extrapolated past them" if any(r["extrapolated"] for r in plan["rows"]) else ""),
    ]
    if "past_data" in plan:  # B past the training set: no such run can be made
        past = plan["past_data"]
        counts = ", ".join(
            f"{plural(p['nodes'], 'node')} at b = {p['local_batch']} (B = {p['global_batch']:,})"
            for p in past["left_out"]
        )
        lines.append(
            f"left out: {counts}: a global batch larger than the task's "
            f"{past['train_examples']:,} training examples"
        )
    if choice is None:
        lines.insert(0, "no node count meets what was asked: raise the deadline or the budget")
    else:
        lines.insert(
            0,
            f"choice: {plural(choice['nodes'], 'node')} "
            f"({plural(choice['devices'], 'device')}, b = "
            f"{choice['local_batch']}, B = {choice['global_batch']:,}): "
            f"{seconds(choice['time_to_train_s'], unit=True)} to train (at most "
            f"{seconds(choice['slow_s'], unit=True)}), "
            f"{choice['cost']:,.2f} {currency} (at most {choice['slow_cost']:,.2f})",
        )
    return Group(table, *(Text(line) for line in lines))
