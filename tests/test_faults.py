"""Faults inflicted on real runs: stopped, hung and orphaned workers, a full disk, stale
rows of launchers in other PID namespaces, two copies of one sweep.

Each names the fault, how fast the run must notice, and what is left behind (nothing).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import process_tree, spawned_workers, wait_until_gone
from test_cli import DMLBENCH, cli, wait_for_evaluation

from dmlbench.errors import ResultsNotStored
from dmlbench.heartbeat import read_heartbeats
from dmlbench.launch import run_benchmark
from dmlbench.launch.watchdog import judge
from dmlbench.resolve import resolve_spec
from dmlbench.results import ResultsStore

LONG_RUN = ["--set", "max_epochs=100000", "--set", "stop_at_target=false"]


# ------------------------------------------------------------------ the watchdog's judgement


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


# ------------------------------------------------------------------ on real runs


def start_run(store: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *DMLBENCH,
            "run",
            "synthetic-mlp",
            "--workers",
            "2",
            "--quiet",
            "--store",
            str(store),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stored_run(store: Path) -> dict:
    return json.loads(cli("results", "--json", "--store", str(store)).stdout)[0]


@pytest.mark.multiprocess
def test_a_stopped_worker_fails_the_run_within_the_stall_timeout(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = start_run(store, *LONG_RUN, "--set", "stall_timeout_s=4")
    wait_for_evaluation(proc, store)
    tree = process_tree(proc.pid)
    heartbeats = next(store.glob("runs/*")) / "heartbeats"
    rank1 = next(b["pid"] for b in read_heartbeats(heartbeats) if b["rank"] == 1)
    stopped = time.monotonic()
    os.kill(rank1, signal.SIGSTOP)  # what gloo would wait on for 10 minutes
    _, stderr = proc.communicate(timeout=90)
    detected = time.monotonic() - stopped
    assert proc.returncode == 1, stderr
    assert detected < 4 + 20  # the timeout, then the watchdog's poll and the agent's stop
    row = stored_run(store)
    assert row["status"] == "failed"
    assert "worker rank 1 stalled: no heartbeat for" in row["error"]
    assert len(row["evals"]) >= 1  # what was reached is kept
    assert wait_until_gone(tree, timeout=15) == set()


@pytest.mark.multiprocess
def test_a_hung_worker_is_named_not_its_waiting_peer(tmp_path: Path) -> None:
    store = tmp_path / "store"
    started = time.monotonic()
    done = cli(
        "run",
        "crash-hang",
        "--plugin",
        "dmlbench_test_plugins",
        "--workers",
        "2",
        "--set",
        "stall_timeout_s=4",
        "--quiet",
        "--store",
        str(store),
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 60
    error = stored_run(store)["error"]
    assert "worker rank 1 stalled: no progress for" in error and "forward" in error


@pytest.mark.multiprocess
@pytest.mark.parametrize("when", ["start-up", "training"])
def test_a_killed_launcher_leaves_no_worker_behind(tmp_path: Path, when: str) -> None:
    store = tmp_path / "store"
    with (tmp_path / "out.log").open("w") as out:  # orphans would hold a pipe open
        proc = subprocess.Popen(
            [
                *DMLBENCH,
                "run",
                "synthetic-mlp",
                "--workers",
                "2",
                "--quiet",
                "--store",
                str(store),
                *LONG_RUN,
            ],
            stdout=out,
            stderr=out,
        )
    if when == "training":
        wait_for_evaluation(proc, store)
    else:  # the workers are importing: next they would wait on the launcher's store
        deadline = time.monotonic() + 60
        while len(spawned_workers(proc.pid)) < 2:
            assert time.monotonic() < deadline, "the workers never started"
            time.sleep(0.02)
        time.sleep(0.5)
    workers = spawned_workers(proc.pid)
    assert len(workers) == 2
    proc.kill()  # SIGKILL: no handler runs, nothing is cleaned up by the launcher
    proc.wait(timeout=30)
    # they exit on their own: at once in training, after their imports at start-up
    assert wait_until_gone(workers, timeout=30) == set()


# ------------------------------------------------------------------ a full disk


class SmallDisk:
    """A real filesystem of a few MiB (tmpfs) that a test can fill up and free again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def fill(self) -> None:
        if self.filler.exists():
            return
        for chunk in (65536, 512):  # unbuffered: a write fails at once, close cannot
            with contextlib.suppress(OSError), self.filler.open("ab", buffering=0) as out:
                while True:
                    out.write(b"\0" * chunk)
        assert os.statvfs(self.root).f_bavail == 0

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    root = tmp_path / "disk"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(root)], check=True)
    try:
        yield SmallDisk(root)
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def test_a_full_disk_refuses_a_run_before_it_starts(small_disk: SmallDisk, dmlbench) -> None:
    store = small_disk.root / "store"
    ResultsStore(store)  # it exists; now the disk fills up
    small_disk.fill()
    code, _, err = dmlbench("run", "synthetic-mlp", "--store", str(store), "--quiet")
    assert code == 2 and "Traceback" not in err, err
    assert "free space" in err and len(err.strip().splitlines()) == 1
    assert list((store / "runs").glob("*")) == []  # no half-made run folder


@pytest.mark.multiprocess
def test_a_full_disk_at_the_end_keeps_the_run_for_import(small_disk: SmallDisk, dmlbench) -> None:
    store = ResultsStore(small_disk.root / "store")
    spec = resolve_spec(
        "synthetic-mlp", workers=2, overrides=["max_epochs=2", "stop_at_target=false"]
    )

    def fill_when_done(events: list[dict]) -> None:
        if any(e["key"] == "run_stop" for e in events):
            small_disk.fill()  # the workers are done; the store must now take the run

    with pytest.raises(ResultsNotStored) as caught:
        run_benchmark(spec, store, echo=False, progress=fill_when_done)
    message = str(caught.value)
    assert "\n" not in message and "--import" in message and "is full" in message
    run_dir = Path(message.rsplit("--import ", 1)[1])
    assert '"run_stop"' in (run_dir / "events.jsonl").read_text()
    # the store can still be read while the disk is full
    code, out, err = dmlbench("results", "--store", str(store.root))
    assert code == 0 and run_dir.name in out and "read-only" in err
    small_disk.free()
    code, out, _ = dmlbench("results", "--store", str(store.root), "--import", str(run_dir))
    row = ResultsStore(store.root).runs(run_dir.name)[0]
    assert code == 0 and f"imported run {run_dir.name} ({row.status})" in out
    assert row.status in ("success", "target_not_reached") and row.steps == 2 * 64
    assert [e.epoch for e in row.evals] == [1, 2] and row.division == "open"
    code, _, err = dmlbench("results", "--store", str(store.root), "--import", str(run_dir))
    assert code == 2 and "already in" in err  # a second import changes nothing


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


def test_an_emptied_store_says_which_runs_it_could_hold(tmp_path: Path, dmlbench) -> None:
    store = tmp_path / "s"
    folders = [
        _run_folder(store, f"run{i}", events=json.dumps(GOOD_EVAL).encode()) for i in range(2)
    ]
    ResultsStore(store)
    (store / "dmlbench.sqlite").write_bytes(b"")  # the database emptied, its folders kept
    code, out, err = dmlbench("results", "--store", str(store))
    assert code == 0 and "holds no runs, but 2 run folders" in err, err
    assert f"--import {store / 'runs'}" in err
    code, out, err = dmlbench("results", "--store", str(store), "--import", str(store / "runs"))
    assert code == 0 and out.count("imported run") == 2, err
    assert sorted(r.run_id for r in ResultsStore(store).runs()) == [f.name for f in folders]
    code, _, err = dmlbench("results", "--store", str(store))
    assert code == 0 and "holds no runs" not in err


# ------------------------------------------------------------------ stale rows


def _begin_in_a_pid_namespace(store: Path) -> subprocess.Popen:
    """A launcher that records a run from inside its own PID namespace (pid 1 there)."""
    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from dmlbench.launch.lifecycle import open_run\n"
        "from dmlbench.results import ResultsStore\n"
        "from dmlbench.resolve import resolve_spec\n"
        "store = ResultsStore(Path(sys.argv[1]))\n"
        "run_id, _ = open_run(store, resolve_spec('digits-mlp').to_json_dict())\n"
        "print(os.getpid(), run_id, flush=True)\n"
        "time.sleep(3600)\n"
    )
    return subprocess.Popen(
        ["unshare", "--pid", "--fork", sys.executable, "-c", script, str(store)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
def test_a_killed_launcher_in_a_pid_namespace_is_not_taken_for_alive(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a PID namespace")
    store = tmp_path / "store"
    launcher = _begin_in_a_pid_namespace(store)
    assert launcher.stdout is not None
    pid, run_id = launcher.stdout.readline().split()
    assert pid == "1"  # what the row records: alive forever, were pids trusted
    assert ResultsStore(store).runs(run_id)[0].status == "running"  # it does run
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait(timeout=30)
    deadline = time.monotonic() + 15  # the namespace's own processes die a moment later
    while (row := ResultsStore(store).runs(run_id)[0]).status == "running":
        assert time.monotonic() < deadline, "the dead launcher's run stays 'running'"
        time.sleep(0.1)
    assert row.status == "interrupted" and "ended without finishing" in row.error


@pytest.mark.slow
def test_a_killed_launcher_process_leaves_its_run_interrupted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom pathlib import Path\n"
            "from dmlbench.launch.lifecycle import open_run\n"
            "from dmlbench.results import ResultsStore\n"
            "from dmlbench.resolve import resolve_spec\nstore = ResultsStore(Path(sys.argv[1]))\n"
            "print(open_run(store, resolve_spec('digits-mlp').to_json_dict())[0], flush=True)\n"
            "import time; time.sleep(3600)\n",
            str(store),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert launcher.stdout is not None
    run_id = launcher.stdout.readline().strip()
    assert ResultsStore(store).runs(run_id)[0].status == "running"
    launcher.kill()
    launcher.wait(timeout=30)
    row = ResultsStore(store).runs(run_id)[0]
    assert row.status == "interrupted" and "ended without finishing" in row.error


# ------------------------------------------------------------------ concurrent sweeps


@pytest.mark.multiprocess
def test_two_copies_of_a_sweep_share_its_points(tmp_path: Path) -> None:
    store = tmp_path / "store"
    sweep = tmp_path / "shared.yaml"
    sweep.write_text(
        "task: synthetic-mlp\nrepeats: 3\nset: {max_epochs: 1}\naxes: {workers: [1]}\n"
    )
    copies = [
        subprocess.Popen(
            [*DMLBENCH, "sweep", str(sweep), "--store", str(store)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [copy.communicate(timeout=300) for copy in copies]
    assert [copy.returncode for copy in copies] == [0, 0], outputs
    runs = json.loads(cli("results", "--json", "--store", str(store)).stdout)
    keys = [r["run_key"] for r in runs]
    assert len(keys) == 3 and len(set(keys)) == 3  # each point once, not twice
    assert all(r["status"] in ("success", "target_not_reached") for r in runs)


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
    kept = (tmp_path / LAUNCHER_TRACEBACK).read_text()
    assert "Traceback" in kept and "_environment" in kept
    # what was set before the bad value is taken back: later runs must not inherit it
    assert "DMLBENCH_NODE_ADDRESS" not in os.environ and "BROKEN" not in os.environ


def _open_new_store(root: str, start, failed) -> None:
    """One launcher opening the store (a child process): waits for the others first."""
    start.wait()
    store = ResultsStore(Path(root))
    try:
        store.runs()
    except Exception:
        failed.value += 1
        return
    if store.read_only:
        failed.value += 1


@pytest.mark.slow
def test_launchers_that_open_a_new_store_at_once_all_write_to_it(tmp_path: Path) -> None:
    """A Slurm job array's tasks open one new store together. Without the setup lock,
    about one opener in eight lost the race to switch it to WAL ("database is locked")
    and went on read-only, failing at its first query."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    failed = context.Value("i", 0)
    for trial in range(12):
        start = context.Barrier(6)
        openers = [
            context.Process(
                target=_open_new_store, args=(str(tmp_path / f"store{trial}"), start, failed)
            )
            for _ in range(6)
        ]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(60)
            assert opener.exitcode == 0
    assert failed.value == 0
