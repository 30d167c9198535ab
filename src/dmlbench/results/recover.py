"""Storing a run from its folder, when the store could not take it as it ended.

A run whose store was full, broken or unreachable when it finished keeps everything in
its folder (see :mod:`dmlbench.results.rundir`); ``dmlbench results --import RUN_DIR``
calls :func:`import_run_dir` once the store can be written again. The row it makes is
the one the launcher would have made: status and error from ``outcome.json`` (or from
the event log when even that could not be written), every number from the events. A
folder with neither an outcome nor a stop in its log is a run whose launcher ended
before it did (killed, its machine lost): ``interrupted``, as the store lists it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlbench.errors import DmlbenchError, StoreError
from dmlbench.names import path_component, shorten
from dmlbench.results.events import EVENTS_FILE, events_file, read_events_counted
from dmlbench.results.records import RunSummary
from dmlbench.results.rundir import (
    COMM_RESULTS_FILE,
    OUTCOME_FILE,
    RECORD_FILE,
    SPEC_FILE,
    node_run_dirs,
    read_json,
)
from dmlbench.results.store import ResultsStore
from dmlbench.results.summary import eval_history, summarize


class AlreadyStored(StoreError):
    """The store has the folder's run completed, under the id the folder recorded."""


@dataclass(frozen=True)
class Imported:
    run_id: str
    kind: str  # "run" or "comm"
    status: str
    skipped: int = 0  # event-log lines that could not be read


ENVIRONMENT_KEYS = ("host", "cpu_model", "cores", "gpus", "torch", "git_revision")


def _environment(record: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    recorded = record.get("environment")
    if isinstance(recorded, dict) and all(k in recorded for k in ENVIRONMENT_KEYS):
        return dict(recorded)
    from dmlbench.results.environment import collect_environment

    # a folder from before run.json existed: say that this machine's facts stand in
    return {**collect_environment(), "recorded": False, "imported_from": str(run_dir)}


def _check_spec(spec: dict[str, Any], where: Path) -> None:
    """The fields the store's row is made of, checked as a spec file from outside is:
    present, of their type and within the spec's bounds; an unknown task is named."""
    from dmlbench.strict import MAX_COUNT, MAX_SEED
    from dmlbench.tasks import get_task, import_plugins

    recipe = spec.get("recipe")
    if not isinstance(recipe, dict):
        raise StoreError(f"{where} holds no recipe: it is not a complete run spec")
    counts: list[tuple[str, Any, int]] = [
        ("workers", spec.get("workers"), 4096),
        ("seed", spec.get("seed"), MAX_SEED),
        ("recipe.local_batch", recipe.get("local_batch"), MAX_COUNT),
    ]
    if "dask" in spec:
        counts.append(("global_batch", spec.get("global_batch"), MAX_COUNT))
    for key, value, most in counts:
        if type(value) is not int or not 0 <= value <= most:
            raise StoreError(
                f"{where}: {key} is {shorten(repr(value))}, not a whole number from 0 to {most:,}"
            )
    target = recipe.get("target")
    if type(target) not in (int, float):
        raise StoreError(f"{where}: recipe.target is {shorten(repr(target))}, not a number")
    for key in ("task", "exchange"):
        if not isinstance(spec.get(key), str):
            raise StoreError(f"{where}: {key} is {shorten(repr(spec.get(key)))}, not a name")
    plugins = spec.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise StoreError(f"{where}: plugins is not a list of module names")
    try:
        import_plugins(plugins)
        get_task(spec["task"])
    except DmlbenchError as error:
        raise StoreError(f"{where}: {error}") from None


def _recorded_id(record: dict[str, Any], run_dir: Path) -> str:
    """The id the run was recorded under (``run.json``'s ``run_id``), else its folder's
    name (older folders lack it): a folder copied under another name is still that run,
    and is not stored twice. A recorded id that is no safe folder name is refused."""
    recorded = record.get("run_id")
    if recorded is None:
        return run_dir.name
    if not isinstance(recorded, str):
        raise StoreError(f"{run_dir / RECORD_FILE}: its run_id is not a text")
    try:
        return path_component(recorded, f"{run_dir / RECORD_FILE}: the run_id")
    except DmlbenchError as error:
        raise StoreError(str(error)) from None


def import_run_dir(
    store: ResultsStore, run_dir: Path, *, division: Callable[[dict[str, Any]], dict[str, Any]]
) -> Imported:
    """Store the run in ``run_dir`` (a training run or a communication benchmark).
    ``division``: a spec's deviations from its recipe, for a folder from before its
    ``run.json`` recorded them (:func:`dmlbench.resolve.recorded_deviations`, from the
    layer above, which knows the registries).

    Refused in one line when the folder is no run folder, when its spec is damaged,
    when the run's launcher still holds it, or when the store already has the run
    completed. A damaged event log is imported as far as it is readable; ``skipped``
    counts the lines left out.
    """
    run_dir = run_dir.resolve()
    record = _mapping(read_json(run_dir / RECORD_FILE))
    run_id = _recorded_id(record, run_dir)
    found = store.stored_as(run_id)
    if found is not None and found.completed:
        raise AlreadyStored(
            f"run {run_id} is already in {store.path} ({found.status}); nothing to do"
        )
    stored = found.status if found is not None else None  # begun, never completed
    spec = read_json(run_dir / SPEC_FILE)
    if not isinstance(spec, dict):
        raise StoreError(f"{run_dir} holds no {SPEC_FILE}: it is not a dmlbench run folder")
    outcome = _mapping(read_json(run_dir / OUTCOME_FILE))
    if "op" in spec:
        return _import_comm(store, run_dir, run_id, spec, record, outcome, stored)
    _check_spec(spec, run_dir / SPEC_FILE)
    log = _event_log(run_dir, run_id, spec)
    events, skipped = read_events_counted(log)
    try:
        summary, evals = summarize(events), eval_history(events)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError):
        raise StoreError(
            f"the event log {log} is damaged beyond reading its summary; nothing was imported"
        ) from None
    summary = _with_known(summary, outcome.get("summary"))
    status = outcome.get("status") if isinstance(outcome.get("status"), str) else None
    status = status or (summary.status or "failed")
    error = outcome.get("error") if isinstance(outcome.get("error"), str) else None
    if not outcome and not summary.finished:  # its launcher ended before the run did
        status, error = (
            "interrupted",
            (
                "imported from its folder: its launcher ended before the run did; the event "
                "log holds what the run reached"
            ),
        )
    if stored is None:
        deviations = record["deviations"] if "deviations" in record else division(spec)
        sweep = record.get("sweep") if isinstance(record.get("sweep"), dict) else None
        try:
            environment = _environment(record, run_dir)
            store.begin(
                run_id, spec, _mapping(deviations), environment, sweep=sweep, run_dir=run_dir
            )
        except (KeyError, TypeError, ValueError, OverflowError, sqlite3.Error) as failure:
            what = f"{type(failure).__name__}: {shorten(str(failure))}"
            raise StoreError(f"cannot import {run_dir}: its run.json is damaged ({what})") from None
    else:
        store.hold(run_id, run_dir)
    try:
        store.finish(run_id, status=status, summary=summary, evals=evals, error=error)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError, sqlite3.Error):
        # the row exists: keep it, with what could not be read said in its error
        store.hold(run_id, run_dir)
        damaged = "imported from its folder: its event log holds values the store cannot take"
        store.finish(run_id, status="failed", summary=RunSummary(), evals=[], error=damaged)
        return Imported(run_id, "run", "failed", skipped)
    return Imported(run_id, "run", status, skipped)


MAX_NODES = 4096  # a spec's most workers, so its most nodes


def _event_log(run_dir: Path, run_id: str, spec: dict[str, Any]) -> Path:
    """The run's event log: in its folder, or where a multi-node run's launcher found it,
    in the folder of the node that held rank 0 (an emulated cluster's, a Slurm job's)."""
    own = events_file(run_dir)
    nodes = spec.get("nodes")
    if own.exists() or type(nodes) is not int or not 1 < nodes <= MAX_NODES:
        return own
    logs = (folder / EVENTS_FILE for folder in node_run_dirs(run_dir, run_id, nodes))
    return next((log for log in logs if log.is_file()), own)


def _with_known(summary: RunSummary, known: Any) -> RunSummary:
    """The summary with what its launcher added to the event log (``outcome.json``'s
    ``summary``: an emulated cluster's, the node that held rank 0); a damaged one is
    left out, as a damaged outcome reads as missing."""
    if not isinstance(known, dict):
        return summary
    fields = {key: value for key, value in known.items() if key in RunSummary.model_fields}
    try:
        return RunSummary.model_validate({**summary.model_dump(exclude_unset=True), **fields})
    except ValueError:  # pydantic's ValidationError is one
        return summary


def _mapping(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else empty (a damaged file reads as missing)."""
    return value if isinstance(value, dict) else {}


def _import_comm(
    store: ResultsStore,
    run_dir: Path,
    run_id: str,
    spec: dict[str, Any],
    record: dict[str, Any],
    outcome: dict[str, Any],
    stored: str | None,
) -> Imported:
    rows = read_json(run_dir / COMM_RESULTS_FILE)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        rows = []
    status = outcome.get("status") or ("success" if rows else "failed")
    error = outcome.get("error") or (None if rows else "workers exited without writing results")
    if stored is None:
        store.begin_comm(run_id, spec, _environment(record, run_dir), run_dir=run_dir)
    else:
        store.hold(run_id, run_dir)
    measured = rows if status == "success" else []
    store.finish_comm(run_id, status=status, results=measured, error=error)
    return Imported(run_id, "comm", status)
