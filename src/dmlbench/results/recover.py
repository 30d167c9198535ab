"""Storing a run from its folder, when the store could not take it as it ended.

A run whose store was full, broken or unreachable when it finished keeps everything in
its folder (see :mod:`dmlbench.results.rundir`); ``dmlbench results --import RUN_DIR``
calls :func:`import_run_dir` once the store can be written again. The row it makes is
the one the launcher would have made: status and error from ``outcome.json`` (or from
the event log when even that could not be written), every number from the events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlbench.errors import DmlbenchError, StoreError
from dmlbench.results.events import EVENTS_FILE, read_events
from dmlbench.results.rundir import (
    COMM_RESULTS_FILE,
    OUTCOME_FILE,
    RECORD_FILE,
    SPEC_FILE,
    read_json,
)
from dmlbench.results.store import ResultsStore
from dmlbench.results.summary import eval_history, summarize

_REPLACEABLE = ("running", "interrupted")  # rows whose launcher never completed them


@dataclass(frozen=True)
class Imported:
    run_id: str
    kind: str  # "run" or "comm"
    status: str


def _environment(record: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    if record.get("environment"):
        return dict(record["environment"])
    from dmlbench.results.environment import collect_environment

    # a folder from before run.json existed: say that this machine's facts stand in
    return {**collect_environment(), "recorded": False, "imported_from": str(run_dir)}


def _deviations(spec: dict[str, Any]) -> dict[str, Any]:
    from dmlbench.spec.run import RunSpec, deviations
    from dmlbench.tasks import import_plugins

    try:
        import_plugins(spec.get("plugins", []))
        return deviations(RunSpec.model_validate(spec))
    except (DmlbenchError, ValueError) as error:
        raise StoreError(f"cannot tell the run's division: {error}") from None


def import_run_dir(store: ResultsStore, run_dir: Path) -> Imported:
    """Store the run in ``run_dir`` (a training run or a communication benchmark).

    Refused in one line when the folder is no run folder, when the run's launcher still
    holds it, or when the store already has the run completed.
    """
    run_dir = run_dir.resolve()
    spec = read_json(run_dir / SPEC_FILE)
    if not isinstance(spec, dict):
        raise StoreError(f"{run_dir} holds no {SPEC_FILE}: it is not a dmlbench run folder")
    run_id = run_dir.name
    stored = store.status_of(run_id)
    if stored is not None and stored not in _REPLACEABLE:
        raise StoreError(f"run {run_id} is already in {store.path} ({stored}); nothing to do")
    record = read_json(run_dir / RECORD_FILE) or {}
    outcome = read_json(run_dir / OUTCOME_FILE) or {}
    if "op" in spec:
        return _import_comm(store, run_dir, run_id, spec, record, outcome, stored)
    events = read_events(run_dir / EVENTS_FILE)
    summary, evals = summarize(events), eval_history(events)
    status = outcome.get("status") or (summary.get("status") or "failed")
    error = outcome.get("error")
    if not outcome and not summary["finished"]:
        status, error = "failed", "imported from its folder: the event log ends before the run"
    if stored is None:
        deviations = record["deviations"] if "deviations" in record else _deviations(spec)
        store.begin(run_id, spec, deviations, _environment(record, run_dir),
                    sweep=record.get("sweep"), run_dir=run_dir)  # fmt: skip
    else:
        store.hold(run_id, run_dir)
    store.finish(run_id, status=status, summary=summary, evals=evals, error=error)
    return Imported(run_id, "run", status)


def _import_comm(
    store: ResultsStore,
    run_dir: Path,
    run_id: str,
    spec: dict[str, Any],
    record: dict[str, Any],
    outcome: dict[str, Any],
    stored: str | None,
) -> Imported:
    try:
        rows = json.loads((run_dir / COMM_RESULTS_FILE).read_text())
    except (OSError, ValueError):
        rows = []
    status = outcome.get("status") or ("success" if rows else "failed")
    error = outcome.get("error") or (None if rows else "workers exited without writing results")
    if stored is None:
        store.begin_comm(run_id, spec, _environment(record, run_dir), run_dir=run_dir)
    else:
        store.hold(run_id, run_dir)
    store.finish_comm(run_id, status=status, rows=rows if status == "success" else [],
                      error=error)  # fmt: skip
    return Imported(run_id, "comm", status)
