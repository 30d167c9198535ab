"""Rich renderings for the terminal: task list, live progress, run summary, stored runs."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
from rich.table import Table
from rich.text import Text

from dmlbench.optim.build import describe_optimizer
from dmlbench.report.formats import (
    flops,
    fmt,
    human_bytes,
    microseconds,
    money,
    percent,
    plural,
    seconds,
)
from dmlbench.results.records import CommRun, RunRecord
from dmlbench.results.schema import PHASES
from dmlbench.spec.recipe import Schedule
from dmlbench.tasks import TaskDefinition

AUGMENTATION = "pad 4 + random 32×32 crop, horizontal flip"


def describe_schedule(schedule: Schedule) -> str:
    """The schedule in words, as it says itself (one description for the terminal, the
    docs and the report)."""
    return schedule.describe()


def tasks_table(tasks: list[TaskDefinition]) -> Table:
    table = Table(title="dmlbench tasks", title_justify="left", show_lines=True, expand=True)
    table.add_column("task", no_wrap=True)
    table.add_column("data · model · goal", ratio=2)
    table.add_column("reference recipe", ratio=3)
    for task in tasks:
        recipe = task.recipe
        options = ", ".join(f"{k}={v}" for k, v in recipe.model.options.items())
        opt = recipe.optimizer
        lines = [
            f"local batch b={recipe.local_batch}, at most {recipe.max_epochs:g} epochs",
            describe_schedule(recipe.schedule),
            describe_optimizer(opt) + (f", L2 {recipe.l2:g} in loss" if recipe.l2 else ""),
        ]
        if recipe.augment:
            lines.append(f"augmentation: {AUGMENTATION}")
        if recipe.time_budget_s:
            lines.append(f"accuracy-after-time budget {seconds(recipe.time_budget_s, unit=True)}")
        for key, values in task.free_choices.items():
            lines.append(f"free choice: {key.rpartition('.')[2]} in {', '.join(map(str, values))}")
        name = escape(task.name) + ("\n[dim](for tests)[/dim]" if task.builtin_for_tests else "")
        model = f"{recipe.model.name} ({options})" if options else recipe.model.name
        table.add_row(
            name,
            escape(f"{task.dataset}\n{model}\ngoal: {percent(recipe.target)} {task.metric}"),
            escape("\n".join(lines)),
        )
    return table


class RunClock(ProgressColumn):
    """Elapsed time that keeps running after the last step (rich's own column stops when
    the bar is full, though the final evaluation still runs); frozen at ``run_stop``."""

    def render(self, task: Task) -> Text:
        elapsed = int(task.elapsed or 0)
        return Text(
            f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}",
            style="progress.elapsed",
        )


class RunProgress:
    """A progress bar fed with the run's events as rank 0 logs them. Its clock starts
    with the run's (after start-up) and stops at the run's end, so it shows the time the
    summary reports."""

    def __init__(self, console: Console, title: str) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[steps]}"),  # done/limit: a short run moves here too
            TextColumn("{task.fields[status]}"),
            RunClock(),
            console=console,
            transient=False,
        )
        self.bar = self.progress.add_task(
            title, total=None, status="preparing data, starting workers", steps=""
        )
        self.best: float | None = None
        self.limit: int | None = None

    def _steps(self, done: int, limit: int | None = None) -> None:
        self.limit = limit or self.limit
        steps = f"{done:,}/{self.limit:,} steps" if self.limit else ""
        self.progress.update(self.bar, completed=done, total=self.limit, steps=steps)

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            key, meta = event["key"], event["metadata"]
            if key == "init_start":
                self.progress.update(self.bar, status="loading data")
            elif key == "run_start":  # the run's clock starts: the bar's too, so they agree
                self.progress.reset(self.bar, total=meta["step_limit"], status="training", steps="")
                self._steps(0, meta["step_limit"])
            elif key == "train_progress":
                self._steps(event["value"])
            elif key == "epoch_stop":
                self._steps(meta["step"])
            elif key == "eval_accuracy":
                self.best = event["value"] if self.best is None else max(self.best, event["value"])
                self.progress.update(
                    self.bar,
                    status=f"epoch {meta['epoch_num']:g}: {percent(event['value'])} "
                    f"(best {percent(self.best)})",
                )
            elif key == "run_stop":
                self._steps(meta["steps"], meta["steps"])
                self.progress.stop_task(self.bar)


REASONS = {
    "target_reached": "target reached",
    "time_budget": "time budget spent",
    "max_epochs": "max epochs reached",
    "max_steps": "max steps reached",
}


def run_summary(run: RunRecord) -> Table:
    """Summary of one stored run (a record of ``ResultsStore.runs``)."""
    summary = run.summary
    nodes = summary.get("nodes") or 1
    layout = f" ({nodes} nodes × {summary.get('nproc_per_node')})" if nodes > 1 else ""
    title = escape(
        f"{run.task} · {plural(run.workers, 'worker')}{layout} · "
        f"{run.division} division · run {run.run_id}"
    )
    table = Table(title=title, title_justify="left", show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    status = run.status
    reason = REASONS.get(run.stop_reason or "", run.stop_reason or "")
    colour = STATUS_STYLE.get(status, "yellow")
    table.add_row("status", f"[{colour}]{status}[/{colour}]" + (f" ({reason})" if reason else ""))
    if run.error:
        table.add_row("error", escape(run.error))
    target = run.target
    tta = run.time_to_accuracy_s
    if tta is not None:
        table.add_row(
            f"time to {percent(target)}",
            f"{seconds(tta, unit=True)} wall-clock, evaluation included "
            f"({seconds(run.time_to_accuracy_compute_s, unit=True)} without evaluation)",
        )
    else:
        table.add_row(f"time to {percent(target)}", "not reached")
    if run.evals:
        best = max(run.evals, key=lambda e: e.metric)
        table.add_row("best accuracy", f"{percent(best.metric)} at epoch {best.epoch:g}")
    if run.epochs is not None:
        table.add_row(
            "trained",
            f"{run.epochs:.2f} epochs, {run.steps or 0:,} steps, "
            f"{run.samples or 0:,} samples in {seconds(run.elapsed_s, unit=True)}"
            + time_split(summary),
        )
    if summary.get("engine") == "dask" and summary.get("throughput"):
        per_update = (run.elapsed_s or 0) - (summary.get("eval_s") or 0)
        workers = plural(summary.get("most_workers") or 0, "worker")
        table.add_row(
            "throughput",
            f"{summary['throughput']:,.0f} samples/s, "
            f"{1000 * per_update / max(run.steps or 1, 1):.2f} ms per update on average "
            f"(Dask, {run.exchange.removeprefix('dask-')} engine: batch {run.global_batch} → "
            f"{summary.get('largest_batch')}, up to {workers})",
        )
    elif summary.get("throughput"):
        table.add_row(
            "throughput",
            f"{summary['throughput']:,.0f} samples/s, {1000 * summary['step_time_s']:.2f} ms "
            f"per step (global batch {run.global_batch}; first "
            f"{summary.get('warmup_steps_excluded', 0)} steps excluded as warm-up)",
        )
    hardware = hardware_text(summary)
    if hardware:
        table.add_row("hardware", hardware)
    if summary.get("init_s") is not None:
        startup = seconds(summary["init_s"], unit=True)
        table.add_row("start-up", f"{startup} data load + model build (before the clock starts)")
    if summary.get("compile_s") is not None:
        table.add_row("compilation", compilation_text(summary))
    shares = summary.get("phase_shares")
    if shares:
        cells = [
            f"{p} {percent(shares[p]['mean'])}/{percent(shares[p]['max'])}"
            for p in PHASES
            if p in shares
        ]
        note = (
            " (ddp: comm is the part not hidden behind backward)"
            if summary.get("comm_overlapped")
            else ""
        )
        table.add_row(
            f"phases mean/max over {len(summary['phases_steady'])} ranks", "  ".join(cells) + note
        )
    if summary.get("noise_scale"):
        table.add_row("noise scale", escape(noise_text(summary["noise_scale"])))
    cores = run.cores
    emulated = summary.get("emulated_nodes") or nodes == 1  # every worker on this host
    here = run.workers if emulated else summary.get("nproc_per_node") or run.workers
    if cores and here > cores:
        table.add_row(
            "[yellow]note[/yellow]",
            f"{here} workers on {cores} cores: "
            "oversubscribed, so times include workers sharing cores",
        )
    contention = summary.get("contention")
    if contention:
        table.add_row(*_contention_row(contention, run.disturbed))
    if summary.get("emulated_nodes"):
        network = run.network if run.network not in (None, "none") else "unshaped"
        table.add_row(
            "network",
            escape(
                f"{network} (emulated cluster: a namespace per node, its workers share its link)"
            ),
        )
    elif run.network and run.network != "none":
        table.add_row("network", escape(f"{run.network} (emulated: a namespace per worker)"))
        cost = _forwarder_cost(run)
        if cost:
            table.add_row("delay forwarder", cost)
    if run.deviations:
        table.add_row(
            "differs from recipe",
            escape(", ".join(f"{k}={v['actual']}" for k, v in run.deviations.items())),
        )
    table.add_row("run folder", escape(run.run_dir))
    return table


def time_split(summary: dict[str, Any]) -> str:
    """ ": training T s, evaluation E s": where the clock's time went."""
    if summary.get("train_s") is None or not summary.get("eval_s"):
        return ""
    return (
        f": training {seconds(summary['train_s'], unit=True)}, evaluation "
        f"{seconds(summary['eval_s'], unit=True)}"
    )


def compilation_text(summary: dict[str, Any]) -> str:
    """The compile time, apart from the clock, and any recompilation that was not."""
    text = f"{seconds(summary['compile_s'], unit=True)} torch.compile (before the clock starts)"
    again = summary.get("recompiles_in_clock") or 0
    if again:
        text += (
            f"; recompiled {again} time{'s' * (again > 1)} inside the clock (a new input "
            "shape?): those steps include compile time"
        )
    return text


def hardware_text(summary: dict[str, Any]) -> str:
    """The summary's hardware line: FLOPs per step, FLOP/s and utilisation per worker,
    samples/s per worker, peak memory and page faults, and the speed-ups that were on."""
    parts = []
    if summary.get("flops_per_step"):
        parts.append(f"{flops(summary['flops_per_step'])} per step per worker")
    if summary.get("flops_per_s"):
        achieved = f"{flops(summary['flops_per_s'], per_second=True)} per worker"
        if summary.get("utilisation") is not None:
            achieved += (
                f" = {percent(summary['utilisation'])} of "
                f"{flops(summary['peak_flops_per_s'], per_second=True)} "
                f"({summary.get('peak_source')})"
            )
        parts.append(achieved)
    if summary.get("samples_per_s_per_worker"):
        parts.append(f"{summary['samples_per_s_per_worker']:,.0f} samples/s per worker")
    memory = [m for m in summary.get("peak_memory_bytes") or [] if m]
    if memory:
        parts.append(f"peak memory {human_bytes(max(memory))} per worker (the most)")
    faults = summary.get("page_faults_per_step")
    if faults:
        parts.append(f"{max(faults):,.0f} page faults per step (the most)")
    on = [
        name
        for name, key in (("channels-last", "channels_last"), ("compiled", "compiled"))
        if summary.get(key)
    ]
    if str(summary.get("cpu_allocator", "")).startswith("tuned"):
        on.append("tuned allocator")
    if parts and on:
        parts.append(" and ".join(on))
    return "; ".join(parts)


def noise_text(noise: dict[str, Any]) -> str:
    """The summary's noise-scale line: B_simple, what it was measured from, and what it
    says about the batch (McCandlish et al. 2018: steps fall almost in proportion to the
    batch below B_simple; far above it, a larger batch mostly adds epochs)."""
    small, big = int(noise["small_batch"]), int(noise["big_batch"])
    source = f"over {noise['steps']:,} steps, from batches of {small} and {big}"
    if noise.get("b_simple") is None:
        return f"not resolved {source}: the gradient is smaller than its noise"
    scale = noise["b_simple"]
    if big < scale / 2:
        advice = "well below it, so a larger batch would still save steps almost in proportion"
    elif big > 2 * scale:
        advice = "well above it, so a larger batch would mostly cost more epochs"
    else:
        advice = "near it"
    return (
        f"B_simple ≈ {scale:,.0f}, the batch beyond which a larger one mostly costs "
        f"epochs ({source}); this run's batch of {big} is {advice}"
    )


def _contention_row(contention: dict[str, Any], disturbed: bool | None) -> tuple[str, str]:
    """The summary's CPU line: what the workers waited for and who else ran."""
    if disturbed:
        text = (
            f"{contention['reason']}. Its times are not the machine's: compare and "
            "report leave it out of speedup and efficiency (--include-disturbed counts "
            "it); run it again on a quiet machine"
        )
        return "[yellow]disturbed[/yellow]", escape(text)
    machines = [m for m in contention.get("machines") or [] if m.get("outside_cores") is not None]
    if contention.get("wait_share_max") is None or not machines:
        return "CPU", escape(str(contention.get("reason") or "not measured"))
    outside = max(m["outside_cores"] + (m.get("steal_cores") or 0.0) for m in machines)
    text = (
        f"workers waited for a core {percent(contention['wait_share_max'])} of the CPU time "
        f"they asked for; other processes used {outside:.2f} cores: undisturbed"
    )
    if contention.get("reason"):  # oversubscribed by its own layout
        text = str(contention["reason"])
    return "CPU", escape(text)


def _forwarder_cost(run: RunRecord) -> str | None:
    """The TUN delay forwarder's own cost, from the run folder's network.json."""
    import json
    from pathlib import Path

    path = Path(run.run_dir) / "network.json"
    try:
        stats = json.loads(path.read_text()).get("forwarder") or {}
    except (OSError, ValueError):
        return None
    if not stats.get("packets"):
        return None
    elapsed = run.elapsed_s or 0.0
    share = f", {stats['cpu_s'] / elapsed:.0%} of one core over the run" if elapsed else ""
    warn = (
        " — it shares the cores with the workers"
        if elapsed and stats["cpu_s"] / elapsed > 0.05
        else ""
    )
    return (
        f"{stats['packets']:,} packets, {stats['cpu_s']:.2f} s CPU{share}; released "
        f"{stats['late_mean_s'] * 1e6:.0f} µs late on average (max "
        f"{stats['late_max_s'] * 1e3:.1f} ms){warn}"
    )


STATUS_WORDS = {"target_not_reached": "no target"}
STATUS_STYLE = {"success": "green", "failed": "red", "interrupted": "yellow"}


def runs_table(runs: list[RunRecord]) -> Table:
    """One line per run, narrow enough for an 80-column terminal."""
    captions = []
    if any(run.division == "open" for run in runs):
        captions.append("* open division (differs from the reference recipe)")
    if any(run.disturbed for run in runs):
        captions.append(
            "† disturbed: other processes took CPU its workers asked for "
            "(dmlbench results RUN says how much)"
        )
    table = Table(
        title=f"{len(runs)} stored runs",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=0,  # the box draws one space between columns
        pad_edge=False,
        caption="\n".join(captions) or None,
        caption_justify="left",
    )
    shaped = any(_network(run) for run in runs)
    table.add_column("run", no_wrap=True, min_width=22)
    widest = max((len(run.task) + (run.division == "open") for run in runs), default=4)
    table.add_column("task", overflow="fold", min_width=min(widest, 16))  # "name*" unbroken
    table.add_column("N", justify="right", min_width=1)
    table.add_column("b/B", no_wrap=True, min_width=5)
    table.add_column("status", no_wrap=True, min_width=7)
    table.add_column("TTA", justify="right", no_wrap=True, min_width=6)
    table.add_column("best", justify="right", no_wrap=True, min_width=5)
    table.add_column("epochs", justify="right", no_wrap=True, min_width=6)
    if shaped:  # only where some run had an emulated network: a WAN run stands out
        table.add_column("network", overflow="fold", min_width=8)
    for run in runs:
        status = run.status
        style = STATUS_STYLE.get(status, "")
        word = STATUS_WORDS.get(status, status) + ("†" if run.disturbed else "")
        table.add_row(
            run.run_id,
            escape(run.task) + ("*" if run.division == "open" else ""),
            str(run.workers),
            f"{run.local_batch}/{run.global_batch}",
            f"[{style}]{word}[/{style}]" if style else word,
            seconds(run.time_to_accuracy_s, unit=True),
            percent(run.best_metric),
            fmt(run.epochs, ".1f"),
            *([escape(_network(run) or "—")] if shaped else []),
        )
    return table


def _network(run: RunRecord) -> str:
    """The emulated network's name (a profile's, or the rate given), "" when unshaped."""
    label = run.network or "none"
    return "" if label == "none" else label.split(" · ")[0]


def scaling_tables(table: Any, budget_s: float | None = None) -> list[Table]:
    """One rich table per (task, sweep) of ``analysis.scaling_table``'s rows."""
    from dmlbench.report.analysis import short_labels
    from dmlbench.report.tables import disturbed_note, scaling_columns

    tables = []
    for (task, sweep), rows in table.groupby(["task", "sweep"], sort=False):
        modes = ", ".join(sorted(set(rows["scaling"]) - {"none"}))
        over = rows[rows["oversubscribed"]]
        caption = (
            f"* oversubscribed: {', '.join(str(int(n)) for n in sorted(set(over['workers'])))}"
            f" workers on {int(over['cores'].max())} cores"
            if not over.empty
            else None
        )
        columns = scaling_columns(rows, budget_s, terminal=True)
        scaled = any(title == "speedup" for title, _ in columns)
        legend = (
            "conv: runs that reached the target; TTA mean±std over them; "
            + ("speedup and effic.: TTA/step time; " if scaled else "")
            + "comm: max over ranks"
        )
        spelt = [
            f"{short}: {label}"
            for label, short in short_labels(rows["variant"]).items()
            if short != label
        ]
        notes = [legend, *spelt, *(n for n in (caption, disturbed_note(rows)) if n)]
        rich_table = Table(
            title=escape(f"{task} · sweep {sweep}" + (f" · {modes} scaling" if modes else "")),
            title_justify="left",
            box=box.SIMPLE_HEAD,
            caption=escape("\n".join(notes)),
            caption_justify="left",
            padding=0,  # the box draws one space between columns
            pad_edge=False,
        )
        for title, fn in columns:
            widest = max(len(fn(row)) for _, row in rows.iterrows())
            rich_table.add_column(
                title,
                justify="right",
                no_wrap=True,
                min_width=widest if title == "variant" else None,
            )
        for _, row in rows.iterrows():
            rich_table.add_row(*(escape(fn(row)) for _, fn in columns))
        tables.append(rich_table)
    return tables


def comm_table(run: CommRun) -> Table:
    """One all-reduce micro-benchmark: latency and bandwidth per message size."""
    spec = run.spec
    nodes = run.nodes
    layout = f" ({nodes} nodes × {run.workers // nodes})" if nodes > 1 else ""
    table = Table(
        title=escape(
            f"{run.op} · {run.backend} · {plural(run.workers, 'worker')}{layout} · network "
            f"{run.network} · run {run.run_id}"
        ),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        caption=f"median of {spec['repeats']} timed repeats after {spec['warmup']} warm-up, "
        "each after a barrier; a repeat is `iter` back-to-back all-reduces and lasts as long "
        "as its slowest rank. busbw = algbw × 2(n−1)/n (NCCL-tests)",
        caption_justify="left",
    )
    scoped = any(row.scope for row in run.results)
    if scoped:  # an emulated cluster: across nodes, within each node, two levels
        table.add_column("scope")
    for column in ("size", "iter", "latency µs", "min µs", "max µs", "algbw MB/s", "busbw MB/s"):
        table.add_column(column, justify="right")
    for row in run.results:
        table.add_row(
            *([SCOPES.get(row.scope or "", "")] if scoped else []),
            human_bytes(row.bytes),
            str(row.iterations),
            microseconds(row.latency_s),
            microseconds(row.latency_min_s),
            microseconds(row.latency_max_s),
            f"{row.algbw / 1e6:,.2f}",
            f"{row.busbw / 1e6:,.2f}",
        )
    if run.error:
        table.add_row(
            f"[red]{run.status}[/red]",
            escape(run.error),
            "",
            "",
            "",
            "",
            "",
            *([""] if scoped else []),
        )
    return table


SCOPES = {"all": "all", "node": "node", "hierarchical": "2-level"}


def advice_table(advice: Any, price: str) -> Group:
    """`dmlbench advise` for a person: the recommendation and the runners-up in a table,
    the plan's broken guidelines, and where every number came from."""
    table = Table(
        title=escape(f"{advice.task} on {advice.network}: ranked by predicted time to target"),
        title_justify="left",
        caption=escape(f"cost at {price}; epochs and compute: where they came from below"),
        caption_justify="left",
    )
    for column in ("", "N", "b / B", "epochs", "from", "step", "compute", "comm", "TTA", "cost"):
        table.add_column(column, justify="left" if column in ("", "from", "compute") else "right")

    def row(mark: str, c: Any) -> None:
        table.add_row(
            mark,
            str(c.workers),
            f"{c.local_batch} / {c.global_batch}",
            f"{c.epochs:.1f}",
            escape(c.epochs_source.split(":")[0]),
            f"{1e3 * c.step_s:.2f} ms",
            escape(c.compute_source),
            percent(c.comm_ratio),
            seconds(c.tta_s, unit=True),
            money(c.cost),
        )

    row("best", advice.best)
    for runner_up in advice.candidates[1:5]:
        row("", runner_up)
    if advice.current is not None:
        row("yours", advice.current)
    for untried in advice.worth_measuring[:3]:
        row("measure?", untried)
    lines = [f"learning rate: {advice.learning_rate}"]
    if advice.worth_measuring:
        smallest = min(c.local_batch for c in advice.worth_measuring)
        lines.append(
            "measure? = predicted faster, but below the local batches measured, where the "
            "compute line is optimistic; not recommended until measured: `dmlbench run "
            f"{advice.task} --set recipe.local_batch={smallest}` (same --store)"
        )
    if advice.current is not None:
        lines.append("your plan breaks:" if advice.broken else "your plan breaks no guideline")
        lines += [f"  - {rule}" for rule in advice.broken]
    lines.append("from:")
    lines += [f"  {name}: {text}" for name, text in advice.sources.items()]
    return Group(table, Text("\n".join(lines)))


def prediction_table(result: dict[str, Any]) -> Table:
    """`dmlbench simulate`'s predictions, in the form the store keeps them."""
    from dmlbench.report.tables import PREDICTION_COLUMNS, calibration_text

    calibration = result["calibration"]
    table = Table(
        title=escape(
            f"{result['task']}: predicted (weak scaling, b = {calibration['local_batch']}; "
            f"{calibration_text(calibration)})"
        ),
        title_justify="left",
        caption=escape(
            "* epochs to the target assumed (--epochs, or the nearest measured global "
            f"batch's); evaluation sharded over the workers; cost at {result['price']}"
        ),
        caption_justify="left",
    )
    for title, _ in PREDICTION_COLUMNS:
        table.add_column("algo" if title == "algorithm" else title, justify="right")
    for row in result["predictions"]:
        table.add_row(*(escape(cell(row)) for _, cell in PREDICTION_COLUMNS))
    return table


def plan_table(plan: Any, stored: set[str]) -> Table:
    """A sweep's planned runs (a ``SweepPlan``); ``stored``: keys the store has."""
    from dmlbench.spec.run import deviations

    table = Table(
        title=escape(
            f"sweep {plan.sweep.name}: {plural(len(plan.runs), 'run')} "
            f"({plan.sweep.scaling} scaling)"
        ),
        title_justify="left",
        caption=f"{plan.dropped} dropped by rules, {plan.duplicates} duplicates removed; "
        "stored = already in the store",
        caption_justify="left",
    )
    for column in ("#", "run", "N", "b / B", "seed", "division", "stored"):
        table.add_column(column)
    for index, run in enumerate(plan.runs, 1):
        spec = run.spec
        table.add_row(
            str(index),
            escape(plan.describe(run)),
            str(spec.workers),
            f"{spec.local_batch} / {spec.effective_global_batch}",
            str(spec.seed),
            "open" if deviations(spec) else "closed",
            "yes" if run.key in stored else "",
        )
    return table
