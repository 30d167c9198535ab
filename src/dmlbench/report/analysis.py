"""Analysis of stored runs as pandas DataFrames: the numbers behind tables and plots.

    from dmlbench.results import ResultsStore
    from dmlbench.report import analysis, frames

    runs = ResultsStore(Path("dmlbench-results")).runs()
    frame = frames.runs_frame(runs)                 # one row per run
    table = analysis.scaling_table(frame)           # one row per (group, variant, workers)
    aat = analysis.accuracy_after_time(frames.evals_frame(runs), budget_s=60)

Definitions (the glossary's):

- time to accuracy (TTA): wall-clock seconds from run start, evaluation included, until
  the metric first reaches the target; runs that never reach it count as not converged
  and are shown, never dropped silently.
- accuracy after time (AAT): best metric among evaluations made within a budget.
- speedup: ``t0 / tN`` for a time, ``thrN / thr0`` for throughput, against the smallest
  worker count present (``baseline_workers``; 1 when there is a 1-worker run).
- throughput over repeats: their harmonic mean, the rate of the mean time a sample took,
  so that it agrees with the mean step time (a mean of rates would count a disturbed
  repeat's slow steps for less than they took).
- efficiency: weak scaling ``t0 / tN``; strong scaling ``n0·t0 / (N·tN)``.
- comm ratio: ``comm / (comm + compute)`` per rank, mean and max over ranks.
- cost: each run's worker-hours × price per worker-hour: hours × workers, or a Dask
  fit's worker-hours its cluster was scaled to (``≤N`` workers), where it could scale it.
- disturbed: a run whose workers waited for cores that other processes took
  (:mod:`dmlbench.results.contention`). Its timings are left out where an undisturbed
  repeat exists, and a point timed only by disturbed runs gets no speedup or efficiency
  (nor do the others, when it is the baseline), unless ``include_disturbed``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from dmlbench.prices import Price
from dmlbench.report.formats import sentence
from dmlbench.report.frames import GROUP
from dmlbench.report.variants import number_order
from dmlbench.results.mlperf import olympic_mean
from dmlbench.results.records import FINISHED
from dmlbench.results.schema import PHASES


def accuracy_after_time(
    evals: pd.DataFrame, budget_s: float, *, compute_only: bool = False
) -> pd.Series:
    """Per run, the best of its evaluations within ``budget_s`` in its goal's terms: the
    highest accuracy, or the lowest test loss for a loss goal (NaN when none was within)."""
    clock = "compute_elapsed_s" if compute_only else "elapsed_s"
    within = evals[evals[clock] <= budget_s]
    by_loss = within["goal"] == "loss" if "goal" in within else pd.Series(False, within.index)
    best = pd.concat(
        [
            within[~by_loss].groupby("run_id")["metric"].max(),
            within[by_loss].groupby("run_id")["loss"].min(),
        ]
    )
    return best.reindex(evals["run_id"].unique()).rename(f"aat_{budget_s:g}s")


def infer_scaling(group: pd.DataFrame) -> str:
    """A group's scaling mode: recorded by its sweep, else read from its batch sizes."""
    recorded = set(group["scaling"]) - {"none"}
    if len(recorded) == 1:
        return recorded.pop()
    if group["workers"].nunique() > 1:
        if group["global_batch"].nunique() == 1:
            return "strong"
        if group["local_batch"].nunique() == 1:
            return "weak"
    return "none"


def efficiency(t0: float, n0: int, t: float, n: int, scaling: str) -> float:
    """Weak: ``t0/tN``; strong: ``n0·t0/(N·tN)``; NaN when either time is missing."""
    if not (t0 and t) or any(map(math.isnan, (t0, t))):
        return math.nan
    if math.isinf(t):
        return 0.0
    return t0 / t if scaling != "strong" else (n0 * t0) / (n * t)


def scaling_table(
    frame: pd.DataFrame,
    *,
    by: Sequence[str] = ("workers",),
    budget_s: float | None = None,
    evals: pd.DataFrame | None = None,
    price: Price | None = None,
    include_disturbed: bool = False,
) -> pd.DataFrame:
    """One row per (task, sweep, variant, ``by``...): repeats aggregated, speedup,
    efficiency, comm ratio, throughput, and cost when a price is given: of the rows
    whose runs ran on the device it is for; another's is left unpriced (``unpriced``
    names its device).

    Runs still running (their launcher alive, e.g. another task of a Slurm job array)
    are not results yet and are left out, and so are runs that a later run of their point
    replaced (``redone``: a resumed sweep, ``--rerun always``). Other failed and
    interrupted runs are counted in ``runs`` but not in the timings (``report.notes``
    has a line for each kind); runs that finished without reaching the target count as
    not converged. Disturbed runs are counted in ``disturbed``; their timings are used
    only where no undisturbed run finished (``timed_disturbed``), and such a row takes
    no part in speedup and efficiency, unless ``include_disturbed``.
    """
    if not frame.empty:  # and a run a later run of its point replaced
        redone = frame["redone"] if "redone" in frame else pd.Series(False, index=frame.index)
        frame = frame[(frame["status"] != "running") & ~redone]
    if frame.empty:
        return pd.DataFrame()
    keys = [*GROUP, "variant", *[b for b in by if b not in (*GROUP, "variant")]]
    if budget_s is not None and evals is not None:
        frame = frame.join(accuracy_after_time(evals, budget_s).rename("aat"), on="run_id")
    rows = []
    for values, group in frame.groupby(keys, sort=False, dropna=False):
        finished = group[group["status"].isin(FINISHED)]
        quiet = finished[~finished["disturbed"]]
        if not include_disturbed and not quiet.empty:
            finished = quiet
        measured = finished[finished["status"] != "throughput"]  # no accuracy: no time to it
        tta = measured["tta_s"].where(measured["converged"], math.inf)
        converged = finished.loc[finished["converged"], "tta_s"]
        row = dict(zip(keys, values, strict=True))
        done = group["status"].isin(FINISHED)
        row.update(
            runs=len(group),
            finished=int(done.sum()),
            converged=int(group.loc[done, "converged"].sum()),
            disturbed=int(group.loc[done, "disturbed"].sum()),
            timed_disturbed=bool(finished["disturbed"].any()),
            # synthetic data (DLBS's throughput mode): no accuracy was measured
            throughput_only=bool(len(finished))
            and bool((finished["status"] == "throughput").all()),
            tta_mean=converged.mean() if len(converged) else math.nan,
            tta_std=converged.std(ddof=1) if len(converged) > 1 else math.nan,
            tta_olympic=olympic_mean(tta) if len(tta) else math.nan,
            tta_compute_mean=finished.loc[finished["converged"], "tta_compute_s"].mean(),
            best_metric_mean=finished["best_metric"].mean(),
            best_mean=finished["best"].mean(),
            goal=group["goal"].iloc[0],
            target=group["target"].iloc[0],
            elapsed_mean=finished["elapsed_s"].mean(),
            step_time_mean=finished["step_time_s"].mean(),
            step_time_std=finished["step_time_s"].std(ddof=1),
            epoch_time_mean=finished["epoch_time_s"].mean(),
            throughput_mean=_harmonic_mean(finished["throughput"]),
            comm_ratio_mean=finished["comm_ratio_mean"].mean(),
            comm_ratio_max=finished["comm_ratio_max"].max(),
            bytes_per_step_mean=finished["bytes_per_step"].mean(),
            noise_scale_mean=finished["noise_scale"].mean(),
            utilisation_mean=finished["utilisation"].mean(),
            peak_memory_max=finished["peak_memory_bytes"].max(),
            # a group without the worker count in its key may span batches
            local_batch=int(group["local_batch"].min()),
            local_batch_max=int(group["local_batch"].max()),
            global_batch=int(group["global_batch"].min()),
            global_batch_max=int(group["global_batch"].max()),
            elastic=bool(group["elastic"].any()),
            largest_batch=finished["largest_batch"].max(),
            cores=group["cores"].max(),
            oversubscribed=bool(group["oversubscribed"].any()),
            division=",".join(sorted(set(group["division"]))),
        )
        for phase in PHASES:
            column = f"{phase}_s"
            row[column] = finished[column].mean() if column in finished else math.nan
        if "aat" in group:
            row["aat_mean"] = finished["aat"].mean()
        if price is not None:  # each run at the workers it held: a group may mix counts
            other = [d for d in dict.fromkeys(group["device"]) if not price.covers(d)]
            hourly = math.nan if other else price.per_worker_hour
            to_target = finished.loc[finished["converged"], "worker_s_to_target"]
            row["cost_to_target"] = to_target.mean() / 3600 * hourly
            row["cost_mean"] = finished["worker_s"].mean() / 3600 * hourly
            if row["throughput_only"]:  # a throughput run finishes nothing worth a cost
                row["cost_mean"] = math.nan
            row["currency"] = price.currency
            row["unpriced"] = ", ".join(other) or None
        rows.append(row)
    table = pd.DataFrame(rows)
    return _add_scaling(table, frame, keys, include_disturbed)


def _harmonic_mean(rates: pd.Series) -> float:
    """The repeats' rate as the mean of the time each took a sample; NaN where none has
    one (a rate of 0 or less is not a measured rate)."""
    measured = rates[rates > 0]
    return float(len(measured) / (1 / measured).sum()) if len(measured) else math.nan


def unpriced_note(table: pd.DataFrame, price: Price) -> str | None:
    """One line naming the devices whose rows ``price`` left without a cost; None if none."""
    if "unpriced" not in table:
        return None
    devices = dict.fromkeys(d for cell in table["unpriced"].dropna() for d in cell.split(", "))
    if not devices:
        return None
    return sentence(price.unpriced(", ".join(devices)))


# `compare --best-by`: the scaling table's column each criterion reads, and whether less
# is better. Time to accuracy is the olympic mean, where a run that missed counts as ∞.
BEST_BY = {
    "time_to_accuracy": ("tta_olympic", True),
    "accuracy_after_time": ("aat_mean", False),
    "best_metric": ("best_mean", False),
    "throughput": ("throughput_mean", False),
    "cost_to_target": ("cost_to_target", True),
}
LEAST_FOR_LOSS = ("aat_mean", "best_mean")  # in a loss goal's terms: its least is its best


def best_order(table: pd.DataFrame, criterion: str) -> str:
    """Which value of ``criterion``'s column :func:`best_of` keeps, as `compare` says it."""
    column, less = BEST_BY[criterion]
    goals = set(table["goal"]) if "goal" in table else set()
    if column in LEAST_FOR_LOSS and "loss" in goals:
        return f"{column}, " + ("least" if goals == {"loss"} else "most; a loss goal's least")
    return f"{column}, {'least' if less else 'most'}"


def best_of(
    table: pd.DataFrame, criterion: str, group: Sequence[str], include_disturbed: bool = False
) -> pd.DataFrame:
    """Per (task, sweep, ``group``...), the scaling table's row best by ``criterion``: the
    point a tuning protocol picks (mlbench: per worker count, the learning rate that
    reaches the target on the validation split first). Speedup and efficiency are then
    against the best row of the fewest workers, whatever its variant, and, as in the
    scaling table, not where either was timed by disturbed runs only, unless
    ``include_disturbed``."""
    column, less = BEST_BY[criterion]
    if table.empty:
        return table
    if column not in table:
        raise ValueError(f"--best-by {criterion} needs {column}, which this table lacks")
    keys = [*GROUP, *[g for g in group if g not in GROUP]]
    score = table[column].astype(float)
    if column in LEAST_FOR_LOSS and "goal" in table:
        score = score.where(table["goal"] != "loss", -score)
    score = score.fillna(math.inf) if less else -score.fillna(-math.inf)
    picked = table.loc[score.groupby([table[k] for k in keys], sort=False).idxmin()]
    picked = picked.reset_index(drop=True)
    if "workers" in keys:
        picked[list(SCALED)] = math.nan  # against another baseline now
        for _, series in picked.groupby(GROUP, sort=False):
            base = series.loc[series["workers"].idxmin()]
            for index, row in series.iterrows():
                picked.loc[index, "baseline_workers"] = int(base["workers"])
                _scale(picked, index, row, base, row["scaling"], include_disturbed)
    return picked.sort_values(keys, kind="stable").reset_index(drop=True)


def _add_scaling(
    table: pd.DataFrame, frame: pd.DataFrame, keys: list[str], include_disturbed: bool
) -> pd.DataFrame:
    for column in ("baseline_workers", *SCALED):
        table[column] = math.nan
    table["scaling"] = "none"
    if "workers" not in keys:  # in the order of what it is grouped by, not of the runs
        return table.sort_values(keys, kind="stable", key=in_number_order).reset_index(drop=True)
    series_keys = [k for k in keys if k != "workers"]
    for values, series in table.groupby(series_keys, sort=False, dropna=False):
        members = frame
        for key, value in zip(series_keys, values, strict=True):
            members = members[members[key] == value]
        mode = infer_scaling(members)
        base = series.loc[series["workers"].idxmin()]
        n0 = int(base["workers"])
        for index, row in series.iterrows():
            table.loc[index, "scaling"] = mode
            table.loc[index, "baseline_workers"] = n0
            _scale(table, index, row, base, mode, include_disturbed)
    ordered = table.sort_values([*series_keys, "workers"], kind="stable", key=in_number_order)
    return ordered.reset_index(drop=True)


def in_number_order(column: pd.Series) -> pd.Series:
    """Variants in the order of the numbers in them: ``local_batch=4`` before
    ``local_batch=16`` (as text, 16 came first)."""
    return column.map(number_order) if column.name == "variant" else column


SCALED = ("speedup_tta", "speedup_throughput", "efficiency_tta", "efficiency_step")


def _scale(
    table: pd.DataFrame,
    index: Any,
    row: pd.Series,
    base: pd.Series,
    mode: str,
    include_disturbed: bool,
) -> None:
    """Row ``index``'s speedups and efficiencies against ``base`` (fewer workers); none
    where either was timed by disturbed runs only, unless ``include_disturbed``: a
    disturbed time would make a speedup up, as a busy baseline does."""
    if not include_disturbed and (row["timed_disturbed"] or base["timed_disturbed"]):
        return
    n0, n = int(base["workers"]), int(row["workers"])
    table.loc[index, "speedup_tta"] = base["tta_mean"] / row["tta_mean"]
    table.loc[index, "speedup_throughput"] = row["throughput_mean"] / base["throughput_mean"]
    table.loc[index, "efficiency_tta"] = efficiency(base["tta_mean"], n0, row["tta_mean"], n, mode)
    table.loc[index, "efficiency_step"] = efficiency(
        base["step_time_mean"], n0, row["step_time_mean"], n, mode
    )
