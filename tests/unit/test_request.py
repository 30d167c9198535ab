"""`dmlbench run`'s decisions, made in-process from flags, the spec file's keys and the
environment: one run or a sweep, which cluster path, where this node stores its part."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from dmlbench.errors import DmlbenchError
from dmlbench.launch.request import RunFlags, plan_run, worker_counts

STORE = Path("/tmp/store")


BATCH = {"SLURM_JOB_ID": "41", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]"}


STEP = {
    **BATCH,
    "SLURM_STEP_ID": "3",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
    "SLURM_NODEID": "1",
}


def plan(config: dict | None = None, env: dict | None = None, **flags):
    return plan_run(RunFlags(store=STORE, **flags), config or {}, env or {}, "digits-mlp")


def test_one_run_takes_the_task_from_the_argument_then_the_file_then_the_default() -> None:
    assert plan().task == "digits-mlp"
    assert plan({"task": "breast-cancer-logreg"}).task == "breast-cancer-logreg"
    request = plan({"task": "breast-cancer-logreg"}, task="digits-mlp", workers="2")
    assert (request.task, request.workers, request.sweep) == ("digits-mlp", 2, None)
    assert request.layout == {"nodes": None, "nproc_per_node": None}
    assert request.store == STORE and request.rdzv_endpoint is None


def test_a_list_scaling_or_repeats_make_a_sweep_named_after_its_mode() -> None:
    assert plan(workers="1,2,4").sweep.name == "digits-mlp-workers"
    assert plan(workers="1,2,4").sweep.workers == [1, 2, 4]
    strong = plan(workers="1,2", global_batch=64).sweep
    assert (strong.scaling, strong.name) == ("strong", "digits-mlp-strong")
    weak = plan(scaling="weak", name="mine").sweep
    assert (weak.scaling, weak.name, weak.workers) == ("weak", "mine", [])
    assert plan(repeats=3).sweep.repeats == 3
    assert plan(repeats=1).sweep is None
    assert plan(workers="1,2", name="mine", rerun="always").sweep.name == "mine"


def test_a_sweeps_options_on_one_run_are_refused_not_dropped() -> None:
    """`run --name X` and `run --rerun always` of one run were accepted and did nothing:
    one run is stored under an id of its own, and there is nothing stored to skip."""
    with pytest.raises(DmlbenchError, match=r"^--name goes with a sweep"):
        plan(name="mine")
    with pytest.raises(DmlbenchError, match=r"^--name and --rerun go with a sweep"):
        plan(workers="2", name="mine", rerun="never")


def test_worker_lists_are_refused_in_one_line() -> None:
    assert worker_counts("1, 2,2,4") == [1, 2, 4]
    for text in ("two", "0,2", ","):
        with pytest.raises(DmlbenchError, match="--workers"):
            worker_counts(text)


def test_one_node_of_a_job_across_hosts() -> None:
    request = plan(nnodes=2, rdzv_endpoint="10.0.0.1:29400", rdzv_id="job-7")
    assert request.layout == {"nodes": 2, "nproc_per_node": 1}  # torchrun's default
    assert (request.rdzv_endpoint, request.rdzv_id) == ("10.0.0.1:29400", "job-7")
    # workers given (flag or file): the count per node is left to the spec
    assert plan({"workers": 4}, rdzv_endpoint="h:1").nproc_per_node is None
    with pytest.raises(DmlbenchError, match="--nnodes needs --rdzv-endpoint"):
        plan(nnodes=2)
    with pytest.raises(DmlbenchError, match="not both"):
        plan(nnodes=2, nodes=2, rdzv_endpoint="h:1")
    with pytest.raises(DmlbenchError, match="not a sweep"):
        plan(rdzv_endpoint="h:1", workers="1,2")
    with pytest.raises(DmlbenchError, match="--rdzv-id"):  # it names a folder on each node
        plan(rdzv_endpoint="h:1", rdzv_id="../x")


def test_an_emulated_cluster_defaults_to_one_worker_per_node() -> None:
    assert plan(nodes=2).layout == {"nodes": 2, "nproc_per_node": 1}
    assert plan(nodes=2, workers="4").layout == {"nodes": 2, "nproc_per_node": None}


def test_a_slurm_batch_script_launches_on_all_the_jobs_nodes() -> None:
    request = plan(env=BATCH)
    assert request.layout == {"nodes": 2, "nproc_per_node": 1}
    assert request.store == STORE and request.rdzv_endpoint is None
    # the file's or the flag's layout wins; a sweep stays on the launcher's node
    assert plan({"nodes": 1}, env=BATCH).nodes is None
    assert plan(env=BATCH, nodes=1).nodes == 1
    assert plan(env=BATCH, workers="1,2").nodes is None


def test_a_slurm_step_is_one_node_that_keeps_its_part_apart() -> None:
    # (the endpoint Slurm's node list gives is tested against a real Slurm, test_slurm.py)
    request = plan(env=STEP, rdzv_endpoint="gpu07:29400", nnodes=2)
    assert request.store == STORE / "nodes" / "node1"
    assert request.layout == {"nodes": 2, "nproc_per_node": 1}
    assert request.rdzv_id == "dmlbench"  # an endpoint given: the id given too


def test_the_launch_path_is_decided_once_from_what_plan_run_read() -> None:
    from dmlbench.launch.request import launch_path
    from dmlbench.launch.slurm import SlurmJob

    batch = plan(env=BATCH)
    assert batch.slurm is not None and not batch.slurm.in_step
    assert launch_path(batch.nodes or 1, False, batch.slurm) == "slurm"  # the batch script
    assert launch_path(2, False, None) == "cluster"  # no Slurm job: an emulated cluster
    step = SlurmJob.from_env(STEP)  # a task of srun: one node of the job
    assert step is not None and launch_path(2, True, step) == "node"
    assert launch_path(1, False, batch.slurm) == "local"  # one node needs no srun
    assert plan().slurm is None and launch_path(1, False, None) == "local"


def test_the_fork_server_starts_early_only_where_this_process_starts_the_workers() -> None:
    from dmlbench.launch.request import early_allocator

    assert early_allocator(plan(), {}, []) == "jemalloc"  # the spec's default
    assert early_allocator(plan(), {"cpu_allocator": "tuned"}, []) == "tuned"
    given = early_allocator(plan(), {"cpu_allocator": "tuned"}, ["cpu_allocator=returning"])
    assert given == "returning"  # --set wins over the file, as in the resolution
    one_node = plan({"nodes": 2}, nnodes=2, rdzv_endpoint="h:1")
    assert early_allocator(one_node, {"nodes": 2}, []) == "jemalloc"  # this node's workers
    # another process starts them: an emulated cluster's agents, a Slurm job's steps
    assert early_allocator(plan(nodes=2), {}, []) is None
    assert early_allocator(plan(), {"nodes": 2}, []) is None
    assert early_allocator(plan(), {}, ["nodes=4"]) is None
    assert early_allocator(plan(env=BATCH), {}, []) is None
    assert early_allocator(plan(), {}, ["not an override"]) is None  # resolution says why


def test_the_launch_takes_the_fork_server_started_early(monkeypatch) -> None:
    from multiprocessing import forkserver

    from dmlbench.launch import forkserver as server

    monkeypatch.setattr(server, "PRELOAD", ("json",))  # a light server: no torch
    monkeypatch.delenv(server.START_METHOD_ENV, raising=False)
    running = forkserver._forkserver
    try:
        server.start_early("default")
        early = running._forkserver_pid
        assert early is not None
        assert server.start_method({}) == "forkserver" and running._forkserver_pid == early
        # a run on another allocator gets a server started in its environment
        assert server.start_method({"MALLOC_ARENA_MAX": "1"}) == "forkserver"
        assert running._forkserver_pid not in (None, early)
    finally:
        running._stop()
        server._SERVED = None  # no server now: the next launch starts one


def test_dask_and_the_launcher_share_the_fork_server_without_breaking_each_other(
    monkeypatch,
) -> None:
    """Dask's local workers fork from a server that ignores Ctrl-C, started in the
    environment they need. A process has one server: the launcher stopped whatever server
    ran to start its own, which would have left a live Dask cluster's nannies reading
    their workers as dead; it spawns its workers instead until the cluster is closed."""
    from multiprocessing import forkserver

    from dmlbench.launch import forkserver as server

    monkeypatch.setattr(server, "PRELOAD", ("json",))  # a light server: no torch
    monkeypatch.delenv(server.START_METHOD_ENV, raising=False)
    running = forkserver._forkserver
    if running._forkserver_pid is not None:  # another test's: start from none
        running._stop()
    try:
        assert server.quiet_start_method({"DMLBENCH_TEST_MARK": "quiet"}) == "forkserver"
        quiet = running._forkserver_pid
        environ, deadline = b"", time.monotonic() + 30
        while not environ and time.monotonic() < deadline:  # empty until its exec is done
            environ = Path(f"/proc/{quiet}/environ").read_bytes()
            time.sleep(0.01)
        assert b"DMLBENCH_TEST_MARK=quiet" in environ
        status = Path(f"/proc/{quiet}/status").read_text()
        ignored = int(
            next(line for line in status.splitlines() if line.startswith("SigIgn:"))[7:], 16
        )
        assert ignored & (1 << (signal.SIGINT - 1))  # and so do the workers it forks
        assert "DMLBENCH_TEST_MARK" not in os.environ  # only the server's
        assert server.quiet_start_method({}) == "forkserver" and running._forkserver_pid == quiet
        # a launch while the Dask cluster lives: its workers are spawned, the server kept
        assert server.start_method({}) == "spawn" and running._forkserver_pid == quiet
        server.quiet_released()  # the cluster closed: the launcher takes the server over
        assert server.start_method({}) == "forkserver"
        assert running._forkserver_pid not in (None, quiet)
        assert server.quiet_start_method({}) == "spawn"  # not the launcher's, with torch
    finally:
        running._stop()
        server._SERVED, server._QUIET_BUSY = None, False


def test_an_inline_sweep_is_the_sweep_file_it_stands_for() -> None:
    from dmlbench.spec.sweep import validate_sweep

    config = {"exchange": "ddp", "plugins": ["my_tasks"]}
    request = plan(config, workers="1,2", global_batch=64, repeats=2)
    sweep = validate_sweep(request.sweep_file(64, 3, config))
    assert (sweep.name, sweep.task, sweep.scaling) == ("digits-mlp-strong", "digits-mlp", "strong")
    assert (sweep.global_batch, sweep.repeats, sweep.seed) == (64, 2, 3)
    assert sweep.axes == {"workers": [1, 2]} and sweep.plugins == ["my_tasks"]
    assert sweep.set == {"exchange": "ddp"}  # the file's keys, every run


def test_a_list_of_exchanges_networks_or_models_is_a_sweeps_axis() -> None:
    """`run --network 1gbit,100mbit` was refused as an unknown profile ("did you mean
    '100mbit'?"), and so were lists of exchanges and models, where a list of worker
    counts makes a sweep."""
    from dmlbench.spec.sweep import validate_sweep

    request = plan(workers="2", exchange="allreduce, ddp,allreduce", network="1gbit")
    assert request.sweep.name == "digits-mlp-exchange" and request.sweep.workers == [2]
    assert request.sweep.axes == {"exchange": ["allreduce", "ddp"]}  # repeats dropped
    assert request.chosen == {"network": "1gbit"}  # one value: every run's
    sweep = validate_sweep(request.sweep_file(None, 0, {}))
    assert sweep.axes == {"workers": [2], "exchange": ["allreduce", "ddp"]}
    both = plan(workers="1,2", network="1gbit,250mbit", model="mlp,linear", scaling="weak")
    assert both.sweep.name == "digits-mlp-weak-network-model" and both.chosen == {}
    assert plan(workers="1,2", model="mlp,linear").sweep.name == "digits-mlp-workers-model"
    one = plan(exchange="ddp", model="linear")
    assert one.sweep is None and one.chosen == {"exchange": "ddp", "model": "linear"}
    assert plan(exchange="ddp,zero1", name="mine").sweep.name == "mine"  # a sweep's option
    with pytest.raises(DmlbenchError, match=r"^--model ', ,': give a name, or a list"):
        plan(model=", ,")  # not the recipe's model without a word


def test_a_sweep_without_worker_counts_keeps_the_spec_files_count() -> None:
    """`run -c spec.yaml --repeats 2` (or `--exchange a,b`) with `workers: 2` in the file
    ran every point on 1 worker: the inline sweep's worker axis was [1] where none was
    given, and an axis is set over the file's keys."""
    from dmlbench.spec.sweep import validate_sweep
    from dmlbench.sweep import plan_sweep

    config = {"task": "digits-mlp", "workers": 2}
    for flags in ({"repeats": 2}, {"exchange": "allreduce,ddp"}, {"scaling": "weak"}):
        request = plan(config, **flags)
        sweep = validate_sweep(request.sweep_file(None, 0, config))
        assert "workers" not in sweep.axes, flags
        assert {run.spec.workers for run in plan_sweep(sweep).runs} == {2}, flags
    listed = plan(config, workers="1,4", repeats=2)
    assert validate_sweep(listed.sweep_file(None, 0, config)).axes == {"workers": [1, 4]}
