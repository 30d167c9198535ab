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

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, PercentFormatter

from dmlbench.qualities import ACCURACY, Quality, shared_quality
from dmlbench.report.drawing import (
    BAR_LABEL_SIZE,
    LINE_STYLES,
    MARKERS,
    VARIANT_COLOURS,
    bar_label,
    bar_pattern,
    bar_positions,
    coloured_variants,
    finish,
    keep_inside,
    log2_workers_axis,
    new_figure,
    note,
    palette_round,
    slot_points,
    tick_labels,
    worker_counts,
)
from dmlbench.report.formats import plural
from dmlbench.report.variants import number_order, short_labels


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
    after time (or the best accuracy) instead, and its heading says so. Times that span
    more than :data:`LOG_SPREAD` times stand on a log axis: a whole MLPerf round, 23 s to
    19 h, left every bar but the slowest flat on a linear one. Where bars stand too close
    for their counts, a bar whose runs all reached the target goes without one, and the
    axis says so. On a log axis a count is the figure alone (``4/5``), the axis saying
    what it counts: upright, "10/10 reached" raised the axis' top two decades.
    """
    if not table["tta_mean"].notna().any():
        return _accuracy_bars(table, title)
    fig, (ax,) = new_figure(title, "Time to accuracy (evaluation included)")
    workers, place = bar_positions(table)
    top = float(np.nanmax(table["tta_mean"] + table["tta_std"].fillna(0)))
    least = float(table["tta_mean"][table["tta_mean"] > 0].min())
    log = top / least > LOG_SPREAD
    if log:
        ax.set_yscale("log")
    floor = least / 2 if log else 0.0
    labels, unsaid = [], False
    for i, (colour, variant, rows) in enumerate(coloured_variants(table)):
        x, width = zip(*(place(variant, int(w)) for w in rows["workers"]), strict=True)
        heights = rows["tta_mean"].fillna(floor)
        bars = ax.bar(
            x,
            heights - floor,
            width,
            bottom=floor,
            yerr=rows["tta_std"].fillna(0),
            capsize=4,
            color=colour,
            hatch=bar_pattern(i),
            label=variant or None,
        )
        for bar, (_, row) in zip(bars, rows.iterrows(), strict=True):
            if row["oversubscribed"]:
                bar.set_hatch(bar_pattern(i) + "//")
            crowded = slot_points(ax, bar.get_width(), len(workers)) < BAR_LABEL_SIZE * 1.2
            if crowded and row["converged"] == row["runs"]:
                unsaid = True  # every run reached it: the axis says so, once
                continue
            text = f"{int(row['converged'])}/{int(row['runs'])}" + ("" if log else " reached")
            if not row["converged"] and not log:
                text = f"not reached\n0/{int(row['runs'])}"
            above = float(heights[row.name]) + (0 if pd.isna(row["tta_std"]) else row["tta_std"])
            at = above * 1.1 if log else above + 0.02 * top
            labels.append(bar_label(ax, bar, text, at, len(workers)))
    ax.set_xticks(range(len(workers)))
    ax.set_xticklabels(tick_labels(table, workers))
    said = ["n/m: runs that reached the target"] if log else []
    if unsaid:
        said.append("none shown: all did" if log else "a bar without a count: every run reached it")
    ax.set_xlabel("workers" + (f" ({'; '.join(said)})" if said else ""))
    scale = ", log scale" if log else ""
    ax.set_ylabel(f"seconds{scale} (mean ± std over converged runs)")
    ax.set_ylim(floor, top * 3 if log else top * 1.2)
    finish(fig, ax, table, legend=bool((table["variant"] != "").any()))
    keep_inside(ax, labels)  # laid out with its legend, as it is drawn
    return fig


LOG_SPREAD = 30  # the slowest bar over the fastest past which a linear axis flattens it


def _accuracy_bars(table: pd.DataFrame, title: str) -> Figure:
    """No run reached the target: the best each point got, in the goal's terms (the
    lowest test loss for a loss goal), beside the target."""
    by_loss = "goal" in table and bool((table["goal"] == "loss").all())
    quality = table_quality(table)
    budget = "aat_mean" in table and table["aat_mean"].notna().any()
    if budget:
        best = "lowest test loss" if by_loss else f"best {quality.name}"
        column, what = "aat_mean", f"{best} within the report's time budget"
    elif by_loss:
        column, what = "best_mean", "lowest test loss reached"
    else:
        column = "best_mean" if "best_mean" in table else "best_metric_mean"
        what = f"best {quality.name} reached"
    fig, (ax,) = new_figure(title, f"No run reached the target: {what}")
    workers, place = bar_positions(table)
    labels = []
    for i, (colour, variant, rows) in enumerate(coloured_variants(table)):
        x, width = zip(*(place(variant, int(w)) for w in rows["workers"]), strict=True)
        heights = rows[column].fillna(0)
        bars = ax.bar(x, heights, width, label=variant or None, color=colour, hatch=bar_pattern(i))
        for bar, (_, row) in zip(bars, rows.iterrows(), strict=True):
            if row["oversubscribed"]:
                bar.set_hatch(bar_pattern(i) + "//")
            shown = f"{row[column]:.3f}" if by_loss else quality.text(row[column])
            text = f"{shown}\n0/{int(row['runs'])} reached"
            labels.append(bar_label(ax, bar, text, bar.get_height(), len(workers)))
    target = table["target"].dropna() if "target" in table else pd.Series(dtype=float)
    if len(target):
        value = float(target.iloc[0])
        label = f"target loss {value:g}" if by_loss else f"target {quality.text(value, 0)}"
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
        quality_axis(ax, quality, "(mean over runs)")
        ax.yaxis.set_major_locator(FixedLocator([0, 0.25, 0.5, 0.75, 1.0]))  # none past 100%
        ax.set_ylim(0, 1.05)
    finish(fig, ax, table)
    keep_inside(ax, labels)  # upright labels over 80% bars ran out of the axes
    return fig


ACCURACY_TOP = 1.008  # a 100% point's marker shows whole


def table_quality(table: pd.DataFrame) -> Quality:
    """What the table's runs measure: one imported benchmark's quality, else accuracy."""
    return shared_quality(table.get("task", ()))


def quality_axis(ax: Axes, quality: Quality, note: str = "") -> None:
    """The y axis of a quality: ``top-1 accuracy, %``; a BLEU on 0 to 100, an AUC as
    logged (an imported BLEU or AUC was called accuracy, in percent)."""
    name = "test accuracy" if quality is ACCURACY else quality.name
    unit = ", %" if quality.percent else ""
    ax.set_ylabel(f"{name}{unit} {note}".strip())
    if quality.percent:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    else:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{quality.scale * v:g}"))


def curves(
    evals: pd.DataFrame,
    table: pd.DataFrame,
    target: float | None,
    title: str,
    target_loss: float | None = None,
) -> Figure:
    """Test accuracy and loss against wall-clock time, one line per run (a point where a
    run evaluated once). Coloured by worker count; with several variants, coloured by
    variant and dashed by worker count; past the palette's ten colours a variant's marker
    changes too. Training accuracy, where runs measured it, is a thin dotted line of the
    run's colour; a task's target loss a dashed line. Runs whose lengths span more than
    :data:`LOG_SPREAD` times are drawn against a log time axis (a whole MLPerf round: 23 s
    to 19 h squeezed every fast run against the axis)."""
    lossless = not evals["loss"].notna().any()  # MLPerf's logs say their quality only
    quality = table_quality(table)
    measured = "Accuracy" if quality is ACCURACY else quality.name
    heading = f"{measured} {'' if lossless else 'and loss '}vs wall-clock time"
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
        marker = "o"
        if len(names) > 1:
            index = list(names.values()).index(name)
            colour = VARIANT_COLOURS[index % len(VARIANT_COLOURS)]
            marker = MARKERS[palette_round(index) % len(MARKERS)]
            style = LINE_STYLES[workers.index(n) % len(LINE_STYLES)]
            label = f"{name} · {label}"
        else:
            colour, style = by_count[n], "-"
        for ax, column in drawn:
            ax.plot(
                run["elapsed_s"],
                run[column],
                style,
                marker=marker,
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
        label = f"target {quality.text(target, 0)}"
        acc.axhline(target, color="k", ls="--", lw=1, label=label)
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
    ends = evals.groupby("run_id")["elapsed_s"].max()
    ends = ends[ends > 0]
    log = len(ends) > 0 and ends.max() / ends.min() > LOG_SPREAD
    for ax, _ in drawn:
        if log:
            ax.set_xscale("log", nonpositive="mask")
        ax.set_xlabel("wall-clock seconds since run start" + (", log scale" if log else ""))
    quality_axis(acc, quality)
    # no accuracy is above 100%: room for a marker there, no ticks past it ("104%")
    acc.set_ylim(top=min(acc.get_ylim()[1], ACCURACY_TOP))
    if loss is not None:
        loss.set_ylabel("test loss (mean per example)")
    return finish(fig, acc, table)
