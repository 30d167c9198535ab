"""The report's figures (matplotlib), one function per figure, drawn from analysis frames.

Each takes a section's scaling table (``analysis.scaling_table``), runs or evals and a
title line, and returns a Figure that the HTML report inlines as SVG and ``--png``
writes as PNG. Worker counts are numbers: sorted numerically, on a log2 axis for line
plots and in numeric order for bars. An oversubscribed worker count is marked ``*``.
Legends sit below the plot area, never over data; each variant has its own colour and
a short label (``variants.short_labels``: a letter, spelt out in the report's legend
table, when the labels are long); every axis says its unit.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D  # no pyplot: no global state, no GUI backend
from matplotlib.ticker import (
    FuncFormatter,
    LogLocator,
    NullLocator,
    PercentFormatter,
    ScalarFormatter,
)

from dmlbench.report.drawing import (
    LINE_STYLES,
    MARKERS,
    PHASE_COLOURS,
    VARIANT_COLOURS,
    bar_label,
    bar_positions,
    coloured_variants,
    finish,
    fits_across,
    keep_inside,
    legend_below,
    log2_workers_axis,
    new_figure,
    note,
    oversubscription_caption,
    palette,
    slot_points,
    tick_labels,
    variants,
    worker_counts,
    worker_label,
)
from dmlbench.report.formats import human_bytes, plural
from dmlbench.report.variants import number_order, short_labels, variant_pairs
from dmlbench.results.schema import PHASES


def _line(ax, rows: pd.DataFrame, column: str, style: str, colour, label: str, error=None) -> None:
    """A variant's ``column`` against its worker counts (with error bars, if given)."""
    if error is None:
        ax.plot(rows["workers"], rows[column], style, color=colour, label=label)
    else:
        ax.errorbar(
            rows["workers"],
            rows[column],
            yerr=error,
            fmt=style,
            color=colour,
            capsize=3,
            label=label,
        )


def speedup(table: pd.DataFrame, title: str) -> Figure:
    """Speedup against the smallest worker count, in TTA and throughput, with ideal."""
    fig, (ax,) = new_figure(title, "Speedup vs workers")
    workers = worker_counts(table)
    n0 = min(workers)
    ideal = [w / n0 for w in workers]
    ax.plot(workers, ideal, "k--", lw=1, label="ideal (linear)")
    for colour, variant, rows in coloured_variants(table):
        suffix = f" · {variant}" if variant else ""
        _line(ax, rows, "speedup_throughput", "o-", colour, f"throughput{suffix}")
        if rows["speedup_tta"].notna().any():
            base = rows.iloc[0]
            rel = np.sqrt(
                (base["tta_std"] / base["tta_mean"]) ** 2
                + (rows["tta_std"] / rows["tta_mean"]) ** 2
            )
            error = (rows["speedup_tta"] * rel).fillna(0).to_numpy(copy=True)
            error[0] = 0.0  # the baseline against itself is exactly 1
            _line(ax, rows, "speedup_tta", "s:", colour, f"time to accuracy{suffix}", error)
    log2_workers_axis(ax, workers)
    ax.set_ylabel(f"speedup over {plural(n0, 'worker')} (×)")
    _say_why_empty(ax, table, ("speedup_throughput", "speedup_tta"), "speedup")
    return finish(fig, ax, table)


def _say_why_empty(ax, table: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    """A panel with no point of ``columns`` says why instead of standing empty."""
    if any(table[column].notna().any() for column in columns):
        return
    why = (
        "every count was timed by disturbed runs only:\nsee the note above "
        "(--include-disturbed counts them)"
        if table["timed_disturbed"].any()
        else "no finished run to compare against"
    )
    note(ax, f"no {what} to draw: {why}")


def throughput(table: pd.DataFrame, title: str) -> Figure:
    """DLBS's view: images (samples) per second in total and per worker against the
    worker count, one line per variant (e.g. the replica batch)."""
    fig, (total, each) = new_figure(title, "Throughput (samples/s)", ncols=2)
    workers = worker_counts(table)
    for colour, variant, rows in coloured_variants(table):
        batch = (
            f"b = {int(rows['local_batch'].iloc[0])}" if rows["local_batch"].nunique() == 1 else ""
        )
        label = variant or batch or f"B = {int(rows['global_batch'].iloc[0])}"
        per_worker = rows.assign(per_worker=rows["throughput_mean"] / rows["workers"])
        _line(total, rows, "throughput_mean", "o-", colour, label)
        _line(each, per_worker, "per_worker", "o-", colour, label)
    for ax, what in ((total, "samples/s, all workers"), (each, "samples/s per worker")):
        log2_workers_axis(ax, workers)
        ax.set_xticklabels(tick_labels(table, workers))
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
    return finish(fig, total, table)


def efficiency(table: pd.DataFrame, title: str) -> Figure:
    modes = ", ".join(sorted(set(table["scaling"])))
    formula = {"strong": "n0·t0 / (N·tN)", "weak": "t0 / tN"}.get(modes, "t0 / tN")
    fig, (ax,) = new_figure(title, f"Scaling efficiency ({modes} scaling: {formula})")
    workers = worker_counts(table)
    ax.axhline(1.0, color="k", ls="--", lw=1, label="ideal")
    for colour, variant, rows in coloured_variants(table):
        suffix = f" · {variant}" if variant else ""
        _line(ax, rows, "efficiency_step", "o-", colour, f"time per step{suffix}")
        if rows["efficiency_tta"].notna().any():
            _line(ax, rows, "efficiency_tta", "s:", colour, f"time to accuracy{suffix}")
    log2_workers_axis(ax, workers)
    ax.set_ylabel("efficiency (1 = ideal)")
    _say_why_empty(ax, table, ("efficiency_step", "efficiency_tta"), "efficiency")
    ax.set_ylim(bottom=0)
    return finish(fig, ax, table)


def time_to_accuracy(table: pd.DataFrame, title: str) -> Figure:
    """Mean TTA ± std per worker count; how many runs converged is written on each bar.

    When no run reached the target there is no time to show: the figure shows accuracy
    after time (or the best accuracy) instead, and its heading says so.
    """
    if not table["tta_mean"].notna().any():
        return _accuracy_bars(table, title)
    fig, (ax,) = new_figure(title, "Time to accuracy (evaluation included)")
    workers, offsets, width = bar_positions(table)
    position = {w: i for i, w in enumerate(workers)}
    top = (
        float(np.nanmax(table["tta_mean"] + table["tta_std"].fillna(0)))
        if table["tta_mean"].notna().any()
        else 1.0
    )
    labels = []
    for colour, variant, rows in coloured_variants(table):
        x = [position[int(w)] + offsets[variant] for w in rows["workers"]]
        heights = rows["tta_mean"].fillna(0)
        bars = ax.bar(
            x,
            heights,
            width,
            yerr=rows["tta_std"].fillna(0),
            capsize=4,
            color=colour,
            label=variant or None,
        )
        for bar, (_, row) in zip(bars, rows.iterrows(), strict=True):
            if row["oversubscribed"]:
                bar.set_hatch("//")
            text = f"{int(row['converged'])}/{int(row['runs'])} reached"
            if not row["converged"]:
                text = f"not reached\n0/{int(row['runs'])}"
            above = bar.get_height() + (0 if pd.isna(row["tta_std"]) else row["tta_std"])
            labels.append(bar_label(ax, bar, text, above + 0.02 * top, len(workers)))
    ax.set_xticks(range(len(workers)))
    ax.set_xticklabels(tick_labels(table, workers))
    ax.set_xlabel("workers")
    ax.set_ylabel("seconds (mean ± std over converged runs)")
    ax.set_ylim(0, top * 1.2)
    finish(fig, ax, table, legend=any(v for v in offsets))
    keep_inside(ax, labels)  # laid out with its legend, as it is drawn
    return fig


def _accuracy_bars(table: pd.DataFrame, title: str) -> Figure:
    """No run reached the target: the best each point got, in the goal's terms (the
    lowest test loss for a loss goal), beside the target."""
    by_loss = "goal" in table and bool((table["goal"] == "loss").all())
    budget = "aat_mean" in table and table["aat_mean"].notna().any()
    if budget:
        best = "lowest test loss" if by_loss else "best accuracy"
        column, what = "aat_mean", f"{best} within the report's time budget"
        shown = "{:.3f}" if by_loss else "{:.1%}"
    elif by_loss:
        column, what, shown = "best_mean", "lowest test loss reached", "{:.3f}"
    else:
        column = "best_mean" if "best_mean" in table else "best_metric_mean"
        what, shown = "best accuracy reached", "{:.1%}"
    fig, (ax,) = new_figure(title, f"No run reached the target: {what}")
    workers, offsets, width = bar_positions(table)
    position = {w: i for i, w in enumerate(workers)}
    for colour, variant, rows in coloured_variants(table):
        x = [position[int(w)] + offsets[variant] for w in rows["workers"]]
        bars = ax.bar(x, rows[column].fillna(0), width, label=variant or None, color=colour)
        for bar, (_, row) in zip(bars, rows.iterrows(), strict=True):
            if row["oversubscribed"]:
                bar.set_hatch("//")
            text = f"{shown.format(row[column])}\n0/{int(row['runs'])} reached"
            bar_label(ax, bar, text, bar.get_height(), len(workers))
    target = table["target"].dropna() if "target" in table else pd.Series(dtype=float)
    if len(target):
        value = float(target.iloc[0])
        label = f"target loss {value:g}" if by_loss else f"target {value:.0%}"
        ax.axhline(value, color="k", ls="--", lw=1, label=label)
    ax.set_xticks(range(len(workers)))
    ax.set_xticklabels(tick_labels(table, workers))
    ax.set_xlabel("workers")
    if by_loss:
        ax.set_ylabel("test loss, lowest (mean over runs)")
        ax.set_ylim(
            0, max(float(table[column].max()), float(target.max() if len(target) else 0)) * 1.2
        )
    else:
        ax.set_ylabel("test accuracy, % (mean over runs)")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, 1.05)
    return finish(fig, ax, table)


ACCURACY_TOP = 1.008  # a 100% point's marker shows whole


def curves(
    evals: pd.DataFrame,
    table: pd.DataFrame,
    target: float | None,
    title: str,
    target_loss: float | None = None,
) -> Figure:
    """Test accuracy and loss against wall-clock time, one line per run (a point where a
    run evaluated once). Coloured by worker count; with several variants, coloured by
    variant and dashed by worker count. Training accuracy, where runs measured it, is a
    thin dotted line of the run's colour; a task's target loss a dashed line."""
    lossless = not evals["loss"].notna().any()  # MLPerf's logs say accuracy only
    heading = "Accuracy vs wall-clock time" if lossless else "Accuracy and loss vs wall-clock time"
    fig, axes = new_figure(title, heading, ncols=1 if lossless else 2)
    acc, loss = axes[0], None if lossless else axes[1]
    drawn = [(acc, "metric")] + ([] if loss is None else [(loss, "loss")])
    workers = sorted(int(w) for w in evals["workers"].unique())
    variant = evals["variant"] if "variant" in evals else pd.Series("", index=evals.index)
    names = short_labels(variant)
    cmap = colormaps["viridis"]
    by_count = {w: cmap(i / max(1, len(workers) - 1) * 0.85) for i, w in enumerate(workers)}
    over = set(table.loc[table["oversubscribed"], "workers"].astype(int))
    elastic = set(table.loc[table["elastic"], "variant"])
    ordered = evals.assign(variant=variant).sort_values(  # the legend in the labels' order
        ["variant", "workers", "run_id", "elapsed_s"],
        kind="stable",
        key=lambda column: column.map(number_order) if column.name == "variant" else column,
    )
    for _, run in ordered.groupby("run_id", sort=False):
        n, name = int(run["workers"].iloc[0]), names[str(run["variant"].iloc[0])]
        up_to = "≤" * (run["variant"].iloc[0] in elastic)  # a Dask fit: on up to n workers
        label = f"{up_to}{plural(n, 'worker')}{' *' * (n in over)}"
        if len(names) > 1:
            index = list(names.values()).index(name)
            colour = VARIANT_COLOURS[index % len(VARIANT_COLOURS)]
            style = LINE_STYLES[workers.index(n) % len(LINE_STYLES)]
            label = f"{name} · {label}"
        else:
            colour, style = by_count[n], "-"
        for ax, column in drawn:
            ax.plot(
                run["elapsed_s"],
                run[column],
                style,
                marker="o",
                ms=3,
                color=colour,
                lw=1.2,
                alpha=0.85,
                label=label,
            )
        if "train_metric" in run and run["train_metric"].notna().any():
            acc.plot(
                run["elapsed_s"],
                run["train_metric"],
                ":",
                color=colour,
                lw=1,
                alpha=0.85,
                label=f"{label} (training set)",
            )
    if target is not None:
        acc.axhline(target, color="k", ls="--", lw=1, label=f"target {target:.0%}")
    if target_loss is not None and loss is not None:
        loss.axhline(target_loss, color="k", ls="--", lw=1)
        loss.text(
            0.99,
            target_loss,
            f"target loss {target_loss:g}",
            ha="right",
            va="bottom",
            fontsize="small",
            transform=loss.get_yaxis_transform(),
        )
    for ax, _ in drawn:
        ax.set_xlabel("wall-clock seconds since run start")
    acc.set_ylabel("accuracy, %")
    acc.yaxis.set_major_formatter(PercentFormatter(1.0))
    # no accuracy is above 100%: room for a marker there, no ticks past it ("104%")
    acc.set_ylim(top=min(acc.get_ylim()[1], ACCURACY_TOP))
    if loss is not None:
        loss.set_ylabel("test loss (mean per example)")
    return finish(fig, acc, table)


def phases(table: pd.DataFrame, title: str) -> Figure:
    """Per-step time split into phases (mean over ranks and runs), stacked per worker count."""
    fig, (ax,) = new_figure(title, "Where a step's time goes (steady state, mean over ranks)")
    workers, offsets, width = bar_positions(table)
    position = {w: i for i, w in enumerate(workers)}
    drawn = False
    names = short_labels(table["variant"])
    slot = slot_points(ax, width, len(workers))

    def said(row: pd.Series) -> str:  # a bar's label while there is room for it
        comm = f"comm {row['comm_ratio_mean']:.0%}/{row['comm_ratio_max']:.0%}"
        return comm + (f"\n{names[row['variant']]}" if row["variant"] else "")

    known = table.dropna(subset=["comm_ratio_mean"])
    crowded = len(names) > 8 or not all(fits_across(said(r), slot, 7) for _, r in known.iterrows())
    marks = names  # crowded: each bar's name alone, or, where names do not fit, a letter
    if crowded and not all(fits_across(name, slot, 7) for name in names.values()):
        marks = short_labels(table["variant"], longest=0)
    for variant, rows in table.groupby("variant", sort=False):
        rows = rows.sort_values("workers")
        x = np.array([position[int(w)] + offsets[names[variant]] for w in rows["workers"]])
        bottom = np.zeros(len(rows))
        for phase in PHASES:
            values = rows[f"{phase}_s"].fillna(0).to_numpy() * 1000
            ax.bar(
                x,
                values,
                width,
                bottom=bottom,
                color=PHASE_COLOURS[phase],
                label=phase if not drawn else None,
                edgecolor="white",
                lw=0.5,
            )
            bottom += values
        drawn = True
        for xi, total, (_, row) in zip(x, bottom, rows.iterrows(), strict=True):
            if crowded:  # the comm ratios would overlap: they are in the scaling table
                ax.text(xi, total, marks[variant], ha="center", va="bottom", fontsize=7)
            elif not math.isnan(row["comm_ratio_mean"]):
                ax.text(xi, total, said(row), ha="center", va="bottom", fontsize=7)
    if marks is not names:  # the letters spelt out, below the phases' colours
        for variant, mark in marks.items():
            ax.plot([], [], linestyle="none", label=f"{mark}: {variant}")  # no swatch
    ax.set_xticks(range(len(workers)))
    ax.set_xticklabels(tick_labels(table, workers))
    ax.set_xlabel("workers" + ("" if crowded else " (labels: comm ratio mean/max over ranks)"))
    ax.set_ylabel("milliseconds per step")
    ax.margins(y=0.15)
    return finish(fig, ax, table)


def bytes_and_step_time(table: pd.DataFrame, title: str, label_at_most: int = 8) -> Figure:
    """What each variant puts on the wire per step against what a step costs, with its
    comm share: an algorithm sweep's trade-off in one plot. When the variants differ in
    the exchange and in something else (an algorithm × network sweep), the colour is the
    algorithm and the marker the rest; points are labelled while there are few."""
    frame = table.dropna(subset=["bytes_per_step_mean", "step_time_mean"])
    several = table["workers"].nunique() > 1
    labelled = len(frame) <= label_at_most
    what = "workers, comm share" if several else "comm share"
    heading = "Bytes sent per step vs step time" + (f" (labels: {what})" if labelled else "")
    fig, (ax,) = new_figure(title, heading)
    pairs = {v: variant_pairs(v) for v in frame["variant"].unique()}
    names = short_labels(frame["variant"])
    split = len({p.get("exchange") for p in pairs.values()}) > 1 and any(
        len(p) > 1 for p in pairs.values()
    )

    def colour_key(variant: str) -> str:
        return pairs[variant]["exchange"] if split else names[variant]

    def marker_key(variant: str) -> str:
        rest = [f"{k}={v}" for k, v in pairs[variant].items() if k != "exchange"]
        return " ".join(rest) if split else ""

    colour_keys = sorted({colour_key(v) for v in pairs})
    marker_keys = sorted({marker_key(v) for v in pairs})
    chosen = VARIANT_COLOURS if len(colour_keys) <= 10 else palette("tab20")
    colours = {k: chosen[i % len(chosen)] for i, k in enumerate(colour_keys)}
    markers = {k: MARKERS[i % len(MARKERS)] for i, k in enumerate(marker_keys)}
    for i, (variant, rows) in enumerate(frame.groupby("variant", sort=True)):
        colour = colours[colour_key(variant)]
        x, y = rows["bytes_per_step_mean"], rows["step_time_mean"] * 1000
        ax.plot(x, y, markers[marker_key(variant)], color=colour, linestyle="none")
        if not labelled:
            continue
        for _, row in rows.iterrows():
            share = row["comm_ratio_mean"]
            parts = [f"N={worker_label(row)}"] if several else []
            parts += [] if pd.isna(share) else [f"{share:.0%}"]
            # alternate above and below: algorithms with the same bytes sit side by side
            point = (row["bytes_per_step_mean"], row["step_time_mean"] * 1000)
            ax.annotate(
                ", ".join(parts),
                point,
                textcoords="offset points",
                xytext=(5, 5 if i % 2 == 0 else -11),
                fontsize=8,
                color=colour,
            )
    handles = [
        Line2D([], [], color=c, marker="o", linestyle="none", label=k or "run")
        for k, c in colours.items()
    ]
    handles += [
        Line2D([], [], color="#444", marker=m, linestyle="none", fillstyle="none", label=k)
        for k, m in markers.items()
        if k
    ]
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: human_bytes(value)))
    ax.set_xlabel("bytes each worker sends per step (log scale)")
    ax.set_ylabel("milliseconds per step (mean)")
    ax.margins(x=0.2, y=0.15)
    ax.set_ylim(bottom=0)  # after the margins: set first, it fixed the top at a point
    uncounted = table.loc[table["bytes_per_step_mean"].isna(), "variant"]
    if len(uncounted):  # FSDP on a torch without hooks for custom collectives (before 2.9)
        shown = ", ".join(sorted({short_labels(table["variant"])[v] or "run" for v in uncounted}))
        ax.text(0.01, 0.02, f"bytes not counted: {shown}", transform=ax.transAxes, fontsize=7)
    # as many columns as fit across the figure: four columns of `exchange=allreduce` ran
    # past both of its edges
    legend_below(fig, ax, handles=handles)
    oversubscription_caption(fig, table)
    return fig


def cost(table: pd.DataFrame, price_label: str, title: str, currency: str = "USD") -> Figure:
    """Cost against time: to the target where runs converged, else of the whole run."""
    fig, (ax,) = new_figure(title, f"Cost vs time ({price_label})")
    reached = bool(table["tta_mean"].notna().any())
    x_col, y_col = ("tta_mean", "cost_to_target") if reached else ("elapsed_mean", "cost_mean")
    # past eight points their N= labels ran into one another: a marker a worker count
    # instead, named in the legend
    labelled = table[[x_col, y_col]].notna().all(axis=1).sum() <= 8
    counts = worker_counts(table)
    shape = {n: "o" if labelled else MARKERS[i % len(MARKERS)] for i, n in enumerate(counts)}
    for colour, variant, rows in coloured_variants(table):
        ax.plot(rows[x_col], rows[y_col], "-", color=colour, label=variant or None)
        for _, row in rows.iterrows():
            if pd.isna(row[x_col]) or pd.isna(row[y_col]):
                continue
            ax.plot(row[x_col], row[y_col], shape[int(row["workers"])], color=colour)
            if labelled:
                ax.annotate(
                    f"N={worker_label(row)}",
                    (row[x_col], row[y_col]),
                    textcoords="offset points",
                    xytext=(5, 5),
                    fontsize=8,
                )
    if not labelled:
        for n in counts:
            label = f"N={worker_label(table[table['workers'] == n].iloc[0])}"
            ax.plot([], [], shape[n], color="#444", fillstyle="none", label=label)
    if not table[y_col].notna().any():
        note(ax, "no cost to show: no run finished")
    what = "time to accuracy" if reached else "run time (no run reached the target)"
    ax.set_xlabel(f"{what}, seconds (mean)")
    ax.set_ylabel(f"cost to {'target' if reached else 'finish'}, {currency}")
    # ticks as close as the axis needs, never in exponent form (two significant figures,
    # as the tables print money, wrote 0.0021 for 0.00205 and 0.00210 alike)
    plain = ScalarFormatter(useOffset=False)
    plain.set_scientific(False)
    ax.yaxis.set_major_formatter(plain)
    ax.margins(x=0.12, y=0.12)  # room for the N= labels
    named = not labelled or any(v for v, _ in variants(table))
    return finish(fig, ax, table, legend=named)
