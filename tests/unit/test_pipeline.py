"""The one launch pipeline (`launch.lifecycle.execute`): whatever way a launch ends,
its run is stored, with a real SQLite store and a launcher that ends each way."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from dmlbench.errors import WorkerFailed
from dmlbench.launch.lifecycle import Attempt, Launcher, OpenedRun, execute
from dmlbench.resolve import resolve_spec
from dmlbench.results import ResultsStore
from dmlbench.results.events import EventLog
from dmlbench.results.records import RunStop


class EndsHow(Launcher):
    """Writes a run's first events, then ends as told: cleanly (after ``run_stop``), by
    a failed worker, by Ctrl-C or by a bug. Records which of its steps ran."""

    def __init__(self, how: str) -> None:
        self.how, self.steps = how, []

    def prepare(self, store: ResultsStore) -> dict:
        self.steps.append("prepare")
        return {}

    def start(self, run: OpenedRun, held: contextlib.ExitStack) -> None:
        self.steps.append("start")
        held.callback(self.steps.append, "released")
        self.log = EventLog(run.run_dir / "events.log")
        held.callback(self.log.close)
        self.log.log("run_start", world_size=1, global_batch=8, target=0.5)

    def wait(self, attempt: Attempt) -> None:
        self.steps.append("wait")
        if self.how == "failed worker":
            raise WorkerFailed("worker rank 1 died")
        if self.how == "ctrl-c":
            raise KeyboardInterrupt
        if self.how == "sigterm":
            raise KeyboardInterrupt("stopped by SIGTERM")
        if self.how == "bug":
            raise ZeroDivisionError("a bug")
        stop = RunStop(
            status="success",
            stop_reason="target_reached",
            steps=3,
            epochs=1.0,
            samples=24,
            elapsed_s=1.0,
            eval_s=0.1,
            time_to_accuracy_s=1.0,
            time_to_accuracy_compute_s=0.9,
            best_metric=0.6,
            target=0.5,
        )
        self.log.log("run_stop", stop.status, **stop.metadata())
        attempt.status = ""

    def stop(self) -> None:
        self.steps.append("stop")


@pytest.mark.parametrize(
    ("how", "status", "error", "raised"),
    [
        ("clean", "success", None, None),
        ("failed worker", "failed", "worker rank 1 died", None),
        ("ctrl-c", "interrupted", "interrupted by the user", KeyboardInterrupt),
        # kill, a time limit: it read "interrupted by the user" too
        ("sigterm", "interrupted", "stopped by SIGTERM", KeyboardInterrupt),
        ("bug", "failed", "launcher error: ZeroDivisionError('a bug')", ZeroDivisionError),
    ],
)
def test_every_way_out_stores_the_run(
    tmp_path: Path, how: str, status: str, error: str | None, raised: type | None
) -> None:
    store = ResultsStore(tmp_path / "store")
    launcher = EndsHow(how)
    spec = resolve_spec("synthetic-mlp").to_json_dict()
    with pytest.raises(raised) if raised else contextlib.nullcontext():
        execute(spec, store, launcher)
    (run,) = store.runs()
    assert (run.status, run.error) == (status, error)
    assert run.summary.world_size == 1  # settled from the event log on every way out
    assert launcher.steps[:3] == ["prepare", "start", "wait"] and "released" in launcher.steps
    assert ("stop" in launcher.steps) == (raised is not None)  # stopped on Ctrl-C and bugs
    assert (Path(run.run_dir) / "outcome.json").is_file()


def test_a_launch_refused_in_prepare_records_nothing(tmp_path: Path) -> None:
    class Refuses(EndsHow):
        def prepare(self, store: ResultsStore) -> dict:
            raise WorkerFailed("no dataset here")

    store = ResultsStore(tmp_path / "store")
    with pytest.raises(WorkerFailed):
        execute(resolve_spec("synthetic-mlp").to_json_dict(), store, Refuses("clean"))
    assert store.runs() == [] and not (tmp_path / "store").exists()


def test_more_gpu_workers_than_gpus_are_refused_before_anything_starts() -> None:
    """Each GPU worker takes the GPU of its local rank: on a host with 1 GPU, device=auto
    and 2 workers (the README's `make run`) reached a worker that failed with "CUDA
    error: invalid device ordinal". It is refused in one line first."""
    from dmlbench.errors import SpecError
    from dmlbench.launch.lifecycle import check_device

    with pytest.raises(SpecError, match="each of this host's 2 workers takes a GPU of its own"):
        check_device("auto", 2, gpus=1)
    check_device("auto", 1, gpus=1)  # one each
    check_device("auto", 8, gpus=0)  # no GPU: auto is the CPU
    check_device("cpu", 8, gpus=1)  # asked for the CPU
