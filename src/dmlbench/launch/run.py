"""One benchmark run end to end: prepare data, record, launch, summarise, store."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlbench.errors import WorkerFailed
from dmlbench.launch.local import launch_local
from dmlbench.netem.topology import NetworkError, emulated, preflight
from dmlbench.results import EVENTS_FILE, ResultsStore, read_events
from dmlbench.results.environment import collect_environment
from dmlbench.results.events import EventTail
from dmlbench.results.summary import eval_history, summarize
from dmlbench.spec import RunSpec
from dmlbench.spec.run import deviations
from dmlbench.tasks import get_task

ProgressFn = Callable[[list[dict[str, Any]]], None]


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    status: str
    summary: dict[str, Any]
    evals: list[dict[str, Any]]
    error: str | None
    run_dir: str


def new_run_id() -> str:
    """Sortable by start time and unique; task and workers are columns of their own."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def new_run_dir(store: ResultsStore, spec: dict[str, Any]) -> tuple[str, Path]:
    """A fresh run id and its folder, holding the resolved spec as ``spec.json``."""
    run_id = new_run_id()
    run_dir = store.run_dir(run_id)
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text(json.dumps(spec, indent=2))
    return run_id, run_dir


class _Watcher(threading.Thread):
    """Feeds newly logged events to a progress callback while workers run."""

    def __init__(self, tail: EventTail, callback: ProgressFn) -> None:
        super().__init__(daemon=True)
        self.tail, self.callback = tail, callback
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.callback(self.tail.new_events())
        self.callback(self.tail.new_events())


def run_benchmark(
    spec: RunSpec,
    store: ResultsStore,
    *,
    echo: bool = True,
    progress: ProgressFn | None = None,
    sweep: dict[str, Any] | None = None,
) -> RunOutcome:
    """Run ``spec`` once and store it. Failed and interrupted runs are stored too.

    ``sweep`` tags the run as part of a sweep (see :meth:`ResultsStore.begin`).

    Data problems surface before anything is recorded; after the run row exists, every
    exit path (success, worker failure, Ctrl-C, a bug) completes it.
    """
    task = get_task(spec.task)
    network = spec.network.resolve() if spec.network.enabled else None
    if network:
        preflight(network)  # not root, or no way to emulate it: refused before recording
    task.prepare(spec.data_dir, spec.download)
    spec_dict = spec.to_json_dict()
    run_id, run_dir = new_run_dir(store, spec_dict)
    store.begin(run_id, spec_dict, deviations(spec), collect_environment(), sweep=sweep)
    status, error = "failed", None
    watcher = _Watcher(EventTail(run_dir / EVENTS_FILE), progress) if progress else None
    if watcher:
        watcher.start()
    try:
        with emulated(spec.workers, network, record_to=run_dir) as topology:
            launch_local(spec, run_dir, echo=echo, topology=topology)
        status = ""
    except (WorkerFailed, NetworkError) as failure:
        error = str(failure)
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user"
        raise
    except BaseException as unexpected:
        error = f"launcher error: {unexpected!r}"
        raise
    finally:
        if watcher:
            watcher.done.set()
            watcher.join()
        events = read_events(run_dir / EVENTS_FILE)
        summary, evals = summarize(events), eval_history(events)
        if not status:  # the workers exited cleanly: the log says how the run ended
            status = summary.get("status") or "failed"
            if not summary["finished"]:
                error = "workers exited without finishing the run"
        store.finish(run_id, status=status, summary=summary, evals=evals, error=error)
    return RunOutcome(run_id, status, summary, evals, error, str(run_dir))
