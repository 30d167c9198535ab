"""Memory in what the CLI prints: a run's measured against predicted memory, and
`dmlbench advise --memory-per-worker`."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.text import Text

from dmlbench.cli.views import figures_table
from dmlbench.perfmodel.memory import MemoryAccount, predicted_bytes
from dmlbench.report.formats import human_bytes, plural, seconds
from dmlbench.results.records import RunRecord

# how a run's cpu_allocator record starts when its allocator kept freed memory
KEEPS = ("jemalloc", "tuned")

# Measured memory more than this share above the prediction, with an allocator that keeps
# what is freed, is said to include its cache (it keeps a step's freed blocks); as far
# below, to have reused memory freed before the trainer started.
CACHE_NOTED = 0.15


def memory_text(run: RunRecord) -> str:
    """Measured (peak less start, the most of any worker) against predicted memory."""
    summary = run.summary
    account, measured = summary.memory_account, run.measured_memory
    if not account or measured is None:
        return ""
    parts = predicted_bytes(
        MemoryAccount.from_summary(account),
        run.exchange,
        run.workers,
        run.spec.get("exchange_options"),
    )
    records = int(account.get("flight_records") or 0)  # torch's, counted in the runtime
    on_cpu = not str(summary.device or "cpu").startswith("cuda")  # a GPU's peak: allocated
    recorded = f" with {records:,} flight records" if records and on_cpu else ""
    shares = ", ".join(
        f"{name.replace('_', ' ')} {human_bytes(size)}" + (recorded if name == "runtime" else "")
        for name, size in parts.items()
        if name not in ("total", "other", "at") and size
    )
    moment = "at the start of backward" if parts["at"] else "in the optimizer's step"
    state = summary.optimizer_state_bytes or []
    text = (
        f"{human_bytes(measured)} per worker in training steps (peak less start, the most); "
        f"predicted {human_bytes(parts['total'])} {moment}: {shares}"
    )
    if state:
        text += f"; optimizer state held {human_bytes(max(state))} per worker"
    over = measured - parts["total"]
    allocator = str(summary.cpu_allocator or "")
    if not (on_cpu and allocator.startswith(KEEPS)) or abs(over) <= CACHE_NOTED * parts["total"]:
        return text
    kept = allocator.split()[0]
    if over > 0:
        text += (
            f". The {human_bytes(over)} above the prediction include freed memory the "
            f"allocator ({kept}) keeps for the next step (docs/memory.md)"
        )
    else:  # the steps took memory freed before the start, which counts in the start
        text += (
            f". The {human_bytes(-over)} below the prediction are memory the allocator "
            f"({kept}) kept from before the trainer started (loading the data, building the "
            "model) and the steps reused (docs/memory.md)"
        )
    return text + "; cpu_allocator=returning measures without it"


def memory_advice_table(advice: Any) -> Group:
    """`dmlbench advise --memory-per-worker`: each strategy's predicted memory against
    the budget, its measured step time, and the choice."""
    # a strategy's exchange options under the table: in its cell, at 80 columns,
    # "(reshard_after_forward=false)" folded mid-word
    options = {
        fit.name: ", ".join(f"{k}={v}".lower() for k, v in fit.options.items())
        for fit in advice.fits
        if fit.options
    }
    table = figures_table(
        escape(
            f"{advice.task}: {plural(advice.workers, 'worker')} × local batch "
            f"{advice.local_batch}, "
            f"{human_bytes(advice.budget)} a worker"
        ),
        escape("\n".join(f"{name}: exchange_options {said}" for name, said in options.items()))
        or None,
    )
    columns = ("strategy", "exchange", "predicted", "measured", "fits", "step (measured)")
    for column in columns:
        text = column in ("strategy", "exchange")
        table.add_column(column, justify="left" if text else "right", overflow="fold")
    for fit in advice.fits:
        runs = plural(fit.runs, "run")
        step = f"{seconds(fit.step_s, unit=True)} ({runs})" if fit.step_s else "—"
        table.add_row(
            fit.name,
            escape(fit.exchange),
            human_bytes(fit.predicted["total"]),
            human_bytes(fit.measured)
            if fit.measured is not None
            else (f"— (+{human_bytes(fit.allowance)})" if fit.allowance else "—"),
            "yes" if fit.fits else "[red]no[/red]",
            step,
        )
    choice = advice.choice
    ddp = advice.fits[0]
    if choice is None:
        verdict = (
            "No strategy fits: checkpoint activations (the model's checkpoint_activations), "
            "take a smaller local batch, or add workers (sharded state shrinks with them)."
        )
    elif choice is ddp:
        verdict = "The model fits a worker: plain data parallelism (ddp)."
    else:
        cost = ""
        if choice.step_s and ddp.step_s:
            cost = f", {choice.step_s / ddp.step_s:.2f}× DDP's measured step time"
        verdict = (
            f"DDP needs {human_bytes(ddp.needs)}: shard with {choice.name} "
            f"(--exchange {choice.exchange}"
            + (" --set 'exchange_options={reshard_after_forward: false}'" if choice.options else "")
            + f"){cost}."
        )
    a = advice.account
    source = Text(
        f"Predicted from run {advice.source}'s accounting: parameters {human_bytes(a.parameters)}, "
        f"gradients {human_bytes(a.gradients)}, optimizer state {human_bytes(a.optimizer_state)} "
        f"(+{human_bytes(a.optimizer_temporaries)} in its step), activations "
        f"{human_bytes(a.activations)} and output {human_bytes(a.outputs)} (backward starts "
        f"with two gradients its size) at local batch {advice.local_batch}"
        + (", and a CPU worker's own runtime, measured by exchange" if a.runtime else "")
        + "; see "
        "docs/memory.md for the formulas. Measured memory (peak less start, the most of a "
        "run's workers) and step times: the task's stored runs at this worker count and "
        "batch; a strategy fits when the larger of predicted and measured does."
        + (
            f" One no run measured here is judged at its prediction +{human_bytes(allowance)}, "
            "the most a measured one exceeded its own (the allocator's cache is in a "
            "measurement): run it once to measure it."
            if (allowance := max(f.allowance for f in advice.fits))
            else ""
        )
    )
    return Group(table, Text(verdict), source)
