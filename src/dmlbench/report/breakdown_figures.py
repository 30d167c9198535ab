"""The report's figures of where a step's time and a run's money go: the step's phases,
the bytes an exchange sends against its step time, and cost against time. Drawn as the
report's other figures are (:mod:`dmlbench.report.figures`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D  # no pyplot: no global state, no GUI backend
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator, ScalarFormatter

from dmlbench.report.drawing import (
    MARKERS,
    PHASE_COLOURS,
    VARIANT_COLOURS,
    bar_positions,
    coloured_variants,
    finish,
    fits_across,
    legend_below,
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
from dmlbench.report.formats import human_bytes
from dmlbench.report.variants import short_labels, variant_pairs
from dmlbench.results.schema import PHASES


def phases(table: pd.DataFrame, title: str) -> Figure:
    """Per-step time split into phases (mean over ranks and runs), stacked per worker count."""
    fig, (ax,) = new_figure(title, "Where a step's time goes (steady state, mean over ranks)")
    workers, place = bar_positions(table)
    drawn = False
    names = short_labels(table["variant"])
    cells = zip(table["variant"], table["workers"], strict=True)
    narrowest = min(place(names[v], int(w))[1] for v, w in cells)
    slot = slot_points(ax, narrowest, len(workers))

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
        slots = [place(names[variant], int(w)) for w in rows["workers"]]
        x, width = np.array([x for x, _ in slots]), np.array([w for _, w in slots])
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
    # unlabelled, a variant's worker counts shared a colour and a marker: a marker a count
    counted = several and not labelled and not split
    counts = _count_keys(frame)
    for i, (variant, rows) in enumerate(frame.groupby("variant", sort=True)):
        colour = colours[colour_key(variant)]
        x, y = rows["bytes_per_step_mean"], rows["step_time_mean"] * 1000
        if counted:
            for n, at in rows.groupby("workers"):
                ax.plot(x[at.index], y[at.index], counts[int(n)][0], color=colour)
        else:
            ax.plot(x, y, markers[marker_key(variant)], color=colour, linestyle="none")
        if not labelled:
            continue
        for _, row in rows.iterrows():
            share = row["comm_ratio_mean"]
            parts = [worker_label(row)] if several else []
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
    if counted:
        for marker, label in counts.values():
            key = Line2D([], [], color="#444", marker=marker, ls="none", fillstyle="none")
            key.set_label(label)
            handles.append(key)
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
    counts = _count_keys(table)
    shape = {n: "o" if labelled else marker for n, (marker, _) in counts.items()}
    for colour, variant, rows in coloured_variants(table):
        drawn = bool(rows[[x_col, y_col]].notna().all(axis=1).any())  # else unpriced: no name
        ax.plot(rows[x_col], rows[y_col], "-", color=colour, label=variant if drawn else None)
        for _, row in rows.iterrows():
            if pd.isna(row[x_col]) or pd.isna(row[y_col]):
                continue
            ax.plot(row[x_col], row[y_col], shape[int(row["workers"])], color=colour)
            if labelled:
                ax.annotate(
                    worker_label(row),
                    (row[x_col], row[y_col]),
                    textcoords="offset points",
                    xytext=(5, 5),
                    fontsize=8,
                )
    if not labelled:
        for marker, label in counts.values():
            ax.plot([], [], marker, color="#444", fillstyle="none", label=label)
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


def _count_keys(table: pd.DataFrame) -> dict[int, tuple[str, str]]:
    """A marker for each worker count, and its name in the legend as the axes name it
    (``N=4*`` where oversubscribed): where points go unlabelled, a variant's counts
    are told apart by marker."""
    counts = worker_counts(table)
    names = tick_labels(table, counts)
    return {
        n: (MARKERS[i % len(MARKERS)], f"N={name}")
        for i, (n, name) in enumerate(zip(counts, names, strict=True))
    }
