"""`dmlbench results`: stored runs as a table, one run's summary or JSON; `--import`
stores run folders a store could not take when they ended."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from dmlbench.cli.options import (
    STORE,
    JsonOption,
    StoreOption,
    console,
    err_console,
    flag,
    open_store,
    print_json,
)
from dmlbench.cli.selection import SweepFilter, TaskFilter, filter_names, selected_runs
from dmlbench.errors import DmlbenchError
from dmlbench.names import first_few
from dmlbench.report.formats import plural
from dmlbench.results.records import matching_ids


def results(
    run_id: Annotated[
        str | None, typer.Argument(help="one run: its id, or a unique start or end of it")
    ] = None,
    store: StoreOption = STORE,
    json_out: JsonOption = False,
    sweep: SweepFilter = None,
    task: TaskFilter = None,
    import_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--import",
            help="store the run in this run folder (one the store could not take when it "
            "ended, e.g. on a full disk, or whose launcher was killed); repeatable",
        ),
    ] = None,
    import_mlperf: Annotated[
        list[Path] | None,
        typer.Option(
            "--import-mlperf",
            help="store MLPerf Training's published runs: a result_N.txt, or a benchmark's, "
            "system's, submission's or repository's folder of a training_results checkout; "
            "repeatable",
        ),
    ] = None,
    upgrade: Annotated[
        bool,
        flag(
            "--upgrade",
            help="bring the store to this dmlbench's format and store runs whose launcher "
            "died as interrupted (the next run does both too; reading never writes)",
        ),
    ] = False,
) -> None:
    """Show stored runs: a table, one run's summary, or everything as JSON.

    Communication micro-benchmarks (`dmlbench bench`) are listed after training runs;
    `--json` gives training runs, or the one benchmark asked for. Runs imported from
    MLPerf's logs are marked external: they sit beside your own in `results`, `compare`
    and `report` (e.g. `compare --task mlperf/resnet --by workers`).
    """
    if upgrade:
        _upgrade(store)
        return
    if import_dirs or import_mlperf:
        if import_dirs:
            _import(store, import_dirs)
        if import_mlperf:
            _import_mlperf(store, import_mlperf)
        return
    # before the views' imports (pandas: seconds)
    results_store = open_store(store, existing=True)
    from dmlbench.cli.views.comm import comm_runs_table, comm_table
    from dmlbench.cli.views.summary import run_summary
    from dmlbench.cli.views.tables import runs_table

    sweeps, tasks = filter_names(sweep, "--sweep"), filter_names(task, "--task")
    if run_id and (sweeps or tasks):
        raise DmlbenchError("--sweep and --task choose runs to list: give them or a run id")
    if run_id:
        matches = results_store.matching_ids(run_id)
        if len(matches) != 1:
            comm = {r.run_id: r for r in results_store.comm_runs()}
            found = matching_ids(run_id, comm)
            if len(found) == 1 and (not matches or found[0] == run_id):  # or its whole id
                shown = comm[found[0]]
                print_json(shown) if json_out else console.print(comm_table(shown))
                return
            raise DmlbenchError(_unmatched(run_id, [*matches, *found], store))
        run_id = matches[0]
    if sweeps or tasks:  # none matching: the nearest the store has, in one line
        runs = selected_runs(store, sweeps, tasks, results_store)
    else:
        runs = results_store.runs(run_id)
    if json_out:
        print_json(runs)
    elif run_id:
        console.print(run_summary(runs[0]))
    else:
        comm_runs = [] if sweeps or tasks else results_store.comm_runs()
        if runs or not comm_runs:  # "0 stored runs" above micro-benchmarks said nothing
            console.print(runs_table(runs, width=console.width))
        if comm_runs:
            console.print(comm_runs_table(comm_runs))


def _unmatched(fragment: str, matches: list[str], store: Path) -> str:
    """Why no one run is shown: none matches ``fragment``, or several do (named)."""
    if not matches:
        return f"no run matches '{fragment}' in {store}: `dmlbench results` lists them"
    return (
        f"{plural(len(matches), 'run')} start or end with '{fragment}' in {store} "
        f"({first_few(matches)}): "
        "give more of one's id"
    )


def _upgrade(store: Path) -> None:
    from dmlbench.results.database import SCHEMA_VERSION

    target = open_store(store, existing=True)
    marked = target.prepare()
    if target.read_only:
        raise DmlbenchError(f"cannot upgrade {target.path}: {target.read_only}")
    console.print(
        f"{target.path}: store format {SCHEMA_VERSION}; "
        f"{plural(marked, 'abandoned run')} stored as interrupted",
        markup=False,
        soft_wrap=True,
    )


def _import(store: Path, import_dirs: list[Path]) -> None:
    """Store each run folder given, or each of a folder of run folders the store lacks."""
    from dmlbench.errors import StoreError
    from dmlbench.resolve import recorded_deviations
    from dmlbench.results.recover import AlreadyStored, import_run_dir

    target = open_store(store)
    for given in import_dirs:
        # a folder of run folders (a store's runs/): each one the store lacks, by the id
        # the folder recorded (a copy under another name is the same run)
        many = not (given / "spec.json").exists() and any(given.glob("*/spec.json"))
        folders = sorted(p.parent for p in given.glob("*/spec.json")) if many else [given]
        present = 0
        for folder in folders:
            try:
                done = import_run_dir(target, folder, division=recorded_deviations)
            except AlreadyStored:
                if not many:
                    raise
                present += 1
                continue
            except StoreError as error:
                if not many:
                    raise
                err_console.print(f"skipped {folder}: {error}", markup=False, soft_wrap=True)
                continue
            skipped = (
                f"; {plural(done.skipped, 'line')} of its event log could not be read "
                "and were skipped"
                if done.skipped
                else ""
            )
            console.print(
                f"imported {done.kind} {done.run_id} ({done.status}) from {folder}{skipped}",
                markup=False,
                soft_wrap=True,
            )
        if many and present == len(folders):
            console.print(f"{target.path} has every run in {given}", markup=False, soft_wrap=True)


def _import_mlperf(store: Path, given: list[Path]) -> None:
    """Store each MLPerf result log under the paths given; then each submission's score,
    in minutes as MLPerf publishes it. A log that cannot be scored is skipped, said once
    for the logs of a folder that share the reason."""
    from dmlbench.results.mlperf import olympic_score, read_results
    from dmlbench.results.mlperf_record import store_run

    target = open_store(store)
    reading = read_results(given)
    by_submission: dict[tuple[str, str], list[Any]] = {}
    added = present = 0
    for run in reading.runs:
        if store_run(target, run):
            added += 1
        else:
            present += 1
        by_submission.setdefault((run.origin["system"], run.benchmark), []).append(run)
    for line in reading.skipped():
        err_console.print(line, markup=False, soft_wrap=True)
    console.print(
        f"imported {plural(added, 'MLPerf run')} into {target.path}"
        + (f" ({present} already there)" if present else ""),
        markup=False,
        soft_wrap=True,
    )
    for (system, benchmark), runs in sorted(by_submission.items()):
        first = runs[0]
        done = sum(r.status == "success" for r in runs)
        score = olympic_score(runs)
        console.print(
            f"  {first.origin['submitter']} {system} {benchmark}: {first.workers} "
            f"{first.devices.model} × batch {first.global_batch:,}; {done}/{len(runs)} "
            f"converged; olympic score {'∞' if score == math.inf else f'{score / 60:,.2f} min'}",
            markup=False,
            soft_wrap=True,
        )
