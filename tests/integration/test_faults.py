"""Faults inflicted on real runs: stopped, hung and orphaned workers, a full disk, stale
rows of launchers in other PID namespaces, two copies of one sweep.

Each names the fault, how fast the run must notice, and what is left behind (nothing).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    DMLBENCH,
    SmallDisk,
    cli,
    inside,
    process_tree,
    spawned_workers,
    wait_for_evaluation,
    wait_until_gone,
)

from dmlbench.errors import ResultsNotStored
from dmlbench.heartbeat import read_heartbeats
from dmlbench.launch import run_benchmark
from dmlbench.resolve import resolve_spec
from dmlbench.results import ResultsStore

LONG_RUN = ["--set", "max_epochs=100000", "--set", "stop_at_target=false"]


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
    return json.loads(inside("results", "--json", "--store", str(store)).stdout)[0]


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
    assert '"run_stop"' in (run_dir / "events.log").read_text()
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
    runs = json.loads(inside("results", "--json", "--store", str(store)).stdout)
    keys = [r["run_key"] for r in runs]
    assert len(keys) == 3 and len(set(keys)) == 3  # each point once, not twice
    assert all(r["status"] in ("success", "target_not_reached") for r in runs)


def _open_new_store(root: str, start, failed) -> None:
    """One launcher opening the store (a child process): waits for the others first."""
    start.wait()
    store = ResultsStore(Path(root))
    try:
        store.prepare()  # what a launcher's first write does
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
