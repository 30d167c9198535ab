"""`dmlbench dask fit`: a registered task trained by the Dask estimator on a real
LocalCluster and stored beside torch.distributed runs, and its refusals."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import (
    COLUMNS,
    DMLBENCH,
    is_worker,
    mlperf_common_messages,
    process_tree,
    wait_for_evaluation,
)

from dmlbench.dask.dampers import GeoDamp
from dmlbench.dask.simulate import schedule

DIGITS_TRAIN = 1_437  # digits-mlp's training split


def dmlbench(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "dmlbench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": COLUMNS},
    )
    if check and done.returncode != 0:
        raise AssertionError(f"dmlbench {' '.join(args)} failed:\n{done.stderr}")
    return done


@pytest.mark.slow
def test_a_dask_fit_is_stored_and_compared_beside_a_torch_run(tmp_path: Path) -> None:
    """GeoDamp on digits for 3 epochs on a LocalCluster: stored with the schedule's
    updates, an evaluation per epoch and its deviations; a torch.distributed run in the
    same store; compare and report show both, as two variants."""
    store = str(tmp_path / "store")
    fit = dmlbench(
        "dask",
        "fit",
        "digits-mlp",
        "--damper",
        "geodamp",
        "--delay",
        "1",
        "--factor",
        "2",
        "--max-workers",
        "2",
        "--set",
        "recipe.max_epochs=3",
        "--set",
        "stop_at_target=false",
        "--store",
        store,
        "--json",
    )
    run = json.loads(fit.stdout)
    expected = schedule(GeoDamp(32, delay=1, factor=2), DIGITS_TRAIN, 3)
    assert run["exchange"] == "dask-centralised" and run["division"] == "open"
    assert run["status"] == "target_not_reached" and run["stop_reason"] == "max_epochs"
    assert run["steps"] == len(expected) and run["samples"] == 3 * DIGITS_TRAIN
    assert [e["step"] for e in run["evals"]] == _epoch_ends(expected, DIGITS_TRAIN)
    assert run["best_metric"] > 0.8 and run["global_batch"] == 32
    assert run["summary"]["largest_batch"] == 128
    # billed for what it scaled its cluster to: 1 worker for batch 32, then 2 (of 2)
    elapsed, held = run["summary"]["elapsed_s"], run["summary"]["worker_s"]
    assert elapsed < held <= 2 * elapsed and run["summary"]["worker_s_to_target"] is None
    assert {"engine", "batch_schedule"} <= set(run["deviations"])
    assert run["deviations"]["batch_schedule"]["actual"].startswith("GeoDamp(initial=32, delay=1")
    assert "epoch 3:" in fit.stderr and "Traceback" not in fit.stderr
    assert f"starting Dask, up to 2 workers, on {DIGITS_TRAIN:,} training" in fit.stderr
    # a line an epoch, each within 80 columns (they ran to 95, wrapping every one)
    epochs = [line for line in fit.stderr.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 3 and all(len(line) <= 80 for line in epochs), epochs
    assert re.match(r"epoch 3: [\d,]+ updates, batch 128 on [12] workers?, train loss ", epochs[2])

    dmlbench("run", "digits-mlp", "--set", "recipe.max_epochs=1", "--store", store, "--quiet")
    compared = json.loads(dmlbench("compare", "--store", store, "--json", "--price", "3600").stdout)
    variants = {row["variant"] for row in compared}
    assert len(compared) == 2 and any("dask" in v for v in variants), variants
    (fitted,) = [row for row in compared if "dask" in row["variant"]]
    assert fitted["cost_mean"] == pytest.approx(held)  # 3600 an hour: a worker-second 1
    listed = dmlbench("results", "--store", store, "--json").stdout
    assert {r["exchange"] for r in json.loads(listed)} == {"dask-centralised", "allreduce"}
    dmlbench("report", "--store", store, "--out", str(tmp_path / "report.html"))
    assert "dask-centralised" in (tmp_path / "report.html").read_text()
    logs = sorted((tmp_path / "store" / "runs").glob("*/events.log"))
    assert len(logs) == 2  # the fit's and the torch run's: MLPerf's common rules hold
    assert [mlperf_common_messages(log) for log in logs] == [[], []]


def _epoch_ends(sizes: list[int], n: int) -> list[int]:
    """How many updates had run at the end of each epoch."""
    ends, seen = [], 0
    for index, size in enumerate(sizes, start=1):
        seen += size
        if seen % n == 0:
            ends.append(index)
    return ends


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "said"),
    [("kill", "stopped by SIGTERM"), ("ctrl-c", "interrupted by the user")],
)
def test_a_signal_stores_a_fit_as_interrupted_with_what_it_reached(
    tmp_path: Path, how: str, said: str
) -> None:
    """`kill` (or a job's time limit) ended `dask fit` on the spot: its row was left
    running, later read "the launching process ended without finishing the run", and
    its evaluations were not stored. It is stored as a torch run's is on SIGTERM.
    Ctrl-C signals the terminal's whole process group, the LocalCluster's worker
    processes too, and each printed a KeyboardInterrupt traceback from inside Dask."""
    store = tmp_path / "store"
    endless = ["--set", "recipe.max_epochs=100000", "--set", "stop_at_target=false"]
    proc = subprocess.Popen(
        [*DMLBENCH, "dask", "fit", "digits-mlp", "--store", str(store), *endless],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,  # a process group of its own, as a terminal's job is
    )
    wait_for_evaluation(proc, store, timeout=120)
    if how == "kill":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    (run,) = json.loads(dmlbench("results", "--json", "--store", str(store)).stdout)
    assert (run["status"], run["error"]) == ("interrupted", said)
    assert len(run["evals"]) >= 1  # what it reached is kept


@pytest.mark.slow
def test_ctrl_c_as_the_workers_start_is_one_line(tmp_path: Path) -> None:
    """Ctrl-C while the LocalCluster's worker processes were still starting (before
    their preload ignores it) printed a KeyboardInterrupt traceback of 40 to 80 lines
    from each, from deep in Dask. Forked by a fork server that ignores it, they leave
    it to `dask fit`, which stores the fit as interrupted."""
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [*DMLBENCH, "dask", "fit", "digits-mlp", "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,  # a process group of its own, as a terminal's job is
    )
    deadline, workers = time.monotonic() + 120, []
    while proc.poll() is None and not workers:
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no Dask worker process started")
        time.sleep(0.01)
        workers = [pid for pid in process_tree(proc.pid) if is_worker(pid)]
    time.sleep(0.3)  # into its imports: Ctrl-C before them ended a spawned one silently
    with contextlib.suppress(ProcessLookupError):  # checked below: it should still run
        os.killpg(proc.pid, signal.SIGINT)
    # a forked worker's environment is its fork server's: Dask's, set before a spawn
    with contextlib.suppress(OSError):  # a worker that has already exited
        assert b"MALLOC_TRIM_THRESHOLD_=65536" in Path(f"/proc/{workers[0]}/environ").read_bytes()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    (run,) = json.loads(dmlbench("results", "--json", "--store", str(store)).stdout)
    assert (run["status"], run["error"]) == ("interrupted", "interrupted by the user")


@pytest.mark.slow
def test_a_fit_that_fails_on_its_workers_is_stored_as_failed(tmp_path: Path) -> None:
    """A GPU the workers lack: the fit starts, its workers refuse, and the run is kept
    as failed with their one-line reason; exit status 1."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal needs one without")
    store = str(tmp_path / "store")
    done = dmlbench(
        "dask", "fit", "digits-mlp", "--device", "cuda", "--store", store, "--json", check=False
    )
    assert done.returncode == 1, done.stderr
    run = json.loads(done.stdout)
    assert run["status"] == "failed"
    assert "device='cuda', but Dask worker tcp://127.0.0.1:" in run["error"]
    assert "\n" not in run["error"] and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_fit_runs_on_a_scheduler_given_by_address(tmp_path: Path) -> None:
    """--scheduler: the fit trains on a cluster that is already running (here one in
    this process, on loopback), which it neither scales nor closes."""
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as cluster:
        fit = dmlbench(
            "dask",
            "fit",
            "digits-mlp",
            "--scheduler",
            cluster.scheduler_address,
            "--set",
            "recipe.max_epochs=2",
            "--store",
            str(tmp_path / "store"),
            "--json",
        )
        run = json.loads(fit.stdout)
        assert run["status"] in ("success", "target_not_reached") and len(run["evals"]) == 2
        assert run["spec"]["dask"]["scheduler"] == cluster.scheduler_address
        assert run["summary"]["worker_s"] is None  # a cluster it cannot scale: not its to say
        with Client(cluster, set_as_default=False) as client:
            assert len(client.scheduler_info()["workers"]) == 1  # still running, unscaled
