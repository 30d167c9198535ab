"""Slurm: the environment read in a job, the sbatch scripts (unit tier), and jobs on a
real Slurm of two emulated hosts (Debian's slurmctld, slurmd and munged; root only).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import slurm_cluster

from dmlbench.results import ResultsStore

needs_slurm = pytest.mark.skipif(
    bool(slurm_cluster.missing()), reason=slurm_cluster.missing() or ""
)


def _submit(slurm: slurm_cluster.SlurmCluster, *args: str) -> str:
    out = slurm.command(sys.executable, "-m", "dmlbench", "slurm", *args, "--submit")
    return out.split("submitted job ", 1)[1].split()[0]


def _output(store: Path) -> str:
    return "\n".join(f.read_text()[-3000:] for f in (store / "slurm").glob("*.out"))


def _runs(store: Path) -> list:
    return ResultsStore(store).runs() if (store / "dmlbench.sqlite").exists() else []


@needs_slurm
@pytest.mark.multiprocess
def test_one_sbatch_job_trains_across_two_hosts(slurm, tmp_path: Path) -> None:
    store = tmp_path / "store"
    job = _submit(
        slurm,
        "synthetic-mlp",
        "--nodes",
        "2",
        "--nproc-per-node",
        "1",
        "--set",
        "max_steps=20",
        "--set",
        "stop_at_target=false",
        "--store",
        str(store),
    )
    assert slurm.wait(job) == "COMPLETED", _output(store)
    (run,) = _runs(store)
    assert run.finished and run.workers == 2 and run.spec["nodes"] == 2, run.error
    hosts = run.summary.hosts
    assert sorted(set(hosts)) == sorted(slurm.addresses)  # one worker on each host
    assert run.summary.slurm_job == job
    nodes = Path(run.run_dir) / "nodes"
    assert (nodes / "node0").is_dir() and (nodes / "node1").is_dir()


@needs_slurm
@pytest.mark.multiprocess
def test_scancel_stores_the_run_as_interrupted(slurm, tmp_path: Path) -> None:
    store = tmp_path / "store"
    job = _submit(
        slurm,
        "synthetic-mlp",
        "--nodes",
        "2",
        "--set",
        "max_steps=1000000",
        "--set",
        "stop_at_target=false",
        "--store",
        str(store),
    )
    end = time.monotonic() + 120
    while time.monotonic() < end:  # until the workers have stepped
        runs = _runs(store)
        if runs and list(Path(runs[0].run_dir).glob("nodes/node*/runs/*/events.log")):
            break
        time.sleep(0.5)
    slurm.command("scancel", job)
    assert slurm.wait(job) == "CANCELLED"
    end = time.monotonic() + 30
    while time.monotonic() < end and _runs(store)[0].status == "running":
        time.sleep(0.5)
    (run,) = _runs(store)
    assert run.status == "interrupted", run.error


@needs_slurm
@pytest.mark.multiprocess
def test_a_node_that_fails_fails_the_job_naming_it(slurm, tmp_path: Path) -> None:
    """A hand-written script: `srun dmlbench run` reads the job from Slurm's environment.
    One node's spec differs, so the nodes refuse each other: the job fails, and says
    which setting differs."""
    store = tmp_path / "store"
    script = tmp_path / "job.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"
        f"#SBATCH --output={tmp_path}/%j.out\n"
        f"srun bash -c '{sys.executable} -m dmlbench run synthetic-mlp --quiet --store {store} "
        "--set max_steps=10 --set stop_at_target=false --set seed=$SLURM_NODEID'\n"
    )
    job = slurm.command("sbatch", "--parsable", str(script)).strip()
    assert slurm.wait(job) == "FAILED"
    output = next(tmp_path.glob(f"{job}.out")).read_text()
    assert "node 1 has seed=1, node 0 has 0" in output, output[-2000:]


@needs_slurm
@pytest.mark.multiprocess
def test_a_sweep_as_a_job_array_runs_each_point_once(slurm, tmp_path: Path) -> None:
    """Two array tasks run the same sweep file; the store's claims share its points."""
    store = tmp_path / "store"
    sweep = tmp_path / "pair.yaml"
    sweep.write_text(
        "name: pair\ntask: synthetic-mlp\nset: {max_steps: 10, stop_at_target: "
        "false}\naxes:\n  workers: [1, 2]\n"
    )
    job = _submit(slurm, str(sweep), "--array", "2", "--store", str(store))
    assert [slurm.wait(f"{job}_{task}") for task in (0, 1)] == ["COMPLETED"] * 2, _output(store)
    runs = _runs(store)
    assert sorted(r.workers for r in runs) == [1, 2], _output(store)
    assert all(r.finished and r.sweep == "pair" for r in runs)
    for out in (store / "slurm").glob("*.out"):  # each point: run here, or said to be not
        text = out.read_text()
        (counted,) = re.findall(r"(\d+) runs? done, 0 skipped, (?:(\d+) run by another)?", text)
        claimed = text.count("by another launcher: run ")
        assert int(counted[0]) + claimed == 2 and int(counted[1] or 0) == claimed, text


@needs_slurm
@pytest.mark.slow
def test_a_growing_batch_submits_dask_worker_jobs(slurm, tmp_path: Path, monkeypatch) -> None:
    """dask-jobqueue's SLURMCluster on the test Slurm: the scheduler in this process on
    the controller's network, each worker a Slurm job on an emulated host. The batch
    doubles each epoch (GeoDamp), the estimator scales the cluster from 1 worker to 2,
    and SLURMCluster submits a second job for it."""
    jobqueue = pytest.importorskip("dask_jobqueue")
    import numpy as np
    from distributed import Client
    from sklearn.datasets import load_digits

    from dmlbench.dask import DaskClassifier
    from dmlbench.dask.dampers import GeoDamp
    from dmlbench.models.mlp import MLP

    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype(np.float32)
    cluster = jobqueue.SLURMCluster(
        cores=1,
        processes=1,
        memory="1GB",
        walltime="00:10:00",
        python=sys.executable,
        job_directives_skip=["--mem"],  # the test nodes declare no memory
        scheduler_options={"host": slurm.control, "dashboard": False},
        log_directory=str(tmp_path / "logs"),
        death_timeout=60,
    )
    with cluster, Client(cluster, set_as_default=False) as client:
        est = DaskClassifier(
            MLP,
            module__in_features=64,
            module__hidden=[32],
            module__num_outputs=10,
            optimizer__lr=0.3,
            batch_size=GeoDamp,
            batch_size__delay=1,
            batch_size__factor=2,
            grads_per_worker=32,
            min_workers=1,
            max_workers=2,
            max_epochs=1,
            client=client,
            timeout=120,
            random_state=0,
        )
        for _ in range(3):
            est.partial_fit(x, y)
        targets = [e["updates"][0]["target_workers"] for e in est.history_]
        assert targets[0] == 1 and targets[-1] == 2
        client.wait_for_workers(2, timeout=120)
        running = slurm.command("squeue", "--noheader", "--states=RUNNING", "--format=%j")
        assert running.split().count("dask-worker") == 2  # two Slurm jobs, one worker each
        hosts = {
            a.split("//")[1].split(":")[0] for a in client.scheduler_info(n_workers=-1)["workers"]
        }
        assert hosts <= set(slurm.addresses)
        assert est.history_[-1]["updates"][-1]["workers"] >= 1


def _in_namespace(namespace: str, marker: str) -> list[int]:
    """The processes in network namespace ``namespace`` whose command line holds
    ``marker``."""
    found = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    pids = []
    for pid in found.stdout.split():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in command:
            pids.append(int(pid))
    return pids


@needs_slurm
@pytest.mark.multiprocess
def test_a_node_that_dies_fails_the_run_naming_it(slurm, tmp_path: Path) -> None:
    """Node 1's `dmlbench run` is killed mid-run: srun ends the step, and the launcher
    stores the run as failed, naming the node srun lost."""
    store = tmp_path / "store"
    job = _submit(
        slurm,
        "synthetic-mlp",
        "--nodes",
        "2",
        "--set",
        "max_steps=1000000",
        "--set",
        "stop_at_target=false",
        "--store",
        str(store),
    )
    end = time.monotonic() + 120
    victims: list[int] = []
    while time.monotonic() < end and not victims:
        runs = _runs(store)
        if runs and list(Path(runs[0].run_dir).glob("nodes/node*/runs/*/events.log")):
            victims = _in_namespace(slurm.namespaces[1], f"--rdzv-id {runs[0].run_id}")
        time.sleep(0.5)
    assert victims, _output(store)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert slurm.wait(job) == "FAILED"
    (run,) = _runs(store)
    assert run.status == "failed" and "dmlbench-node1" in (run.error or ""), run.error
