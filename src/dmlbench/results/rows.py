"""What the store writes: each table's row as ``{column: value}``, built from a run's
spec, environment, summary and evaluations, and the two statements that write rows; and
what it reads back: a row as its typed record (:func:`read_run`, :func:`read_comm_run`).
:class:`~dmlbench.results.store.ResultsStore` decides when; this module decides what.

Column names come from this module, never from outside data; values always travel as
SQL parameters.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dmlbench.results.records import (
    CommResult,
    CommRun,
    Evaluation,
    PhaseTotal,
    RunRecord,
    RunSummary,
)

Row = Mapping[str, Any]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def insert(db: sqlite3.Connection, table: str, rows: Sequence[Row]) -> None:
    """Insert rows that all have the columns of the first."""
    if not rows:
        return
    columns = list(rows[0])
    names = ", ".join(columns)
    marks = ", ".join(f":{column}" for column in columns)
    db.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)


def update(db: sqlite3.Connection, table: str, run_id: str, row: Row) -> None:
    """Set a stored run's columns."""
    assignments = ", ".join(f"{column}=:{column}" for column in row)
    db.execute(f"UPDATE {table} SET {assignments} WHERE run_id=:run_id", {**row, "run_id": run_id})


def network_label(spec: Mapping[str, Any]) -> str:
    from dmlbench.netem.profiles import NetworkSpec

    network = NetworkSpec.model_validate(spec.get("network") or {})
    return network.label()


def _machine(environment: Mapping[str, Any]) -> dict[str, Any]:
    """The columns that say where a run ran."""
    return {
        "host": environment.get("host"),
        "cpu_model": environment.get("cpu_model"),
        "cores": environment.get("cores"),
    }


def _recipe(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The columns a run row takes from its spec as they are."""
    recipe = spec["recipe"]
    return {
        "task": spec["task"],
        "workers": spec["workers"],
        "local_batch": recipe["local_batch"],
        "seed": spec["seed"],
        "exchange": spec["exchange"],
        "target": recipe.get("target"),
        "spec_json": json.dumps(spec),
    }


def begun_run(
    run_id: str,
    spec: Mapping[str, Any],
    deviations: Mapping[str, Any],
    environment: Mapping[str, Any],
    sweep: Mapping[str, Any] | None,
    run_dir: Path,
) -> dict[str, Any]:
    """A run as it starts: ``running``, launched by this process."""
    tag = sweep or {}
    # a Dask fit's batch is its schedule's first, not a worker's share × workers
    local_batch = spec["recipe"]["local_batch"]
    global_batch = spec["global_batch"] if "dask" in spec else local_batch * spec["workers"]
    return {
        "run_id": run_id,
        "status": "running",
        "division": "open" if deviations else "closed",
        "created_at": now_iso(),
        "global_batch": global_batch,
        **_recipe(spec),
        **_machine(environment),
        "gpus": json.dumps(environment["gpus"]),
        "torch_version": environment["torch"],
        "git_revision": environment["git_revision"],
        "deviations_json": json.dumps(deviations),
        "environment_json": json.dumps(environment),
        "run_dir": str(run_dir),
        "launcher_pid": os.getpid(),
        "sweep": tag.get("name"),
        "scaling": tag.get("scaling"),
        "repeat": tag.get("repeat"),
        "run_key": tag.get("key"),
        "point_json": json.dumps(tag["point"], default=str) if "point" in tag else None,
        "network": network_label(spec),
    }


def _outcome(summary: RunSummary) -> dict[str, Any]:
    """The columns a finished run takes from its summary."""
    return {
        "stop_reason": summary.stop_reason,
        "finished_at": now_iso(),
        "best_metric": summary.best_metric,
        "time_to_accuracy_s": summary.time_to_accuracy_s,
        "epochs": summary.epochs,
        "samples": summary.samples,
        "elapsed_s": summary.elapsed_s,
        "throughput": summary.throughput,
        "summary_json": summary.model_dump_json(exclude_unset=True),
    }


def completed_run(status: str, summary: RunSummary, error: str | None) -> dict[str, Any]:
    """What a run's row gains when it ends."""
    return {
        "status": status,
        **_outcome(summary),
        "time_to_accuracy_compute_s": summary.time_to_accuracy_compute_s,
        "steps": summary.steps,
        "error": error,
        "disturbed": (summary.contention or {}).get("disturbed"),
    }


def external_run(
    run_id: str,
    spec: Mapping[str, Any],
    environment: Mapping[str, Any],
    summary: RunSummary,
    origin: Mapping[str, Any],
    started: str | None = None,
) -> dict[str, Any]:
    """A finished run that ran elsewhere (a published MLPerf log): no folder here; dated
    when it ``started`` where its log says, else when it was imported."""
    return {
        "run_id": run_id,
        "status": summary.status,
        "division": str(origin.get("division") or "closed"),
        "created_at": started or now_iso(),
        **_recipe(spec),
        "global_batch": summary.global_batch,
        **_outcome(summary),
        **_machine(environment),
        "gpus": json.dumps(environment.get("gpus") or []),
        "deviations_json": json.dumps({}),
        "environment_json": json.dumps(environment),
        "run_dir": f"external:{origin.get('path') or ''}",
        "network": environment.get("platform"),
        "origin_json": json.dumps(origin),
    }


def evaluations(run_id: str, evals: Sequence[Evaluation]) -> list[dict[str, Any]]:
    return [{"run_id": run_id, **asdict(e)} for e in evals]


def phase_totals(run_id: str, summary: RunSummary) -> list[dict[str, Any]]:
    """Each rank's seconds per phase, whole run and steady state."""
    phases = summary.phases or []
    steady = summary.phases_steady or [{} for _ in phases]
    return [
        {
            "run_id": run_id,
            "rank": rank,
            "phase": phase,
            "seconds": seconds,
            "steady_seconds": steady[rank].get(phase),
        }
        for rank, row in enumerate(phases)
        for phase, seconds in row.items()
    ]


def begun_comm(
    run_id: str, spec: Mapping[str, Any], environment: Mapping[str, Any], run_dir: Path
) -> dict[str, Any]:
    """A communication micro-benchmark as it starts."""
    return {
        "run_id": run_id,
        "op": spec["op"],
        "backend": spec["backend"],
        "workers": spec["workers"],
        "network": network_label(spec),
        "status": "running",
        "created_at": now_iso(),
        **_machine(environment),
        "torch_version": environment["torch"],
        "git_revision": environment["git_revision"],
        "spec_json": json.dumps(spec),
        "environment_json": json.dumps(environment),
        "run_dir": str(run_dir),
        "launcher_pid": os.getpid(),
    }


def comm_results(run_id: str, results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A micro-benchmark's measurements, one row a message size (and scope)."""
    known = {f.name for f in fields(CommResult)}
    measured = [{key: value for key, value in r.items() if key in known} for r in results]
    return [{"run_id": run_id, **asdict(CommResult(**{"iterations": 1, **m}))} for m in measured]


def without_run_id(row: sqlite3.Row) -> dict[str, Any]:
    return {key: value for key, value in dict(row).items() if key != "run_id"}


_JSON_COLUMNS = (
    "spec_json",
    "deviations_json",
    "environment_json",
    "summary_json",
    "point_json",
    "origin_json",
)


def read_run(db: sqlite3.Connection, row: sqlite3.Row, abandoned: str | None) -> RunRecord:
    """A ``runs`` row as its record, with its evaluations and phase totals; ``abandoned``:
    the error of a run whose launcher died, which reads as interrupted (None: as stored)."""
    fields = dict(row)
    for key in _JSON_COLUMNS:
        value = fields.pop(key)
        fields[key.removesuffix("_json")] = json.loads(value) if value else None
    # the store's own JSON, validated when it was made: built, not checked again
    fields["summary"] = RunSummary.model_construct(**(fields["summary"] or {}))
    fields["gpus"] = json.loads(fields["gpus"]) if fields["gpus"] else []
    if fields["disturbed"] is not None:
        fields["disturbed"] = bool(fields["disturbed"])
    if abandoned is not None:
        fields["status"], fields["error"] = "interrupted", abandoned
    run_id = (row["run_id"],)
    evals = db.execute("SELECT * FROM evals WHERE run_id=? ORDER BY step, rowid", run_id)
    phases = db.execute("SELECT * FROM phases WHERE run_id=? ORDER BY rank", run_id)
    fields["evals"] = [Evaluation(**without_run_id(r)) for r in evals]
    fields["phases"] = [PhaseTotal(**without_run_id(r)) for r in phases]
    return RunRecord(**fields)


def read_comm_run(db: sqlite3.Connection, row: sqlite3.Row, abandoned: str | None) -> CommRun:
    """A ``comm_runs`` row as its record, with its per-size results (``abandoned``: as
    :func:`read_run`'s)."""
    fields = dict(row)
    if abandoned is not None:
        fields["status"], fields["error"] = "interrupted", abandoned
    fields["spec"] = json.loads(fields.pop("spec_json"))
    fields["environment"] = json.loads(fields.pop("environment_json"))
    results = db.execute(
        "SELECT * FROM comm_results WHERE run_id=? ORDER BY rowid", (row["run_id"],)
    )
    fields["results"] = [CommResult(**without_run_id(r)) for r in results]
    return CommRun(**fields)
