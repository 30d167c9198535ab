"""Which stored runs a command reads: ``--sweep`` and ``--task``, each one name,
several (repeated, or ``a,b``) or none, and the runs they select, refused in one line
where a name selects none."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dmlbench.cli.options import open_store
from dmlbench.errors import DmlbenchError
from dmlbench.names import comma_list
from dmlbench.results.records import SINGLE_RUNS, RunRecord

if TYPE_CHECKING:
    from dmlbench.results import ResultsStore

SweepFilter = Annotated[
    list[str] | None, typer.Option(help="only this sweep's runs (several: repeat it, or a,b)")
]
TaskFilter = Annotated[
    list[str] | None, typer.Option(help="only this task's runs (several: repeat it, or a,b)")
]
MAX_FILTER_NAMES = 100


def filter_names(given: list[str] | None, option: str) -> tuple[str, ...] | None:
    """The sweeps or tasks a repeated, comma-separated filter names (None: no filter)."""
    if not given:
        return None
    names = tuple(dict.fromkeys(name for text in given for name in comma_list(text)))
    if not names:
        raise DmlbenchError(f"{option}: name one, e.g. {option} digits-mlp")
    if len(names) > MAX_FILTER_NAMES:
        raise DmlbenchError(f"{option}: {len(names):,} names; at most {MAX_FILTER_NAMES}")
    return names


def selected_runs(
    store: Path,
    sweep: Sequence[str] | None,
    task: Sequence[str] | None,
    opened: ResultsStore | None = None,
) -> list[RunRecord]:
    """The stored runs of some sweeps and/or tasks; refused in one line where one of
    them has none (a misspelt one beside another is not left out unsaid)."""
    opened = opened or open_store(store, existing=True)
    runs = opened.runs(sweep=sweep, task=task)
    if not runs:
        raise DmlbenchError(f"no stored runs in {store}{opened.missed(sweep, task)}")
    sweeps, tasks = unmatched(runs, sweep, task)
    if sweeps or tasks:
        raise DmlbenchError(f"no stored runs in {store}{opened.missed(sweeps, tasks)}")
    return list(runs)


def unmatched(
    runs: Sequence[RunRecord], sweep: Sequence[str] | None, task: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """The sweeps and tasks a filter named that none of ``runs`` is of."""
    sweeps = {run.sweep or SINGLE_RUNS for run in runs}
    tasks = {run.task for run in runs}
    return [s for s in sweep or () if s not in sweeps], [t for t in task or () if t not in tasks]
