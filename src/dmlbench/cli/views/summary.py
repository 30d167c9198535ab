"""One stored run in the terminal: its summary table and the texts it is made of."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from dmlbench.cli.views.machine import (
    compilation_text,
    contention_row,
    forwarder_cost,
    hardware_text,
)
from dmlbench.cli.views.memory import memory_text
from dmlbench.qualities import quality_of
from dmlbench.report.formats import (
    layout,
    milliseconds,
    percent,
    plural,
    seconds,
    status_words,
)
from dmlbench.results.records import RunRecord, RunSummary
from dmlbench.results.schema import PHASES
from dmlbench.spec.recipe import target_text

STATUS_WORDS = {"target_not_reached": "no target", "throughput": "throughput only"}
STATUS_STYLE = {"success": "green", "failed": "red", "interrupted": "yellow"}


REASONS = {
    "target_reached": "target reached",
    "time_budget": "time budget spent",
    "max_epochs": "max epochs reached",
    "max_steps": "max steps reached",
}


def fields_table(title: str) -> Table:
    """A run's summary: a bold name and its value a row, under ``title``."""
    table = Table(title=title, title_justify="left", show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    return table


def run_summary(run: RunRecord) -> Table:
    """Summary of one stored run (a record of ``ResultsStore.runs``)."""
    if run.external:
        return external_summary(run)
    summary = run.summary
    nodes = summary.nodes or 1
    on = layout(nodes, summary.nproc_per_node or 0)
    # a Dask fit's workers are the most it may scale to, not the ones that joined
    most = "up to " if summary.engine == "dask" else ""
    title = escape(
        f"{run.title} · {most}{plural(run.workers, 'worker')}{on} · "
        f"{run.division} division · run {run.run_id}"
    )
    table = fields_table(title)
    status = status_words(run.status)  # "target not reached (max steps reached)"
    reason = REASONS.get(run.stop_reason or "", run.stop_reason or "")
    colour = STATUS_STYLE.get(run.status, "yellow")
    table.add_row("status", f"[{colour}]{status}[/{colour}]" + (f" ({reason})" if reason else ""))
    if run.error:
        table.add_row("error", escape(run.error))
    target = target_text(run.goal, run.target)
    tta = run.time_to_accuracy_s
    if tta is not None:
        table.add_row(
            f"time to {target}",
            f"{seconds(tta, unit=True)} wall-clock, evaluation included "
            f"({seconds(run.time_to_accuracy_compute_s, unit=True)} without evaluation)",
        )
    elif status == "throughput":
        table.add_row("accuracy", "not measured: synthetic data (DLBS's throughput mode)")
    else:
        table.add_row(f"time to {target}", "not reached")
    best = run.best_eval
    if best and run.goal == "loss":
        table.add_row(
            "best loss",
            f"{best.loss:.3f} at epoch {best.epoch:g} (accuracy {percent(best.metric)})",
        )
    elif best:
        table.add_row("best accuracy", f"{percent(best.metric)} at epoch {best.epoch:g}")
    if run.epochs is not None:
        stopped_early = not (run.finished or summary.finished)  # no run_stop: how far it got
        table.add_row(
            "trained",
            f"{run.epochs:.2f} epochs, {plural(run.steps or 0, 'step')}, "
            f"{plural(run.samples or 0, 'sample')} in {seconds(run.elapsed_s, unit=True)}"
            + (" (at its last evaluation)" if stopped_early else time_split(summary)),
        )
    if summary.engine == "dask" and summary.throughput:
        per_update = (run.elapsed_s or 0) - (summary.eval_s or 0)
        workers = plural(summary.most_workers or 0, "worker")
        table.add_row(
            "throughput",
            f"{summary.throughput:,.0f} samples/s, "
            f"{1000 * per_update / max(run.steps or 1, 1):.2f} ms per update on average "
            f"(Dask, {run.exchange.removeprefix('dask-')} engine: batch {run.global_batch:,} → "
            f"{summary.largest_batch or run.global_batch:,}, up to {workers})"
            + (
                f"; {summary.worker_s:,.3g} worker-seconds asked of its cluster"
                if summary.worker_s is not None
                else ""
            ),
        )
    elif summary.throughput:
        warmup = summary.warmup_steps_excluded or 0
        excluded = f"first {plural(warmup, 'step')}" if warmup else "no step"
        table.add_row(
            "throughput",
            f"{summary.throughput:,.0f} samples/s, {milliseconds(summary.step_time_s)} ms "
            f"per step (global batch {run.global_batch:,}; {excluded} excluded as warm-up)",
        )
    hardware = hardware_text(summary)
    if hardware:
        table.add_row("hardware", hardware)
    memory = memory_text(run)
    if memory:
        table.add_row("memory", memory)
    if summary.init_s is not None:
        startup = seconds(summary.init_s, unit=True)
        what = (
            "Dask workers started, data sent, model built on them"
            if summary.engine == "dask"
            else "data load + model build"
        )
        table.add_row("start-up", f"{startup} {what} (before the clock starts)")
    if summary.compile_s is not None:
        table.add_row("compilation", compilation_text(summary))
    shares = summary.phase_shares
    if shares:
        cells = [
            f"{p} {percent(shares[p]['mean'])}/{percent(shares[p]['max'])}"
            for p in PHASES
            if p in shares
        ]
        note = ""
        if summary.comm_overlapped:
            exchange = run.exchange
            if exchange != "fsdp":
                note = f" ({exchange}: comm is the part not hidden behind backward)"
            elif str(summary.device or "cpu").startswith("cpu") and summary.bytes_per_step:
                # timed where its bytes are counted (older runs: neither)
                note = f" ({exchange}: comm is its gathers and reduce-scatters, which block a CPU)"
            else:
                note = (
                    f" ({exchange}: its gathers and reduce-scatters are inside forward and "
                    "backward; comm is the stop vote)"
                )
        table.add_row(
            f"phases mean/max over {plural(len(summary.phases_steady or []), 'rank')}",
            "  ".join(cells) + note,
        )
    if noise := summary.noise_scale:
        table.add_row("noise scale", escape(noise_text(noise)))
    if run.oversubscribed:
        table.add_row(
            "[yellow]note[/yellow]",
            f"{run.workers_per_host} workers on {run.cores} cores: "
            "oversubscribed, so times include workers sharing cores",
        )
    fit_notes = summary.notes or []  # a Dask fit's: a lost worker, workers that never joined
    for message in fit_notes[:3]:
        table.add_row("[yellow]note[/yellow]", escape(message))
    if len(fit_notes) > 3:
        table.add_row("", f"and {len(fit_notes) - 3} more (`dmlbench results RUN --json`)")
    contention = summary.contention
    if contention:
        table.add_row(*contention_row(contention, run.disturbed))
    if summary.emulated_nodes:
        network = run.network if run.network not in (None, "none") else "unshaped"
        table.add_row(
            "network",
            escape(
                f"{network} (emulated cluster: a namespace per node, its workers share its link)"
            ),
        )
    elif run.network and run.network != "none":
        table.add_row("network", escape(f"{run.network} (emulated: a namespace per worker)"))
        cost = forwarder_cost(run)
        if cost:
            table.add_row("delay forwarder", cost)
    if run.deviations:
        table.add_row("differs from recipe", deviations_text(run.deviations))
    table.add_row("run folder", escape(run.run_dir))
    return table


def deviations_text(deviations: dict[str, Any]) -> str:
    """What a spec changes of its recipe: ``key=value, ...`` (escaped)."""
    return escape(", ".join(f"{key}={v['actual']}" for key, v in deviations.items()))


def time_split(summary: RunSummary) -> str:
    """ ": training T s, evaluation E s": where the clock's time went."""
    if summary.train_s is None or not summary.eval_s:
        return ""
    return (
        f": training {seconds(summary.train_s, unit=True)}, evaluation "
        f"{seconds(summary.eval_s, unit=True)}"
    )


def noise_text(noise: dict[str, Any]) -> str:
    """The summary's noise-scale line: B_simple, what it was measured from, and what it
    says about the batch (McCandlish et al. 2018: steps fall almost in proportion to the
    batch below B_simple; far above it, a larger batch mostly adds epochs)."""
    from dmlbench.noise import MIN_ADVICE_STEPS

    small, big = int(noise["small_batch"]), int(noise["big_batch"])
    source = f"over {plural(noise['steps'], 'step')}, from batches of {small} and {big}"
    if noise.get("b_simple") is None:
        return f"not resolved {source}: the gradient is smaller than its noise"
    scale = noise["b_simple"]
    band = noise.get("band")
    within = f" (95% band {band[0]:,.0f}–{band[1]:,.0f})" if band else ""
    if noise["steps"] < MIN_ADVICE_STEPS:
        return (
            f"B_simple ≈ {scale:,.0f} {source}: too few steps to advise a batch on "
            f"(dmlbench does from {MIN_ADVICE_STEPS})"
        )
    if band and band[0] <= big <= band[1]:
        advice = "within the band: near it"
    elif big < scale / 2:
        advice = "well below it, so a larger batch would still save steps almost in proportion"
    elif big > 2 * scale:
        advice = "well above it, so a larger batch would mostly cost more epochs"
    else:
        advice = "near it"
    return (
        f"B_simple ≈ {scale:,.0f}{within}, the batch beyond which a larger one mostly "
        f"costs epochs ({source}); this run's batch of {big} is {advice}"
    )


def external_summary(run: RunRecord) -> Table:
    """An imported run (an MLPerf log): where it comes from and MLPerf's scoring of it."""
    origin, summary = run.origin or {}, run.summary
    mlperf = summary.mlperf or {}
    title = escape(
        f"{run.task} · {plural(run.workers, 'device')} ({plural(run.nodes, 'node')} × "
        f"{summary.nproc_per_node}) · {run.division} division · run {run.run_id}"
    )
    table = fields_table(title)
    table.add_row(
        "from",
        escape(
            f"MLPerf Training {origin.get('round') or '(round unknown)'}, "
            f"{origin.get('submitter')}, "
            f"{_system(origin)}; imported, read-only"
        ),
    )
    where = [origin.get("repository"), origin.get("path")]
    table.add_row("log", escape(" ".join(str(part) for part in where if part)))
    table.add_row("commit", escape(str(origin.get("commit") or "unknown")))
    table.add_row("devices", escape(f"{run.nodes} × {summary.nproc_per_node} {summary.device}"))
    colour = STATUS_STYLE.get(run.status, "yellow")
    table.add_row(
        "status", f"[{colour}]{run.status}[/{colour}] (MLPerf: {escape(str(mlperf.get('status')))})"
    )
    quality = quality_of(run.task)
    target = quality.text(run.target) if run.target is not None else "the target"
    table.add_row(
        f"time to {target}",
        f"{seconds(run.time_to_accuracy_s, unit=True)} (run_start to run_stop)"
        if run.time_to_accuracy_s is not None
        else f"not reached in {seconds(run.elapsed_s, unit=True)}",
    )
    table.add_row("global batch", f"{run.global_batch:,} ({run.local_batch:,} a device)")
    if mlperf.get("epochs_to_converge") is not None:
        table.add_row("epochs", f"{mlperf['epochs_to_converge']:g}")
    if mlperf.get("samples_to_converge") is not None:
        table.add_row("samples", f"{mlperf['samples_to_converge']:,}")
    if run.throughput:
        table.add_row(
            "throughput",
            f"{run.throughput:,.0f} samples/s, evaluation excluded where the log times it",
        )
    if best := run.best_eval:
        table.add_row("evaluations", f"{len(run.evals)}, best {quality.text(best.metric)}")
    return table


def _system(origin: dict[str, Any]) -> str:
    """``DGX A100 (NVIDIA DGX A100)``: the system, and the platform its logs name where
    they name one (a log may keep the reference code's placeholder)."""
    system, platform = origin.get("system"), origin.get("platform")
    return f"{system} ({platform})" if platform and platform != system else str(system)
