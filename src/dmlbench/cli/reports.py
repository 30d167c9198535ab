"""`dmlbench report`, `compare` and `export`: the store's runs as tables in the terminal,
one HTML report with plots, aggregated side by side, or as CSV/Parquet files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from dmlbench.cli.options import (
    STORE,
    BudgetOption,
    IncludeDisturbedOption,
    JsonOption,
    PriceOption,
    PricesOption,
    StoreOption,
    console,
    flag,
    one_form,
    open_store,
    output_option,
)
from dmlbench.cli.selection import SweepFilter, TaskFilter, filter_names, selected_runs, unmatched
from dmlbench.errors import DmlbenchError
from dmlbench.names import comma_list
from dmlbench.report.formats import plural


def report(
    store: StoreOption = STORE,
    out: Annotated[
        Path | None,
        output_option("HTML file to write (default: STORE/report.html)", "report"),
    ] = None,
    sweep: SweepFilter = None,
    task: TaskFilter = None,
    budget: BudgetOption = None,
    price: PriceOption = None,
    prices: PricesOption = None,
    png: Annotated[
        Path | None,
        output_option(
            "also write every figure as PNG into this folder", "--png folder", folder=True
        ),
    ] = None,
    include_disturbed: IncludeDisturbedOption = False,
) -> None:
    """Scaling tables in the terminal and one self-contained HTML report with plots."""
    from dmlbench.files import check_output_file, check_output_folder

    results = open_store(store, existing=True)  # before the report's imports (pandas: seconds)
    target = out or store / "report.html"
    check_output_file(target, "report")  # before any work: --out /dev/full, --out DIR
    if png is not None:
        check_output_folder(png, "--png folder", make=False)  # made once there are runs
    import pandas as pd

    from dmlbench.cli.views.tables import scaling_tables
    from dmlbench.prices import choose_price
    from dmlbench.report import analysis
    from dmlbench.report.html import write_report

    sweeps, tasks = filter_names(sweep, "--sweep"), filter_names(task, "--task")
    runs = results.runs(sweep=sweeps, task=tasks)
    comm_runs = results.comm_runs() if not (sweeps or tasks) else []
    from dmlbench.report.predictions import load_predictions

    predictions = (
        [] if sweeps else [p for p in load_predictions(store) if not tasks or p["task"] in tasks]
    )
    if not runs and not comm_runs and not predictions:
        missed = results.missed(sweeps, tasks)
        raise DmlbenchError(f"no stored runs in {store}{missed} to report on")
    predicted = {p["task"] for p in predictions}
    lacking = unmatched(runs, sweeps, [t for t in tasks or () if t not in predicted])
    if any(lacking):  # one of several named has none: not left out unsaid
        raise DmlbenchError(f"no stored runs in {store}{results.missed(*lacking)} to report on")
    if png is not None:
        check_output_folder(png, "--png folder")  # before the report is written
    chosen = choose_price(price, prices)
    sections, pngs = write_report(
        runs,
        target,
        store=str(store),
        budget_s=budget,
        price=chosen,
        png_dir=png,
        comm_runs=comm_runs,
        predictions=predictions,
        include_disturbed=include_disturbed,
    )
    training = [s.table for s in sections if s.kind == "training" and len(s.table)]
    if training:  # the report's own tables, in the order scaling_table sorts them
        table = pd.concat(training).sort_values(
            ["task", "sweep", "variant", "workers"], kind="stable", key=analysis.in_number_order
        )
        for rich_table in scaling_tables(table, budget, console.width):
            console.print(rich_table)
    for section in sections:
        for note in section.notes:
            where = escape(f"({section.task} · {section.sweep}): {note}")
            console.print(f"[yellow]note[/yellow] {where}")
    figures = sum(len(s.figures) for s in sections)
    console.print(
        f"report: {target} ({plural(figures, 'figure')}, {plural(len(runs), 'run')}; cost at "
        f"{chosen.label})",
        markup=False,
        soft_wrap=True,  # a path, whole: it can be copied as printed
    )
    if pngs:
        images = sum(path.suffix == ".png" for path in pngs)
        keys = len(pngs) - images  # a section's key to the letters its figures name
        also = f" and {plural(keys, 'CSV key')} to their variant letters" if keys else ""
        console.print(f"{images} PNG files{also} in {png}", markup=False, soft_wrap=True)


def compare(
    by: Annotated[
        str,
        typer.Option(
            help="columns to group by, comma-separated (e.g. workers,exchange; or network, "
            "model, precision, local_batch, …)"
        ),
    ] = "workers",
    store: StoreOption = STORE,
    sweep: SweepFilter = None,
    task: TaskFilter = None,
    budget: BudgetOption = None,
    price: PriceOption = None,
    prices: PricesOption = None,
    json_out: JsonOption = False,
    csv_out: Annotated[bool, flag("--csv", help="CSV on stdout")] = False,
    include_disturbed: IncludeDisturbedOption = False,
    best_by: Annotated[
        str | None,
        typer.Option(
            help="keep only the best variant per --group: time_to_accuracy, "
            "accuracy_after_time (with --budget), best_metric, throughput or cost_to_target "
            "(a tuning protocol's pick; mlbench's: time_to_accuracy per workers)"
        ),
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="columns --best-by picks within (default: --by's)")
    ] = None,
) -> None:
    """Aggregated runs side by side: repeats as mean ± std and olympic mean, speedup,
    efficiency, comm ratio and cost."""
    # before the report's imports
    runs = selected_runs(store, filter_names(sweep, "--sweep"), filter_names(task, "--task"))
    from dmlbench.cli.views.tables import scaling_tables
    from dmlbench.prices import choose_price
    from dmlbench.report import analysis, frames, notes

    if best_by is not None and best_by not in analysis.BEST_BY:
        raise DmlbenchError(f"--best-by {best_by}: choose {', '.join(analysis.BEST_BY)}")
    if best_by == "accuracy_after_time" and budget is None:
        raise DmlbenchError("--best-by accuracy_after_time needs --budget SECONDS")
    if group is not None and best_by is None:
        raise DmlbenchError("--group picks the best within groups: give --best-by too")
    one_form(json=json_out, csv=csv_out)
    frame = frames.runs_frame(runs)
    columns = comma_list(by)
    within = comma_list(group) if group else columns
    columns += [c for c in within if c not in columns]
    unknown = [c for c in columns if c not in frame.columns]
    if unknown:
        raise DmlbenchError(f"cannot group by {', '.join(unknown)}; choose from {frames.GROUPABLE}")
    chosen = choose_price(price, prices)
    table = analysis.scaling_table(
        frame,
        by=columns,
        budget_s=budget,
        evals=frames.evals_frame(runs),
        price=chosen,
        include_disturbed=include_disturbed,
    )
    if best_by is not None and not table.empty:  # empty: every run still running
        table = analysis.best_of(table, best_by, within, include_disturbed)
        if not json_out and not csv_out:
            console.print(
                f"best variant per {', '.join(within)} by {best_by} "
                f"({analysis.best_order(table, best_by)})",
                markup=False,
            )
    if json_out:
        rows = "[]" if table.empty else table.to_json(orient="records", indent=2)
        sys.stdout.write(rows + "\n")
    elif csv_out:
        from dmlbench.report.export import to_csv

        sys.stdout.write(to_csv(table))
    else:  # the terminal's cost column, and what it leaves unpriced, where one was asked
        asked = price is not None or prices is not None
        shown = table if asked else table.drop(columns=["cost_to_target"], errors="ignore")
        grouped = () if "workers" in columns else columns
        for rich_table in scaling_tables(shown, budget, console.width, by=grouped):
            console.print(rich_table)
        for note in (
            notes.unfinished_note(frame),
            notes.running_note(frame),
            analysis.unpriced_note(table, chosen) if asked else None,
        ):
            if note:
                console.print(f"[yellow]note[/yellow] {escape(note)}")


def export(
    out: Annotated[
        Path,
        output_option("folder for runs/evals/phases files", "export folder", folder=True),
    ],
    store: StoreOption = STORE,
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--format", help="csv, parquet or csv,parquet (default: both where pyarrow is)"
        ),
    ] = None,
    sweep: SweepFilter = None,
    task: TaskFilter = None,
) -> None:
    """Write runs, evaluations, phases (and communication micro-benchmarks, unless
    filtered by sweep or task) as CSV and/or Parquet files."""
    from dmlbench.files import check_output_folder
    from dmlbench.report.export import check_formats, default_formats
    from dmlbench.report.export import export as export_tables

    chosen = check_formats(formats or default_formats())
    opened = open_store(store, existing=True)
    check_output_folder(out, "export folder", make=False)  # a file there: refused first
    sweeps, tasks = filter_names(sweep, "--sweep"), filter_names(task, "--task")
    comm = [] if sweeps or tasks else opened.comm_runs()
    runs = opened.runs() if comm else selected_runs(store, sweeps, tasks, opened)
    written = export_tables(runs, check_output_folder(out, "export folder"), chosen, comm)
    names = ", ".join(p.name for p in written)
    console.print(f"{len(written)} files in {out}: {names}", markup=False, soft_wrap=True)
