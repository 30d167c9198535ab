"""Training history: a JSON-serialisable list of epoch records with nested update records.

``est.history_[-1]`` is the last epoch (a dict); ``est.history_[-1]["updates"]`` its model
updates. :meth:`History.frame` flattens either level into a pandas DataFrame, and
:func:`plot_histories` draws several fits side by side (loss and batch size against
model updates).

Epoch record keys: ``epoch`` (1-based), ``updates`` (the update records), ``n_updates``
(updates so far, all epochs), ``examples`` (this epoch), ``train_loss`` (mean over the
epoch's examples), ``batch_size`` (the one most updates used), ``workers`` (most
workers seen in one update), ``target_workers`` (what the cluster was last asked for),
``lr``, ``wall_s``, ``engine`` (and ``generation`` for DDP).

Update record keys: ``update`` (1-based, all epochs), ``epoch`` (fractional: examples
seen / training examples), ``batch_size``, ``tasks`` (gradient tasks; ranks for DDP),
``workers`` (distinct Dask workers that computed it), ``target_workers`` (what the
cluster was scaled to; ``None`` when it cannot be scaled), ``lr``, ``loss`` (mean over
the batch), ``wall_s`` (driver wall clock for the whole update), ``compute_s`` (the
slowest task's pure gradient compute), ``noise_scale`` (running B_simple estimate).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Record = dict[str, Any]

LOG = logging.getLogger(__name__)  # the estimator's ``verbose`` lines


def log_epoch(record: Record) -> None:
    """``verbose``'s line for an epoch, on the estimator's logger; where logging is not
    set up, on stdout, as scikit-learn's estimators print theirs. The library's own
    NullHandler is no set-up (``hasHandlers`` counted it, and verbose printed nothing)."""
    node: logging.Logger | None = LOG
    handlers: list[logging.Handler] = []
    while node is not None:
        handlers += [h for h in node.handlers if not isinstance(h, logging.NullHandler)]
        node = node.parent if node.propagate else None
    if not handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        LOG.addHandler(handler)
    if not LOG.isEnabledFor(logging.INFO):
        LOG.setLevel(logging.INFO)
    LOG.info(  # logging formats the record's keys by name from one mapping
        "epoch %(epoch)s: loss %(train_loss).4f, batch %(batch_size)s, workers %(workers)s, "
        "%(n_updates)s updates, %(wall_s).2f s",
        record,
    )


@dataclass(frozen=True)
class Update:
    """One model update as an engine saw it: the batch's mean loss, how many workers
    computed it, the slowest one's compute seconds, the batch's size, the tasks it was
    split into, the workers the cluster was scaled to, and its wall clock."""

    loss: float
    workers: int
    compute_s: float
    batch_size: int
    tasks: int
    target_workers: int | None  # None: the cluster cannot be scaled
    wall_s: float


def _most_common(values: list[int]) -> int | None:
    """The batch size most updates of an epoch used (ties: the larger)."""
    return max(set(values), key=lambda v: (values.count(v), v)) if values else None


class History(list[Record]):
    """Epoch records; each holds its ``updates``."""

    def new_epoch(self, **values: Any) -> Record:
        record: Record = {"epoch": len(self) + 1, "updates": [], **values}
        self.append(record)
        return record

    @staticmethod
    def close_epoch(record: Record, n_updates: int, wall: float) -> Record:
        """Sum an epoch's update records up into its own keys (see the module)."""
        updates = record["updates"]
        examples = sum(u["batch_size"] for u in updates)
        record.update(
            n_updates=n_updates,
            examples=examples,
            train_loss=sum(u["loss"] * u["batch_size"] for u in updates) / max(examples, 1),
            batch_size=_most_common([u["batch_size"] for u in updates]),
            workers=max((u["workers"] for u in updates), default=0),
            target_workers=updates[-1]["target_workers"] if updates else None,
            lr=updates[-1]["lr"] if updates else None,
            wall_s=wall,
        )
        return record

    def update_records(self) -> list[Record]:
        return [update for epoch in self for update in epoch.get("updates", ())]

    @property
    def n_updates(self) -> int:
        return sum(len(epoch.get("updates", ())) for epoch in self)

    def frame(self, level: str = "epochs") -> Any:
        """``level="epochs"`` or ``"updates"`` as a pandas DataFrame."""
        import pandas as pd

        if level == "updates":
            return pd.DataFrame(self.update_records())
        if level == "epochs":
            return pd.DataFrame([{k: v for k, v in e.items() if k != "updates"} for e in self])
        raise ValueError(f"level must be 'epochs' or 'updates', not {level!r}")


def plot_histories(
    histories: dict[str, History],
    path: str | Path,
    *,
    metric: str | None = None,
    title: str | None = None,
) -> Path:
    """Draw each labelled history: loss (or an epoch ``metric`` such as ``test_accuracy``)
    and batch size against model updates, and workers per update; ``title`` heads the
    figure. One legend, below the panels. Writes a PNG."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import (
        FuncFormatter,
        LogLocator,
        MaxNLocator,
        NullFormatter,
        PercentFormatter,
        ScalarFormatter,
    )

    figure = Figure(figsize=(13, 4.4), layout="constrained")
    left, middle, right = figure.subplots(1, 3)
    for label, history in histories.items():
        epochs, updates = history.frame("epochs"), history.frame("updates")
        if metric and metric in epochs:
            left.plot(epochs["n_updates"], epochs[metric], marker=".", label=label)
        else:
            left.plot(updates["update"], updates["loss"], label=label, linewidth=0.8)
        if len(updates) and {"batch_size", "workers"} <= set(updates.columns):
            # every update's batch (an epoch's last takes what is left) and workers
            middle.step(updates["update"], updates["batch_size"], where="post", label=label)
            right.step(updates["update"], updates["workers"], where="post", label=label)
        else:  # a history saved without its updates: the batch most updates used, per epoch
            middle.step(epochs["n_updates"], epochs["batch_size"], where="pre", label=label)
            right.step(epochs["n_updates"], epochs["workers"], where="pre", label=label)
    accuracy = bool(metric and "accuracy" in metric)
    left.set(
        xlabel="model updates (log scale)",
        ylabel=(metric or "training loss").replace("_", " ") + (", %" if accuracy else ""),
        xscale="log",
    )
    if accuracy:
        left.yaxis.set_major_formatter(PercentFormatter(1.0))
    if not metric:
        left.set_yscale("log")
    middle.set(
        xlabel="model updates (log scale)", ylabel="batch size, examples (log scale)", xscale="log"
    )
    middle.set_yscale("log", base=2)
    middle.yaxis.set_major_formatter(ScalarFormatter())  # 32, 64, 128: every doubling named
    right.set(xlabel="model updates (log scale)", ylabel="Dask workers in an update", xscale="log")
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_ylim(bottom=0)
    for axes in (left, middle, right):
        axes.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
        axes.xaxis.set_minor_formatter(NullFormatter())  # log-axis minor labels collide
        axes.grid(alpha=0.3)
    handles, labels = left.get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False)
    if title:
        figure.suptitle(title, x=0.01, ha="left", fontsize=11)
    from dmlbench.files import write_figure

    return write_figure(figure, Path(path), "history plot", dpi=110)
