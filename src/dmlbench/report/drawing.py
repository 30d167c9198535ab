"""What every figure of the report shares: colours, markers, a figure's size and title,
the log2 workers axis and its oversubscription marks, each variant's colour and short
label, and the legend below the plot. Figures are drawn without pyplot: no global
state, no GUI backend."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import NullLocator, ScalarFormatter

from dmlbench.report.variants import short_labels

PHASE_COLOURS = {
    "data": "#8c8c8c",
    "forward": "#4c78a8",
    "backward": "#72b7b2",
    "comm": "#e45756",
    "optimizer": "#f2cf5b",
}


def palette(name: str) -> list[tuple[float, float, float, float]]:
    """A qualitative matplotlib colour map's colours (RGBA), in order."""
    colours = colormaps[name]
    return [colours(index) for index in range(colours.N)]


VARIANT_COLOURS = palette("tab10")
MARKERS = "os^Dvph*X"
WIDTH, HEIGHT = 5.6, 3.8  # inches: drawn half a page wide, fonts stay readable
# Panels side by side take the report's whole row: two columns and the gap between
# them (1,350 px against 658 px a column at 1,400), so their fonts are drawn at the size
# of a one-panel figure's in its column.
WIDE = 2.05 * WIDTH
LINE_STYLES = ["-", "--", ":", "-."]


# The width of a character of the figures' font, as a share of its size in points
# (DejaVu Sans averages about 0.52 over titles: letters, digits, dots and spaces):
# enough to wrap by, not to lay out.
CHAR_WIDTH = 0.52
TITLE_SIZE = 10
LEGEND_SIZE = 9
LEGEND_HANDLE = 45  # points a legend entry takes besides its text: the line and spacing
# Of a figure's height, what a y-axis label may take: the rest is the title above the
# axes, the ticks, the axis label and the legend below them.
YLABEL_SHARE = 0.6
TITLE_GID, YLABEL_GID = "figure-title", "axis-ylabel"  # what a browser test looks for


def wrapped(text: str, points: float, size: float) -> str:
    """``text``'s lines wrapped to ``points`` at font ``size``."""
    width = max(12, int(points / (CHAR_WIDTH * size)))
    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def new_figure(title: str, heading: str, ncols: int = 1) -> tuple[Figure, list]:
    fig = Figure(figsize=(WIDE if ncols > 1 else WIDTH, HEIGHT), layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(1, ncols)))
    text = wrapped(f"{heading}\n{title}", fig.get_figwidth() * 72 * 0.97, TITLE_SIZE)
    fig.suptitle(text, fontsize=TITLE_SIZE, x=0.01, ha="left").set_gid(TITLE_GID)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, axes


def worker_label(row: pd.Series) -> str:
    """A point's worker count as the tables write it: ``N=4*`` where oversubscribed,
    ``N≤2`` for a Dask fit, which may use up to that many."""
    star = "*" if row.get("oversubscribed") else ""
    return f"N{'≤' if row.get('elastic') else '='}{int(row['workers'])}{star}"


def tick_labels(table: pd.DataFrame, workers: list[int]) -> list[str]:
    over = set(table.loc[table["oversubscribed"], "workers"].astype(int))
    return [f"{w}{'*' if w in over else ''}" for w in workers]


def log2_workers_axis(ax, workers: list[int], thin: bool = False) -> None:
    """A log2 axis of worker counts, a tick each; ``thin``: past 8 counts, ticks at the
    powers of two only (else their labels run together)."""
    ax.set_xscale("log", base=2)
    ticks = workers
    if thin and len(ticks) > 8:
        ticks = [w for w in workers if w & (w - 1) == 0] or workers
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("workers")
    if len(workers) == 1:
        ax.set_xlim(workers[0] / 1.5, workers[0] * 1.5)


def variants(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(short label, rows by workers) per variant, in order of appearance."""
    names = short_labels(table["variant"])  # sorted: the same colour in every figure
    groups = dict(list(table.groupby("variant", sort=False)))
    return [(short, groups[label].sort_values("workers")) for label, short in names.items()]


def legend_below(
    fig: Figure, ax, title: str | None = None, handles: Sequence[Artist] | None = None
) -> None:
    """``ax``'s legend (or ``handles``', each labelled) below the plot area, outside it;
    repeated labels shown once."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    else:
        labels = [handle.get_label() for handle in handles]
    unique: dict[str, Artist] = {}
    for handle, label in zip(handles, labels, strict=True):
        unique.setdefault(label, handle)
    if unique:
        # up to three columns, as many as fit across the figure; a label too long for
        # one line wraps, so that no label runs past the figure's edges
        points = fig.get_figwidth() * 72 * 0.95
        longest = max(len(label) for label in unique) * CHAR_WIDTH * LEGEND_SIZE
        columns = max(1, min(3, len(unique), int(points // (longest + LEGEND_HANDLE))))
        texts = [wrapped(label, points / columns - LEGEND_HANDLE, LEGEND_SIZE) for label in unique]
        fig.legend(
            list(unique.values()),
            texts,
            loc="outside lower center",
            ncols=columns,
            fontsize=LEGEND_SIZE,
            frameon=False,
            title=title,
            title_fontsize=8,
        )
        rows = math.ceil(len(unique) / columns) * max(text.count("\n") + 1 for text in texts)
        if rows > 2:  # a long legend gets room of its own instead of squashing the plot
            width, height = fig.get_size_inches()
            fig.set_size_inches(width, height + 0.22 * (rows - 2))


def note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#666")


def oversubscription_caption(fig: Figure, table: pd.DataFrame) -> None:
    """Say in the title which worker counts shared cores (constrained layout keeps it clear)."""
    over = table[table["oversubscribed"]]
    if not over.empty:
        cores = int(over["cores"].max())
        counts = ", ".join(str(n) for n in sorted(set(over["workers"])))
        title = fig.get_suptitle()
        fig.suptitle(
            f"{title}\n* oversubscribed: {counts} workers on {cores} cores share them",
            fontsize=10,
            x=0.01,
            ha="left",
        )


GROUP_WIDTH = 0.8  # of the 1 between worker counts, what a count's bars take together


def bar_positions(table: pd.DataFrame) -> tuple[list[int], Callable[[str, int], Slot]]:
    """The worker counts across the axes, and where a variant's bar (its short label) at
    a count stands: ``(x, width)``. The variants present at a count share its group, in
    the short labels' order; a sweep's, present at every count, stand alike in each. An
    imported round's thirty systems, each at one count, split every group thirty ways
    and left most of it empty: hairline bars."""
    workers = sorted(int(w) for w in table["workers"].unique())
    names = short_labels(table["variant"])
    present = {}  # each count's variants, in the short labels' order
    for count in workers:
        here = {names[v] for v in table.loc[table["workers"] == count, "variant"]}
        present[count] = [short for short in names.values() if short in here]
    position = {count: i for i, count in enumerate(workers)}

    def place(variant: str, count: int) -> Slot:
        here = present[count]
        width = GROUP_WIDTH / len(here)
        return position[count] + (here.index(variant) - (len(here) - 1) / 2) * width, width

    return workers, place


Slot = tuple[float, float]  # a bar's centre and width


def bar_label(ax, bar, text: str, y: float, workers: int) -> Text:
    """``text`` above ``bar`` (at ``y``), across it where its longest line fits the
    bar's slot, else up it on one line: side by side, six variants' labels ran into each
    other ("not nreached"). ``workers``: the groups of bars across the axes."""
    upright = not fits_across(text, slot_points(ax, bar.get_width(), workers), BAR_LABEL_SIZE)
    return ax.text(
        bar.get_x() + bar.get_width() / 2,
        y,
        " ".join(text.split("\n")) if upright else text,
        ha="center",
        va="bottom",
        fontsize=BAR_LABEL_SIZE,
        rotation=90 if upright else 0,
        # over a target line that crosses it (a 97% target over a 93% bar's label)
        zorder=3,
        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 0.5},
    )


BAR_LABEL_SIZE = 8


def keep_inside(ax, texts: Sequence[Text]) -> None:
    """Raise the top of ``ax``'s y axis until every one of ``texts`` (labels that start
    at a data height) ends inside the axes: an upright "1/1 reached" over the tallest bar
    ran out of them into the titles. Lays the figure out once to measure them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not any(text.get_rotation() for text in texts):
        return  # across their bars they fit below the axis' top, 1.2 times the tallest
    FigureCanvasAgg(ax.get_figure()).draw()
    box = ax.get_window_extent()
    log = ax.get_yscale() == "log"  # heights as the axis spaces them
    low, high = (math.log10(v) if log else v for v in ax.get_ylim())
    grow = 1.0
    for text in texts:
        y = text.get_position()[1]
        start = ((math.log10(y) if log else y) - low) / (high - low)  # of the axis' height
        over = (text.get_window_extent().y1 - box.y1) / box.height
        if 0 < over < start:  # drawn at start / grow it ends inside
            grow = max(grow, start / (start - over))
    top = low + (high - low) * min(grow * 1.03, 3.0)
    ax.set_ylim(*((10**low, 10**top) if log else (low, top)))


def slot_points(ax, bar_width: float, workers: int) -> float:
    """How wide a bar of ``bar_width`` is on the page, with its share of the gap between
    groups, in points; ``workers``: the groups of bars across the axes."""
    axes_pt = ax.get_position().width * ax.get_figure().get_figwidth() * 72
    return bar_width / GROUP_WIDTH * axes_pt / max(workers, 1)


def fits_across(text: str, points: float, size: float) -> bool:
    """Whether ``text``'s longest line, at ``size``, is at most ``points`` wide."""
    return max(len(line) for line in text.split("\n")) * CHAR_WIDTH * size <= points


def worker_counts(table: pd.DataFrame) -> list[int]:
    """The worker counts of a table, in numeric order."""
    return sorted(int(w) for w in table["workers"].unique())


# Past the palette's ten colours a variant's bars take a pattern as well, so no two
# swatches look alike (a whole round's thirty systems: A, K and U were one blue)
PATTERNS = ("", "..", "xx")


def palette_round(index: int) -> int:
    """How often the palette came round before the ``index``-th variant's colour
    (:func:`coloured_variants`' order): what picks its bars' pattern and its marker."""
    return index // len(VARIANT_COLOURS)


def bar_pattern(index: int) -> str:
    """The hatch of the ``index``-th variant's bars."""
    return PATTERNS[palette_round(index) % len(PATTERNS)]


def coloured_variants(table: pd.DataFrame) -> Iterator[tuple[tuple, str, pd.DataFrame]]:
    """(colour, short label, rows by workers) per variant: the same colour in every figure."""
    for i, (variant, rows) in enumerate(variants(table)):
        yield VARIANT_COLOURS[i % len(VARIANT_COLOURS)], variant, rows


def fit_labels(fig: Figure) -> Figure:
    """Each y-axis label wrapped to the height it may take, its axes' as laid out (a long
    one ran up into the title above the axes: a tall legend below made the figure, not
    the axes, taller), and tagged for the browser test; call before saving."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    most = fig.get_figheight() * 72 * YLABEL_SHARE
    taller = fig.get_figheight() > HEIGHT + 0.01  # a share of it is more than the axes'
    if taller:
        FigureCanvasAgg(fig).draw()  # the layout places the axes
    for ax in fig.axes:
        label = ax.yaxis.label
        if label.get_text():
            axes = ax.get_window_extent().height * 72 / fig.dpi if taller else most
            height = min(most, axes)
            label.set_text(wrapped(label.get_text(), height, float(label.get_fontsize())))
            label.set_gid(YLABEL_GID)
    return fig


def finish(fig: Figure, ax, table: pd.DataFrame, legend: bool = True) -> Figure:
    """The legend below ``ax`` (when asked) and the oversubscription caption."""
    if legend:
        legend_below(fig, ax)
    oversubscription_caption(fig, table)
    return fig
