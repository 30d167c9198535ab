"""Faults inflicted on real runs: stopped, hung and orphaned workers, a full disk, stale
rows of launchers in other PID namespaces, two copies of one sweep.

Each names the fault, how fast the run must notice, and what is left behind (nothing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import (
    SmallDisk,
)

from dmlbench.launch.watchdog import judge
from dmlbench.resolve import resolve_spec
from dmlbench.results import ResultsStore


def beat(rank: int, time: float, step: int = -1, phase: str = "start", at: float | None = None):
    return {
        "rank": rank,
        "pid": 100 + rank,
        "time": time,
        "step": step,
        "phase": phase,
        "progress_at": at,
    }


def test_a_frozen_worker_is_named_first() -> None:
    beats = [beat(0, 99.5, 7, "comm", 50.0), beat(1, 90.0, 7, "forward", 40.0)]
    stall = judge(beats, now=100.0, timeout_s=5)
    assert stall is not None and (stall.rank, stall.pid) == (1, 101)
    assert "rank 1 stalled: no heartbeat for 10 s" in stall.message


def test_of_stuck_workers_the_one_behind_is_named() -> None:
    # rank 1 hangs in forward of step 7; rank 0 waits for it in the all-reduce of step 7
    beats = [beat(0, 99.9, 7, "comm", 80.0), beat(1, 99.9, 7, "forward", 80.5)]
    stall = judge(beats, now=100.0, timeout_s=10)
    assert stall is not None and stall.rank == 1
    assert "no progress for 20 s (at step 7, forward; the other workers waited" in stall.message


def test_a_node_waits_longer_before_blaming_its_own_stuck_worker() -> None:
    """Of several nodes, the stopped worker's own node names it (no heartbeat) within the
    stall timeout; the others' waiting workers are judged stuck only later (issue 40)."""
    waiting = [beat(0, 99.9, 7, "comm", 80.0), beat(1, 99.9, 7, "comm", 80.5)]
    assert judge(waiting, now=100.0, timeout_s=10, stuck_s=25) is None
    assert judge(waiting, now=100.0, timeout_s=10) is not None
    frozen = [beat(0, 85.0, 7, "comm", 80.0)]
    assert judge(frozen, now=100.0, timeout_s=10, stuck_s=25) is not None


def test_of_the_nodes_errors_the_cause_is_stored(tmp_path: Path) -> None:
    from dmlbench.launch.node import node_error
    from dmlbench.results.rundir import write_json

    said = {
        0: "worker rank 1 stalled: no progress for 60 s (at step 7, comm; the other workers "
        "waited on it)",
        1: "worker rank 3 stalled: no heartbeat for 60 s (the process is stopped or frozen)",
        2: "lost node 1 (10.0.0.2): worker rank 4 failed: Connection closed by peer",
    }
    for index, error in said.items():
        (tmp_path / f"n{index}").mkdir()
        write_json(tmp_path / f"n{index}" / "outcome.json", {"status": "failed", "error": error})
    nodes = [(f"node {i}", tmp_path / f"n{i}") for i in said]
    assert node_error(nodes) == f"node 1: {said[1]}"
    assert node_error([nodes[0], nodes[2]]) == f"node 0: {said[0]}"
    assert node_error([nodes[2]]) == f"node 2: {said[2]}"


def test_a_slow_but_live_run_is_left_alone() -> None:
    beats = [beat(0, 99.9, 3, "eval", 95.0), beat(1, 99.9, 3, "eval", 95.1)]
    assert judge(beats, now=100.0, timeout_s=10) is None
    loading = [beat(0, 999.9), beat(1, 999.9)]  # no training loop yet: data still loading
    assert judge(loading, now=1000.0, timeout_s=10) is None


def test_a_full_disk_refuses_a_run_before_it_starts(small_disk: SmallDisk, dmlbench) -> None:
    store = small_disk.root / "store"
    ResultsStore(store).prepare()  # it exists; now the disk fills up
    small_disk.fill()
    code, _, err = dmlbench("run", "synthetic-mlp", "--store", str(store), "--quiet")
    assert code == 2 and "Traceback" not in err, err
    assert "free space" in err and len(err.strip().splitlines()) == 1
    assert list((store / "runs").glob("*")) == []  # no half-made run folder


def test_a_store_that_cannot_be_made_is_not_called_a_full_disk(tmp_path: Path, dmlbench) -> None:
    """A store below a file (or below /proc) said "free space there", which sends the
    user after a disk that is not full."""
    (tmp_path / "a-file").write_text("not a folder\n")
    code, _, err = dmlbench("run", "synthetic-mlp", "--store", str(tmp_path / "a-file" / "s"))
    assert code == 2 and "Traceback" not in err, err
    assert "free space" not in err and "pass another --store" in err
    assert len(err.strip().splitlines()) == 1


def test_a_data_dir_that_is_a_file_is_refused_before_a_download(tmp_path: Path, dmlbench) -> None:
    """`--data-dir FILE` tried CIFAR-10's download and blamed the network."""
    (tmp_path / "a-file").write_text("not a folder\n")
    store = tmp_path / "s"
    code, _, err = dmlbench(
        "run", "cifar10-resnet20", "--data-dir", str(tmp_path / "a-file"), "--store", str(store)
    )
    assert code == 2 and "is a file, not a folder" in err and "could not download" not in err, err
    assert not (store / "runs").exists() or list((store / "runs").glob("*")) == []


def test_import_refuses_what_is_no_run_folder(tmp_path: Path, dmlbench) -> None:
    code, _, err = dmlbench("results", "--store", str(tmp_path / "s"), "--import", str(tmp_path))
    assert code == 2 and "not a dmlbench run folder" in err


def _run_folder(root: Path, name: str, spec: dict | None = None, events: bytes = b"") -> Path:
    """A run folder as a launcher leaves it, with ``events`` as its event log."""
    from dmlbench.results.environment import collect_environment
    from dmlbench.results.rundir import create_run_dir, write_json

    spec = spec or resolve_spec("synthetic-mlp").to_json_dict()
    _, folder = create_run_dir(root / "runs", spec, name)
    write_json(folder / "run.json", {"environment": collect_environment(), "deviations": {}})
    write_json(folder / "outcome.json", {"status": "failed", "error": "worker rank 1 died"})
    (folder / "events.jsonl").write_bytes(events)
    return folder


GOOD_EVAL = {
    "key": "eval_accuracy",
    "value": 0.5,
    "time_ms": 1.0,
    "metadata": {
        "epoch_num": 1,
        "step": 10,
        "samples_count": 160,
        "elapsed_s": 1.0,
        "compute_elapsed_s": 0.9,
        "eval_loss": 1.2,
    },
}


def test_import_reads_what_a_damaged_run_folder_holds(tmp_path: Path, dmlbench) -> None:
    """A damaged folder is imported as far as it is readable, what was skipped named, or
    refused in one line: never a traceback (issue 40)."""
    damaged = b"\n".join(
        [
            json.dumps(
                {
                    "key": "run_start",
                    "value": None,
                    "time_ms": 0.0,
                    "metadata": {"world_size": 1, "target": 0.95},
                }
            ).encode(),
            b"\xff\xfe not utf-8 \x80",
            b"[1, 2, 3]",
            b"42",
            b'{"no": "key"}',
            json.dumps(GOOD_EVAL).encode(),
            b'{"key": "torn',
            b"",
        ]
    )
    store = tmp_path / "s"
    folder = _run_folder(store, "damaged", events=damaged)
    code, out, err = dmlbench("results", "--store", str(store), "--import", str(folder))
    assert code == 0, err
    assert "imported run damaged (failed)" in out and "5 lines of its event log" in out
    (row,) = ResultsStore(store).runs("damaged")
    assert row.error == "worker rank 1 died" and [e.metric for e in row.evals] == [0.5]

    spec = resolve_spec("synthetic-mlp").to_json_dict()
    cases = [
        ({k: v for k, v in spec.items() if k != "recipe"}, "holds no recipe"),
        ({**spec, "seed": 10**30}, "seed is 1000000000000000000000000000000"),
        ({**spec, "workers": 10**30}, "workers is"),
        ({**spec, "task": "no-such-task"}, "unknown task 'no-such-task'"),
        ({**spec, "seed": "x" * 100_000}, "characters)"),
    ]
    for number, (bad, message) in enumerate(cases):
        folder = _run_folder(store, f"bad{number}", spec=bad, events=json.dumps(GOOD_EVAL).encode())
        code, _, err = dmlbench("results", "--store", str(store), "--import", str(folder))
        assert code == 2 and message in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1 and len(err) < 500, err
    assert [r.run_id for r in ResultsStore(store).runs()] == ["damaged"]


def test_a_run_whose_launcher_was_killed_is_imported_as_interrupted(
    tmp_path: Path, dmlbench
) -> None:
    """A launcher killed mid-run leaves no outcome. Its run was listed "interrupted"
    ("the launching process ended"), then imported as "failed", for "the event log ends
    before the run": a sentence cut short, and another status for the same run."""
    store = tmp_path / "s"
    events = b"\n".join(
        json.dumps(e).encode()
        for e in ({"key": "run_start", "value": None, "time_ms": 0.0, "metadata": {}}, GOOD_EVAL)
    )
    folder = _run_folder(store, "killed", events=events)
    (folder / "outcome.json").unlink()  # what a killed launcher leaves
    code, out, err = dmlbench("results", "--store", str(store), "--import", str(folder))
    assert code == 0, err
    assert "imported run killed (interrupted)" in out
    (row,) = ResultsStore(store).runs("killed")
    assert row.status == "interrupted" and [e.metric for e in row.evals] == [0.5]
    assert row.error and row.error.endswith("the event log holds what the run reached")
    code, _, err = dmlbench("results", "--store", str(store), "--import", str(folder))
    assert code == 2 and "run killed is already in" in err  # the import completed it


def test_a_run_folder_copied_under_another_name_is_imported_as_its_run(
    tmp_path: Path, dmlbench
) -> None:
    """A folder copied off a node as `r1` was stored as run r1, and again under its own
    id when the node's whole runs folder was imported: one run counted twice."""
    import shutil

    from dmlbench.launch.lifecycle import open_run

    store = ResultsStore(tmp_path / "node")
    spec = resolve_spec("synthetic-mlp").to_json_dict()
    run_id, folder = open_run(store, spec)
    (folder / "events.jsonl").write_bytes(json.dumps(GOOD_EVAL).encode())
    copied = Path(shutil.copytree(folder, tmp_path / "r1"))
    target = str(tmp_path / "mine")
    code, out, err = dmlbench("results", "--store", target, "--import", str(copied))
    assert code == 0 and f"imported run {run_id} (" in out, err
    code, _, err = dmlbench("results", "--store", target, "--import", str(folder))
    assert code == 2 and f"run {run_id} is already in" in err
    assert [r.run_id for r in ResultsStore(Path(target)).runs()] == [run_id]
    # a folder of run folders: the copy is that run, already stored, and nothing else is
    code, out, err = dmlbench("results", "--store", target, "--import", str(tmp_path))
    assert code == 0 and out.startswith(f"{Path(target) / 'dmlbench.sqlite'} has every run"), err
    assert err == ""
    # a recorded id that would be a path is refused, not used
    record = json.loads((copied / "run.json").read_text())
    (copied / "run.json").write_text(json.dumps({**record, "run_id": "../x"}))
    code, _, err = dmlbench("results", "--store", target, "--import", str(copied))
    assert code == 2 and "the run_id '../x' becomes a folder name" in err


def test_import_reads_a_multi_node_runs_log_where_its_launcher_found_it(
    tmp_path: Path, dmlbench
) -> None:
    """An emulated cluster's (or a Slurm job's) event log is in the folder of the node
    that held rank 0: `--import` of its folder stored "success" with no time, no
    evaluation and no epoch, and called its 2 × 2 nodes "a namespace per worker"."""
    store = tmp_path / "s"
    spec = {**resolve_spec("synthetic-mlp").to_json_dict(), "workers": 4, "nodes": 2}
    folder = _run_folder(store, "cluster", spec=spec)
    (folder / "events.jsonl").unlink()
    node = folder / "nodes" / "node1" / "runs" / "cluster"  # rank 0 was on node 1
    node.mkdir(parents=True)
    (node / "events.log").write_text(json.dumps(GOOD_EVAL) + "\n")
    known = {"emulated_nodes": True, "rank0_node": 1, "smuggled": "no field of a summary"}
    outcome = {"status": "success", "error": None, "summary": known}
    (folder / "outcome.json").write_text(json.dumps(outcome))
    code, out, err = dmlbench("results", "--store", str(store), "--import", str(folder))
    assert code == 0 and "imported run cluster (success)" in out, err
    (row,) = ResultsStore(store).runs("cluster")
    assert [e.metric for e in row.evals] == [0.5]
    assert row.summary.emulated_nodes and row.summary.rank0_node == 1
    assert "smuggled" not in row.summary.model_dump()


@pytest.mark.parametrize("name", ["spec.json", "events.log", "run.json", "outcome.json"])
@pytest.mark.parametrize("kind", ["zero", "fifo", "huge"])
def test_import_reads_no_file_of_a_run_folder_without_a_bound(
    tmp_path: Path, dmlbench, name: str, kind: str
) -> None:
    """Issue 53: a run folder whose spec.json or events.log was a link to /dev/zero
    ended in a MemoryError traceback, and as a named pipe hung until killed. Each file
    of a folder is read only if it is a regular file, and only up to a bound."""
    import time

    store = tmp_path / "s"
    folder = _run_folder(store, "hostile", events=json.dumps(GOOD_EVAL).encode())
    target = folder / name
    target.unlink(missing_ok=True)
    if kind == "zero":
        target.symlink_to("/dev/zero")
        message = "is a device, not a regular file"
    elif kind == "fifo":
        os.mkfifo(target)
        message = "is a named pipe, not a regular file"
    else:
        with target.open("wb") as sparse:  # 20 GB that take no disk
            sparse.truncate(20 << 30)
        message = "21,474,836,480 bytes; at most"
    started = time.monotonic()
    code, _, err = dmlbench("results", "--store", str(store), "--import", str(folder))
    assert time.monotonic() - started < 30  # neither a hang nor a 20 GB read
    assert code == 2 and message in err and str(target) in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert ResultsStore(store).runs() == []


def test_an_emptied_store_says_which_runs_it_could_hold(tmp_path: Path, dmlbench) -> None:
    store = tmp_path / "s"
    folders = [
        _run_folder(store, f"run{i}", events=json.dumps(GOOD_EVAL).encode()) for i in range(2)
    ]
    ResultsStore(store).prepare()
    (store / "dmlbench.sqlite").write_bytes(b"")  # the database emptied, its folders kept
    code, out, err = dmlbench("results", "--store", str(store))
    assert code == 0 and "holds no runs, but 2 run folders" in err, err
    assert f"--import {store / 'runs'}" in err
    code, out, err = dmlbench("results", "--store", str(store), "--import", str(store / "runs"))
    assert code == 0 and out.count("imported run") == 2, err
    assert sorted(r.run_id for r in ResultsStore(store).runs()) == [f.name for f in folders]
    code, _, err = dmlbench("results", "--store", str(store))
    assert code == 0 and "holds no runs" not in err


def test_a_dmlbench_bug_in_the_launcher_is_reported_as_one(tmp_path: Path) -> None:
    from dmlbench.errors import WorkerFailed
    from dmlbench.launch.local import LAUNCHER_TRACEBACK, launch_workers
    from dmlbench.train.worker import run_worker

    # a value that is not a string cannot go into the environment: a TypeError in our
    # code, not a start-up failure of torch's, so it must not read as one
    with pytest.raises(WorkerFailed) as failed:
        launch_workers(run_worker, (), workers=1, run_dir=tmp_path, env={"BROKEN": 1})  # type: ignore[dict-item]
    message = str(failed.value)
    assert message.startswith("dmlbench bug in the launcher: TypeError") and "\n" not in message
    assert f"traceback in {LAUNCHER_TRACEBACK} in the run folder" in message  # from anywhere
    kept = (tmp_path / LAUNCHER_TRACEBACK).read_text()
    assert "Traceback" in kept and "in environment" in kept  # the frame that failed
    # what was set before the bad value is taken back: later runs must not inherit it
    assert "DMLBENCH_NODE_ADDRESS" not in os.environ and "BROKEN" not in os.environ


def test_an_interrupt_python_drops_is_raised_again_at_the_next_step(monkeypatch) -> None:
    """Ctrl-C during a garbage-collector callback (Dask registers one) or a __del__:
    Python drops the KeyboardInterrupt ("Exception ignored in ...") and goes on, and a
    Dask fit, whose workers leave SIGINT to it, trained on. The handler remembers it
    until the run is stored as interrupted; the fit's loops raise it again."""
    import signal

    from dmlbench.system import interrupt_handled, interruptible, raise_unhandled

    shown: list[BaseException | None] = []  # what Python reports it dropped
    monkeypatch.setattr("sys.unraisablehook", lambda seen: shown.append(seen.exc_value))

    class SignalledWhileCollected:
        def __init__(self, signalled: bool = True) -> None:
            self.signalled = signalled

        def __del__(self) -> None:
            if self.signalled:
                signal.raise_signal(signal.SIGINT)
            else:
                raise ValueError("not an interrupt")

    previous = signal.getsignal(signal.SIGINT)
    try:
        interruptible()
        raise_unhandled()  # nothing pending: nothing raised
        SignalledWhileCollected(signalled=False)  # another exception dropped: reported
        assert len(shown) == 1 and isinstance(shown[0], ValueError)
        SignalledWhileCollected()  # collected at once, the handler raising inside __del__
        assert len(shown) == 1  # dropped, and not reported: it is raised again below
        with pytest.raises(KeyboardInterrupt):
            raise_unhandled()
        with pytest.raises(KeyboardInterrupt):  # until something acts on it
            raise_unhandled()
        interrupt_handled()
        raise_unhandled()
    finally:
        interrupt_handled()
        signal.signal(signal.SIGINT, previous)
