"""How every table writes a number: the terminal, the HTML report and `compare` alike,
and how --help writes a docstring (:func:`reflowed`).

Missing values (None, NaN, pandas' NA) print as ``—``. No pandas import here, so the
terminal's run table stays fast to load.
"""

from __future__ import annotations

import inspect
import math
import re
from typing import Any

from dmlbench.qualities import quality_of

MISSING = "—"


def missing(value: Any) -> bool:
    """None, NaN or pandas' NA (whose comparisons are neither true nor false)."""
    if value is None:
        return True
    try:
        return bool(value != value)  # only NaN differs from itself
    except TypeError:
        return True  # pd.NA: "ambiguous" truth value


def fmt(value: Any, spec: str = ".2f") -> str:
    if isinstance(value, str):
        return value
    return MISSING if missing(value) else format(value, spec)


def share(value: Any) -> str:
    """A fraction as a percentage that never reads 0% for a share there is: ``33%``,
    ``0.3%`` (a tiny model's share of the device's peak)."""
    if missing(value):
        return MISSING
    if 0 < abs(value) < 0.001:  # a CPU's curve on a GPU profile: 0.011%, not 0.0%
        return f"{100 * value:.2g}%"
    return format(value, ".1%" if abs(value) < 0.1 else ".0%")


def money(value: Any) -> str:
    """Two significant figures, never in exponent form: ``0.19``, ``0.000016``, ``1,234``."""
    if missing(value):
        return MISSING
    if abs(value) >= 100:
        return f"{value:,.0f}"
    import numpy as np

    return str(
        np.format_float_positional(value, precision=2, unique=True, fractional=False, trim="-")
    )


def seconds(value: Any, *, unit: bool = False) -> str:
    """Three significant figures or so: ``0.123``, ``4.56``, ``1,234.5``; ``∞`` for a run
    that never got there. With ``unit``: ``4.56 s``, ``1,234 s``, and hours from an hour
    up."""
    if missing(value):
        return MISSING
    if math.isinf(value):
        return "∞"
    if unit and value >= 3600:
        return f"{value / 3600:.2f} h"
    size = abs(value)
    text = f"{value:.3f}" if size < 1 else f"{value:.2f}" if size < 10 else f"{value:,.1f}"
    if unit and size >= 1000:
        text = f"{value:,.0f}"  # "2,115 s": a tenth of a second is below its figures
    return f"{text} s" if unit else text


def milliseconds(value: Any) -> str:
    """Seconds shown as milliseconds, two decimals."""
    return MISSING if missing(value) else f"{1000 * value:,.2f}"


def microseconds(value: float) -> str:
    """Seconds shown as whole microseconds; three figures from 0.1 s up (``142,000``,
    not ``1.42e+05``, which a column of whole numbers reads badly)."""
    micro = value * 1e6
    if value >= 0.1:
        micro = round(micro, 2 - math.floor(math.log10(micro)))
    return f"{micro:,.0f}"


def layout(nodes: int, per_node: int, compact: bool = False) -> str:
    """What follows a worker count on several nodes: `` (2 nodes × 4)``, or `` (2×4)``
    in a narrow column; nothing on one node."""
    if nodes <= 1:
        return ""
    return f" ({nodes}×{per_node})" if compact else f" ({nodes} nodes × {per_node})"


# An emulated cluster's all-reduce benchmark times three scopes (CommResult.scope).
SCOPES = {"all": "all", "node": "node", "hierarchical": "2-level"}
SCOPE_NOTE = (
    "scope: all = one all-reduce over every rank; node = within each node; 2-level = "
    "reduce within each node, all-reduce among the nodes, broadcast back"
)


def percent(value: Any, decimals: int = 1) -> str:
    return MISSING if missing(value) else f"{100 * value:.{decimals}f}%"


def goal_value(goal: str, value: Any, decimals: int = 1, task: str = "") -> str:
    """A value of a task's goal: ``3.912`` for a loss, ``76.0%`` for an accuracy, an
    imported benchmark's quality as MLPerf writes it (``24.1 BLEU``)."""
    if missing(value):
        return MISSING
    return f"{value:.3f}" if goal == "loss" else quality_of(task).text(value, decimals)


def mean_std(mean: Any, std: Any) -> str:
    """``12.0 ± 2.0``; just the mean when there is no spread; ``—`` when there is no mean."""
    if missing(mean):
        return MISSING
    return seconds(mean) if missing(std) else f"{seconds(mean)} ± {seconds(std)}"


def human_bytes(size: float) -> str:
    """``512 B``, ``1.5 KiB``, ``256 MiB``."""
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" or size >= 100 else f"{size:.3g} {unit}"
        size /= 1024
    return f"{size:.0f} GiB" if size >= 100 else f"{size:.3g} GiB"


def flops(value: float, per_second: bool = False) -> str:
    """``1.29 MFLOP``, ``7.76 GFLOP``, ``215 GFLOP/s``: three significant figures."""
    unit = "FLOP/s" if per_second else "FLOP"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def plural(count: int, noun: str) -> str:
    """``1 worker``, ``2 workers``, ``1,024 runs``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def status_words(status: str) -> str:
    """A stored status in words: ``target not reached`` for ``target_not_reached``."""
    return status.replace("_", " ")


def sentence(phrase: str) -> str:
    """A phrase made a note's sentence: ``no cost: …`` → ``No cost: ….``"""
    return f"{phrase[:1].upper()}{phrase[1:]}."


BULLET = re.compile(r"^(?:[-*] |\d+\. )")


def reflowed(help: str | None) -> str | None:
    """A docstring as --help should show it: each paragraph's lines joined, a list's
    item by item. typer (0.29) keeps a paragraph's single line breaks, and rich then
    wraps the lines again at the terminal's width, leaving a word or two on a line
    of its own (``simulate --help`` at 80 columns)."""
    if not help:
        return help
    paragraphs = []
    for paragraph in inspect.cleandoc(help).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not BULLET.match(line) and not paragraph.startswith("\b"):
                lines[-1] += " " + line.strip()  # click's \b: a paragraph kept as it is
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)
