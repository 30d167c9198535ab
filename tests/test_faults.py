"""Faults inflicted on real runs: stopped, hung and orphaned workers.

Each names the fault, how fast the run must notice, and what is left behind (nothing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from processes import process_tree, spawned_workers, wait_until_gone
from test_cli import DMLBENCH, cli, wait_for_evaluation

from dmlbench.heartbeat import read_heartbeats
from dmlbench.launch.watchdog import judge

LONG_RUN = ["--set", "max_epochs=100000", "--set", "stop_at_target=false"]


# ------------------------------------------------------------------ the watchdog's judgement


def beat(rank: int, time: float, step: int = -1, phase: str = "start", at: float | None = None):
    return {"rank": rank, "pid": 100 + rank, "time": time, "step": step, "phase": phase,
            "progress_at": at}  # fmt: skip


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


def test_a_slow_but_live_run_is_left_alone() -> None:
    beats = [beat(0, 99.9, 3, "eval", 95.0), beat(1, 99.9, 3, "eval", 95.1)]
    assert judge(beats, now=100.0, timeout_s=10) is None
    loading = [beat(0, 999.9), beat(1, 999.9)]  # no training loop yet: data still loading
    assert judge(loading, now=1000.0, timeout_s=10) is None


# ------------------------------------------------------------------ on real runs


def start_run(store: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*DMLBENCH, "run", "synthetic-mlp", "--workers", "2", "--quiet", "--store", str(store),
         *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


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
    done = cli("run", "crash-hang", "--plugin", "dmlbench_test_plugins", "--workers", "2",
               "--set", "stall_timeout_s=4", "--quiet", "--store", str(store),
               check=False)  # fmt: skip
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
            [*DMLBENCH, "run", "synthetic-mlp", "--workers", "2", "--quiet", "--store",
             str(store), *LONG_RUN], stdout=out, stderr=out,
        )  # fmt: skip
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
