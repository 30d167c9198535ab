"""`dmlbench sweep`, and the sweep loop `dmlbench run` uses for its lists (worker counts,
exchanges, networks, models): plan, skip what the store has, run the rest with a bar
each, print the scaling table."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from dmlbench.cli.options import (
    STORE,
    DataDirOption,
    JsonOption,
    PluginOption,
    QuietOption,
    RerunOption,
    StoreOption,
    console,
    err_console,
    flag,
    open_store,
    print_json,
)
from dmlbench.report.formats import plural
from dmlbench.results.store import Rerun

if TYPE_CHECKING:
    from dmlbench.results.records import RunSummary


def sweep(
    file: Annotated[Path, typer.Argument(help="sweep file (YAML or TOML)")],
    plan: Annotated[
        bool, flag("--plan", "--dry-run", help="print the expanded runs, start nothing")
    ] = False,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", "-s", help="override a key in every run")
    ] = None,
    repeats: Annotated[int | None, typer.Option(min=1, help="override the file's repeats")] = None,
    rerun: RerunOption = Rerun.failed,
    plugins: PluginOption = None,
    data_dir: DataDirOption = None,
    store: StoreOption = STORE,
    json_out: JsonOption = False,
    quiet: QuietOption = True,
) -> None:
    """Run a sweep file: every combination of its axes, each stored as it finishes.

    Running it again skips what the store already has (see --rerun); Ctrl-C keeps
    every finished run.
    """
    from dmlbench.launch.slurm import SlurmJob
    from dmlbench.spec.sweep import load_sweep_file

    spec = load_sweep_file(file)
    run_sweep(
        spec,
        overrides=overrides or [],
        plugins=plugins or [],
        fields={"data_dir": str(data_dir) if data_dir else None},
        store=store,
        rerun=rerun,
        plan_only=plan,
        json_out=json_out,
        quiet=quiet,
        repeats=repeats,
        slurm=SlurmJob.from_env(),
    )


def run_sweep(
    sweep: Any,
    *,
    store: Path,
    overrides: list[str] | None = None,
    plugins: list[str] | None = None,
    fields: dict[str, Any] | None = None,
    rerun: Rerun = Rerun.failed,
    plan_only: bool = False,
    json_out: bool = False,
    quiet: bool = True,
    repeats: int | None = None,
    slurm: Any = None,
    table: bool = True,
    planned_only: bool = False,
) -> list[Any]:
    """Plan a sweep, then (unless ``plan_only``) run what the store does not have yet,
    and return the sweep's stored runs (``planned_only``: only those of this plan's
    specs, not what the sweep's name stored with other settings); ``slurm``: the Slurm
    job this runs in (its runs of several nodes use its nodes); ``table``: print the
    scaling table and exit 1 where a run failed (else the caller reads the runs)."""
    from dmlbench.sweep import pending, plan_sweep
    from dmlbench.sweep import run_sweep as run_planned

    plan = plan_sweep(
        sweep, overrides=overrides or (), plugins=plugins or (), fields=fields, repeats=repeats
    )
    results = open_store(store)
    to_run, skipped = pending(plan, results, rerun)
    if plan_only:
        _print_plan(plan, {r.key for r in skipped}, json_out)
        return []
    out = err_console if json_out else console
    kept = (  # --rerun always looks for none: "0 already in" read as if the store had none
        "all to run"
        if rerun == Rerun.always
        else f"{len(skipped)} already in {escape(str(store))}, {len(to_run)} to run"
    )
    out.print(
        f"sweep [bold]{escape(plan.sweep.name)}[/bold]: {plural(len(plan.runs), 'run')} planned, "
        f"{kept} (--rerun {rerun})"
    )
    bars = _Bars(out, plan, json_out)
    outcome = run_planned(
        plan,
        results,
        rerun=rerun,
        echo=not quiet and not json_out,
        progress=bars.start,
        on_done=bars.done,
        slurm=slurm,
    )
    bars.close()
    runs = results.runs(sweep=plan.sweep.name)
    if planned_only:
        keys = {planned.key for planned in plan.runs}
        runs = [run for run in runs if run.run_key in keys]
    if table and json_out:
        print_json(runs)
    elif table:
        from dmlbench.cli.views.tables import scaling_tables
        from dmlbench.report import analysis, frames, notes

        frame = frames.runs_frame(runs)
        for rich_table in scaling_tables(analysis.scaling_table(frame), width=console.width):
            console.print(rich_table)
        # still running: another task of a job array's
        for note in (notes.unfinished_note(frame), notes.running_note(frame)):
            if note:
                console.print(note, markup=False)
        console.print(
            f"{plural(len(outcome.finished), 'run')} done, {len(outcome.skipped)} skipped, "
            + (f"{len(outcome.elsewhere)} run by another launcher, " if outcome.elsewhere else "")
            + f"{outcome.failed} failed. Report: dmlbench report --store "
            f"{shlex.quote(str(store))} --sweep {shlex.quote(plan.sweep.name)}",
            markup=False,
            soft_wrap=True,
        )
    if outcome.interrupted:
        err_console.print(
            "interrupted: finished runs are stored; run the same command again to resume"
        )
        raise typer.Exit(130)
    if outcome.failed and table:
        raise typer.Exit(1)
    return runs


class _Bars:
    """A progress bar per run of a sweep (a title line where output is not a terminal),
    and a line for each run's end."""

    def __init__(self, out: Any, plan: Any, json_out: bool) -> None:
        self.out, self.plan, self.json_out = out, plan, json_out
        self.active: list[Any] = []

    def start(self, run: Any, index: int, total: int) -> Any:
        from dmlbench.cli.views.progress import RunProgress

        title = escape(f"[{index + 1}/{total}] {self.plan.describe(run)}")
        if self.json_out or not self.out.is_terminal:
            self.out.print(title)
            return None
        bar = RunProgress(self.out, title)
        bar.__enter__()
        self.active.append(bar)
        return bar

    def close(self) -> None:
        while self.active:
            self.active.pop().__exit__(None, None, None)

    def done(self, run: Any, result: Any, error: Exception | None) -> None:
        """A run's end: its outcome, or why it did not run (another launcher ran the
        point, as the sweep's last line counts it; an error)."""
        from dmlbench.cli.views.summary import STATUS_WORDS
        from dmlbench.errors import AlreadyClaimed

        self.close()
        out = self.out
        if isinstance(error, AlreadyClaimed):
            out.print(f"  [yellow]by another launcher: {escape(str(error))}[/yellow]")
            return
        if result is None:
            out.print(f"  [red]error[/red]: {escape(str(error))}")
            return
        colour = {"success": "green", "failed": "red"}.get(result.status, "yellow")
        tta = result.summary.time_to_accuracy_s
        detail = f"TTA {tta:.1f} s" if tta is not None else _short_of_target(result.summary)
        if result.status == "throughput":
            throughput = result.summary.throughput
            detail = f"{throughput:,.1f} samples/s" if throughput else "synthetic data"
        if result.status in ("failed", "interrupted"):
            detail = result.error or ""
        status = STATUS_WORDS.get(result.status, result.status)
        out.print(f"  [{colour}]{status}[/{colour}] {result.run_id}: {escape(detail)}")


def _short_of_target(summary: RunSummary) -> str:
    """How far a run stopped from its target: ``best 93.3%, short of the 97.0% target``
    (a loss goal's best loss is not in the summary: its target alone)."""
    from dmlbench.spec.recipe import target_text

    goal = summary.goal or "accuracy"
    target = f"the {target_text(goal, summary.target)} target"
    if goal == "loss" or summary.best_metric is None:
        return f"short of {target}"
    return f"best {summary.best_metric:.1%}, short of {target}"


def _print_plan(plan: Any, stored: set[str], json_out: bool) -> None:
    if json_out:
        print_json(plan.to_json(stored))
    else:
        from dmlbench.cli.views.tables import plan_table

        console.print(plan_table(plan, stored))
