"""Turn a run's event log into its summary: the numbers a report shows.

Pure functions of the events, so every figure can be recomputed from the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dmlbench.results.contention import judge
from dmlbench.results.events import Event
from dmlbench.results.records import Evaluation, RunSummary
from dmlbench.results.schema import PHASES
from dmlbench.spec.recipe import goal_reached


def eval_history(events: Sequence[Event]) -> list[Evaluation]:
    """The run's evaluations, in the order it made them."""
    return [
        Evaluation(
            epoch=e["metadata"]["epoch_num"],
            step=e["metadata"]["step"],
            samples=e["metadata"]["samples_count"],
            elapsed_s=e["metadata"]["elapsed_s"],
            compute_elapsed_s=e["metadata"]["compute_elapsed_s"],
            metric=e["value"],
            loss=e["metadata"]["eval_loss"],
            train_metric=e["metadata"].get("train_accuracy"),
        )
        for e in events
        if e["key"] == "eval_accuracy"
    ]


def phase_shares(per_rank: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Share of step time per phase, ``{"phase": {"mean": .., "max": ..}}`` over ranks.

    The ``comm`` share is the communication ratio ``comm / (comm + compute)``.
    """
    shares: dict[str, list[float]] = {p: [] for p in PHASES}
    for rank in per_rank:
        step_time = sum(rank.get(p, 0.0) for p in PHASES)
        for phase in PHASES:
            shares[phase].append(rank.get(phase, 0.0) / step_time if step_time else 0.0)
    return {p: {"mean": sum(v) / len(v), "max": max(v)} for p, v in shares.items() if v}


def hardware_use(summary: dict[str, Any]) -> dict[str, Any]:
    """What a worker made of its hardware in the steady steps: FLOP/s achieved (its
    step's FLOPs over the step time, communication included), the share of its peak,
    and samples per second."""
    use: dict[str, Any] = {}
    workers = summary.get("world_size") or 1
    if summary.get("throughput"):
        use["samples_per_s_per_worker"] = summary["throughput"] / workers
    flops, step_time = summary.get("flops_per_step"), summary.get("step_time_s")
    if flops and step_time:
        use["flops_per_s"] = flops / step_time
        if peak := summary.get("peak_flops_per_s"):
            use["utilisation"] = use["flops_per_s"] / peak
    return use


def summarize(events: Sequence[Event]) -> RunSummary:
    """Summary of a run from its events, validated once here (the edge between the
    event log's JSON and the typed record); a run that never logged ``run_stop`` is
    partial. A value of the wrong type in a log raises ``ValueError``."""
    return RunSummary.model_validate(_summary_fields(events))


def _summary_fields(events: Sequence[Event]) -> dict[str, Any]:
    first = {e["key"]: e for e in reversed(events)}  # first occurrence of each key
    evals = eval_history(events)
    start = first.get("run_start", {}).get("metadata", {})
    stop = first.get("run_stop")
    summary: dict[str, Any] = {"finished": stop is not None, **start}
    init = first.get("init_start", {}).get("metadata", {})
    summary["nodes"] = init.get("nodes") or 1
    summary["nproc_per_node"] = init.get("nproc_per_node") or start.get("world_size")
    if init.get("hosts"):
        summary["hosts"] = init["hosts"]
    if "init_start" in first and "init_stop" in first:
        summary["init_s"] = (first["init_stop"]["time_ms"] - first["init_start"]["time_ms"]) / 1e3
    if stop is None:  # crashed or interrupted: keep what was reached, the target included
        metrics = [e.metric for e in evals]
        steps = [e["metadata"].get("step", 0) for e in events if e["key"] == "epoch_stop"]
        target = start.get("target")
        goal = start.get("goal", "accuracy")
        reached = next(
            (
                e
                for e in evals
                if target is not None and goal_reached(goal, target, e.metric, e.loss)
            ),
            None,
        )
        summary["best_metric"] = max(metrics) if metrics else None
        if evals:  # how far it got, as its last evaluation saw it (it read "0 samples in —")
            last = evals[-1]
            summary.update(
                epochs=last.epoch, steps=last.step, samples=last.samples, elapsed_s=last.elapsed_s
            )
        else:
            summary.update(epochs=None, steps=steps[-1] if steps else 0)
        summary["time_to_accuracy_s"] = reached.elapsed_s if reached else None
        summary["time_to_accuracy_compute_s"] = reached.compute_elapsed_s if reached else None
        return summary
    summary.update(stop["metadata"])
    per_node = summary.get("nproc_per_node") or 0
    if per_node and summary.get("phases"):  # torch's agents number ranks node by node
        summary["rank_nodes"] = [rank // per_node for rank in range(len(summary["phases"]))]
    steady = summary.get("phases_steady") or []
    slowest = max((sum(r.get(p, 0.0) for p in PHASES) for r in steady), default=0.0)
    if slowest > 0 and summary.get("steady_steps"):
        summary["step_time_s"] = slowest / summary["steady_steps"]
        summary["throughput"] = summary["steady_steps"] * start.get("global_batch", 0) / slowest
        summary["phase_shares"] = phase_shares(steady)
        summary.update(hardware_use(summary))
    if summary.get("elapsed_s") is not None:
        summary["train_s"] = summary["elapsed_s"] - (summary.get("eval_s") or 0.0)
    if summary.get("cpu_samples"):  # absent in logs written before contention was measured
        summary["contention"] = judge(summary["cpu_samples"])
    return summary
