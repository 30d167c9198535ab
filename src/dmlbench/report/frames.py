"""Stored runs as pandas DataFrames, a row per run (or per evaluation, rank phase or
message size): what :mod:`dmlbench.report.analysis` aggregates and ``export`` writes.

    from dmlbench.results import ResultsStore
    from dmlbench.report import frames

    runs = ResultsStore(Path("dmlbench-results")).runs()
    frame = frames.runs_frame(runs)                 # one row per run
    evals = frames.evals_frame(runs)                # one row per evaluation

A run's ``worker_s`` is what it held its workers for: all of them for its whole time,
or a Dask fit's as it scaled its cluster (recorded where it could scale it). Its cost
is that at a worker-hour's price.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd

from dmlbench.noise import advisable_noise_scale
from dmlbench.report.variants import variant_labels
from dmlbench.results.records import FINISHED, CommResult, CommRun, Evaluation, RunRecord
from dmlbench.results.schema import PHASES

GROUP = ["task", "sweep"]
# The columns a comparison may group by (`compare --by`), as a user names them
GROUPABLE = (
    "workers, layout, nodes, nproc_per_node, exchange, network, model, precision, "
    "local_batch, global_batch, variant, status, division, device, and an imported run's "
    "submitter and system"
)


def _per_step_phases(run: RunRecord) -> dict[str, float]:
    steady = run.summary.phases_steady or []
    steps = run.summary.steady_steps or 0
    if not steady or not steps:
        return {}
    return {f"{p}_s": float(np.mean([r.get(p, 0.0) for r in steady])) / steps for p in PHASES}


def runs_frame(runs: Sequence[RunRecord]) -> pd.DataFrame:
    """One row per stored run (records of ``ResultsStore.runs``)."""
    rows = []
    redone = _redone(runs)
    for run in runs:
        comm = (run.summary.phase_shares or {}).get("comm", {})
        contention = run.summary.contention or {}
        epochs, steps = run.epochs, run.steps
        step_time = run.summary.step_time_s
        per_epoch = step_time * steps / epochs if step_time and steps and epochs else None
        rows.append(
            {
                "run_id": run.run_id,
                "task": run.task,
                "title": run.title,  # the task, and its model where another than its own
                "sweep": run.sweep_title,
                "scaling": run.scaling or "none",
                "division": run.division,
                **{key: (run.origin or {}).get(key) for key in ("submitter", "system")},
                "status": run.status,
                "redone": run.run_id in redone,
                "converged": run.status == "success",
                "stop_reason": run.stop_reason,
                "workers": run.workers,
                **_layout(run),
                "local_batch": run.local_batch,
                "global_batch": run.global_batch,
                "elastic": run.elastic,
                "largest_batch": run.summary.largest_batch,
                **_worker_seconds(run),
                "seed": run.seed,
                "repeat": run.repeat,
                "exchange": run.exchange,
                "network": (run.network or "none").split(" · ")[0],
                "model": run.model,
                "precision": run.precision,
                "target": run.target,
                "goal": run.goal,
                "best_metric": run.best_metric,
                "best": run.best,  # in the goal's terms: a loss goal's lowest loss
                "tta_s": run.time_to_accuracy_s,
                "tta_compute_s": run.time_to_accuracy_compute_s,
                "elapsed_s": run.elapsed_s,
                "epochs": epochs,
                "steps": steps,
                "step_time_s": step_time,
                "epoch_time_s": per_epoch,
                "throughput": run.throughput,
                "comm_ratio_mean": comm.get("mean"),
                "comm_ratio_max": comm.get("max"),
                "bytes_per_step": run.summary.bytes_per_step,
                "noise_scale": advisable_noise_scale(run.summary.noise_scale),
                "flops_per_step": run.summary.flops_per_step,
                "flops_per_s": run.summary.flops_per_s,
                "utilisation": run.summary.utilisation,
                "samples_per_s_per_worker": run.summary.samples_per_s_per_worker,
                "peak_memory_bytes": max(run.summary.peak_memory_bytes or [math.nan]),
                "train_s": run.summary.train_s,
                "eval_s": run.summary.eval_s,
                "compile_s": run.summary.compile_s,
                "page_faults_per_step": max(run.summary.page_faults_per_step or [math.nan]),
                "cpu_allocator": run.summary.cpu_allocator,
                **_per_step_phases(run),
                "cores": run.cores,
                "oversubscribed": run.oversubscribed,
                "disturbed": run.disturbed is True,
                "cpu_wait_max": contention.get("wait_share_max"),
                "contention": contention.get("reason"),
                "cpu_model": run.cpu_model,
                "device": run.device,
                "host": run.host,
                "torch_version": run.torch_version,
                "git_revision": run.git_revision,
                "created_at": run.created_at,
                "error": run.error,
                "spec": json.dumps(run.spec, sort_keys=True),
            }
        )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    for column in [
        "tta_s",
        "tta_compute_s",
        "best_metric",
        "best",
        "elapsed_s",
        "step_time_s",
        "epoch_time_s",
        "throughput",
        "comm_ratio_mean",
        "comm_ratio_max",
        "bytes_per_step",
        "noise_scale",
        "flops_per_step",
        "flops_per_s",
        "utilisation",
        "samples_per_s_per_worker",
        "peak_memory_bytes",
        "train_s",
        "eval_s",
        "compile_s",
        "page_faults_per_step",
        "largest_batch",
        "worker_s",
        "worker_s_to_target",
    ]:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    frame["variant"] = variant_labels(frame, GROUP)
    return frame


def _redone(runs: Sequence[RunRecord]) -> set[str]:
    """The runs of a sweep's point that a later run of the same point replaced: a failed
    or interrupted one that the resumed sweep ran again (``--rerun failed``), or a
    finished one that a later one finished again (``--rerun always``). The point's result
    is the later run's; the one it replaced is no repeat (it had the same seed)."""
    tried: set[tuple[str, str]] = set()  # points with a later run
    finished: set[tuple[str, str]] = set()  # points with a later finished run
    redone = set()
    for run in reversed(sorted(runs, key=attrgetter("created_at"))):  # newest first
        if not (run.sweep and run.run_key):
            continue
        point = (run.sweep, run.run_key)
        if point in (finished if run.status in FINISHED else tried) and run.status != "running":
            redone.add(run.run_id)
        tried.add(point)
        if run.status in FINISHED:
            finished.add(point)
    return redone


def _worker_seconds(run: RunRecord) -> dict[str, float | None]:
    """What a run held its workers for, the whole run and to the target: a Dask fit's
    as it scaled its cluster (where it recorded it), any other run's all its workers
    throughout.
    A run's cost is this at a worker-hour's price."""
    held, to_target = run.summary.worker_s, run.summary.worker_s_to_target
    if held is None and run.elapsed_s is not None:
        held = run.elapsed_s * run.workers
    if to_target is None and run.time_to_accuracy_s is not None:
        to_target = run.time_to_accuracy_s * run.workers
    return {"worker_s": held, "worker_s_to_target": to_target}


def _layout(run: RunRecord) -> dict[str, Any]:
    """Nodes, workers per node and ``nodes×per_node`` of a run (1×N on one host)."""
    nodes = run.nodes
    per_node = int(run.spec.get("nproc_per_node") or run.workers // nodes)
    return {"nodes": nodes, "nproc_per_node": per_node, "layout": f"{nodes}×{per_node}"}


def _per_item(
    runs: Iterable[Any], items: str, identity: Mapping[str, Callable[[Any], Any]], kind: type
) -> pd.DataFrame:
    """One row per item of each run (an evaluation, a message size): the run's
    ``identity`` columns, then the item's fields; the columns are there without rows."""
    rows = [
        {**{column: get(run) for column, get in identity.items()}, **dataclasses.asdict(item)}
        for run in runs
        for item in getattr(run, items)
    ]
    columns = [*identity, *(f.name for f in dataclasses.fields(kind))]
    return pd.DataFrame(rows, columns=columns)


def evals_frame(runs: Sequence[RunRecord]) -> pd.DataFrame:
    """Every evaluation of every run, with the run's identifying columns."""
    identity: dict[str, Callable[[RunRecord], Any]] = {
        "run_id": attrgetter("run_id"),
        "task": attrgetter("task"),
        "sweep": attrgetter("sweep_title"),
        "workers": attrgetter("workers"),
        "seed": attrgetter("seed"),
        "goal": attrgetter("goal"),
    }
    return _per_item(runs, "evals", identity, Evaluation)


def phases_frame(runs: Sequence[RunRecord]) -> pd.DataFrame:
    """Per-rank phase totals (whole run and steady state after warm-up) of every run,
    with the node each rank ran on."""
    rows = []
    for r in runs:
        nodes = r.summary.rank_nodes or []
        for p in r.phases:
            node = nodes[p.rank] if p.rank < len(nodes) else 0
            rows.append(
                {
                    "run_id": r.run_id,
                    "task": r.task,
                    "layout": _layout(r)["layout"],
                    "sweep": r.sweep_title,
                    "workers": r.workers,
                    "node": node,
                    **dataclasses.asdict(p),
                }
            )
    columns = [
        "run_id",
        "task",
        "sweep",
        "workers",
        "layout",
        "node",
        "rank",
        "phase",
        "seconds",
        "steady_seconds",
    ]
    return pd.DataFrame(rows, columns=columns)


def comm_frame(comm_runs: Sequence[CommRun]) -> pd.DataFrame:
    """One row per (micro-benchmark run, message size), with the run's identity."""
    columns = ("run_id", "op", "backend", "workers", "nodes", "network", "status", "cores")
    identity = {c: attrgetter(c) for c in (*columns, "oversubscribed", "created_at")}
    return _per_item(comm_runs, "results", identity, CommResult)
