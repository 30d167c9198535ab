"""Attack a real dmlbench and measure how each fault is met: what happens, how long
until it is detected, and what is kept. The table in RELIABILITY.md comes from here.

    sudo .venv/bin/python benchmarks/reliability.py            # every attack, ~4 minutes
    sudo .venv/bin/python benchmarks/reliability.py --only stall,disk

Root is needed for the attacks that use a second network namespace, a small tmpfs or a
PID namespace; without it they are reported as skipped. Results go to
benchmarks/results/reliability.json (compact: one record per attack).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from summary import run_main, write_summary

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the test plugin tasks (crash-hang) and helpers
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])

from helpers import process_tree, spawned_workers, wait_until_gone  # noqa: E402

from dmlbench.errors import DmlbenchError  # noqa: E402
from dmlbench.results.events import Event, parse_line  # noqa: E402

DMLBENCH = [sys.executable, "-m", "dmlbench"]
LONG = ["--set", "max_epochs=100000", "--set", "stop_at_target=false", "--quiet"]
Attack = Callable[[Path], dict[str, Any]]
ATTACKS: dict[str, Attack] = {}


def attack(name: str) -> Callable[[Attack], Attack]:
    def register(fn: Attack) -> Attack:
        ATTACKS[name] = fn
        return fn

    return register


def row(fault: str, happens: str, detect_s: float | None, kept: str) -> dict[str, Any]:
    return {"fault": fault, "happens": happens, "detect_s": detect_s, "kept": kept}


def stored(store: Path) -> list[Any]:  # RunRecord, imported late (the worker's view)
    from dmlbench.results import ResultsStore

    return ResultsStore(store).runs()


def wait_for_eval(store: Path, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for log in store.glob("runs/*/events.log"):
            if '"eval_accuracy"' in log.read_text():
                return log.parent
        time.sleep(0.1)
    raise RuntimeError("the run never evaluated")


def needs_root() -> None:
    if os.geteuid() != 0:
        raise PermissionError("needs root")


# ------------------------------------------------------------------------------ workers


def _stall(tmp: Path, how: str) -> dict[str, Any]:
    """Run 2 workers until one stalls; return the stored run and the seconds from the
    stall to the launcher's exit."""
    store = tmp / how
    task = (
        ["crash-hang", "--plugin", "dmlbench_test_plugins", "--quiet"]
        if how == "hang"
        else ["synthetic-mlp", *LONG]
    )
    proc = subprocess.Popen(
        [*DMLBENCH, "run", *task, "--workers", "2", "--store", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if how == "hang":  # rank 1 sleeps in its 6th forward pass, a moment after run_start
        proc.wait(timeout=600)
        ended = time.time()
        events = next(store.glob("runs/*/events.log")).read_text().splitlines()
        first = next(parse_line(e) for e in events if '"run_start"' in e)
        if first is None:
            sys.exit("the hung run's run_start line does not parse")
        started = first["time_ms"] / 1e3
        return {"run": stored(store)[0], "detected": ended - started}
    run_dir = wait_for_eval(store)
    beat = json.loads((run_dir / "heartbeats" / "rank-1.json").read_text())
    os.kill(beat["pid"], signal.SIGSTOP)
    start = time.monotonic()
    proc.wait(timeout=600)
    return {"run": stored(store)[0], "detected": time.monotonic() - start}


@attack("stall")
def stopped_worker(tmp: Path) -> dict[str, Any]:
    """SIGSTOP one worker of a 2-worker run (default stall_timeout_s = 60)."""
    found = _stall(tmp, "stop")
    run = found["run"]
    return row(
        "a worker is stopped (SIGSTOP) mid-run",
        f"run {run.status}: {run.error}",
        found["detected"],
        f"its evaluations ({len(run.evals)}), the event log, worker logs",
    )


@attack("hang")
def hung_worker(tmp: Path) -> dict[str, Any]:
    """Rank 1 sleeps forever in its forward pass; rank 0 waits in the all-reduce."""
    found = _stall(tmp, "hang")
    run = found["run"]
    return row(
        "a worker hangs in its forward pass; its peer waits in the all-reduce",
        f"run {run.status}: {run.error}",
        found["detected"],
        "the event log, worker logs",
    )


@attack("orphans")
def killed_launcher(tmp: Path) -> dict[str, Any]:
    """SIGKILL the launcher while its workers are importing (start-up)."""
    store = tmp / "orphans"
    with (tmp / "orphans.log").open("w") as out:
        proc = subprocess.Popen(
            [*DMLBENCH, "run", "synthetic-mlp", "--workers", "2", *LONG, "--store", str(store)],
            stdout=out,
            stderr=out,
        )
    while len(spawned_workers(proc.pid)) < 2:
        time.sleep(0.02)
    time.sleep(0.5)
    workers = spawned_workers(proc.pid)
    proc.kill()
    proc.wait()
    start = time.monotonic()
    left = wait_until_gone(workers, timeout=120)
    gone = time.monotonic() - start
    from dmlbench.results import ResultsStore

    status = (
        ResultsStore(store).runs()[0].status
        if (store / "dmlbench.sqlite").exists()
        else "no row yet"
    )
    return row(
        "the launcher is SIGKILLed while its workers start",
        f"{len(workers) - len(left)} of {len(workers)} workers exit on their own "
        f"(PR_SET_PDEATHSIG); the row reads {status} on the next open",
        gone,
        "the run folder (spec, record)",
    )


# ------------------------------------------------------------------------------ listeners


@attack("listeners")
def listeners(tmp: Path) -> dict[str, Any]:
    """During a 2-worker run, connect from a second network namespace to every port the
    launcher and workers listen on."""
    needs_root()
    from test_listeners import Outsider, is_loopback
    from test_listeners import listeners as listening

    store = tmp / "listen"
    proc = subprocess.Popen(
        [*DMLBENCH, "run", "synthetic-mlp", "--workers", "2", *LONG, "--store", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_eval(store)
        found = listening(process_tree(proc.pid))
        with Outsider() as outsider:
            start = time.monotonic()
            reached = outsider.reachable(sorted({port for _, port, _ in found}))
            took = time.monotonic() - start
    finally:
        proc.kill()
        proc.wait()
    public = [f for f in found if not is_loopback(f[0])]
    return row(
        "another host connects to the run's c10d stores and gloo ports",
        f"{len(found)} listeners, {len(public)} beyond loopback; {len(reached)} "
        "reached from the other namespace",
        took,
        "—",
    )


# ------------------------------------------------------------------------------ input


@attack("sweeps")
def hostile_sweeps(tmp: Path) -> dict[str, Any]:
    from dmlbench.spec.sweep import load_sweep_file
    from dmlbench.sweep import plan_sweep

    cases = {
        "derived 10**10**10": "task: synthetic-mlp\nderived: {momentum: '10**10**10'}\n",
        "billion laughs (YAML aliases)": "\n".join(
            ["task: synthetic-mlp", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol"]']
            + [
                f"{c}: &{c} [{','.join(['*' + p] * 9)}]"
                for p, c in zip("abcdefgh", "bcdefghi", strict=False)
            ]
            + ["set: {momentum: *i}"]
        ),
        "100,000-deep expression": "task: synthetic-mlp\nderived: {momentum: '"
        + "(" * 100_000
        + "1"
        + ")" * 100_000
        + "'}\n",
    }
    worst, words = 0.0, []
    for name, text in cases.items():
        path = tmp / "hostile.yaml"
        path.write_text(text)
        start = time.monotonic()
        try:
            plan_sweep(load_sweep_file(path))
            outcome = "ACCEPTED"
        except DmlbenchError as error:
            outcome = f"refused: {str(error).replace(str(tmp), '…')[:80]}"
        worst = max(worst, time.monotonic() - start)
        words.append(f"{name}: {outcome}")
    return row(
        "hostile sweep files (10**10**10, a 1-KB billion laughs, 100,000-deep nesting)",
        "; ".join(words),
        worst,
        "— (nothing starts)",
    )


@attack("data")
def incomplete_data(tmp: Path) -> dict[str, Any]:
    from helpers import write_cifar_binary, write_libsvm

    from dmlbench.data.libsvm import load_libsvm
    from dmlbench.launch import run_benchmark
    from dmlbench.resolve import resolve_spec
    from dmlbench.results import ResultsStore

    write_cifar_binary(tmp / "cifar", per_batch=100)  # whole records, far too few
    store = ResultsStore(tmp / "data-store")
    spec = resolve_spec("cifar10-resnet20", overrides=[f"data_dir={tmp / 'cifar'}"])
    start = time.monotonic()
    try:
        run_benchmark(spec, store, echo=False)
        cifar = "ACCEPTED"
    except DmlbenchError as error:
        cifar = f"refused: {str(error).replace(str(tmp), '…')}"
    took = time.monotonic() - start
    path = tmp / "eps.svm"
    write_libsvm(path, rows=10, features=4)
    path.write_text(path.read_text() + "2 1:nan\n")
    try:
        load_libsvm(path, 4, labels=(-1.0, 1.0))
        libsvm = "ACCEPTED"
    except DmlbenchError as error:
        libsvm = f"refused: {str(error).replace(str(tmp), '…')}"
    return row(
        "incomplete CIFAR-10 (500 images a batch); a LIBSVM row with a NaN and label 2",
        f"CIFAR {cifar}; LIBSVM {libsvm}",
        took,
        f"— ({len(store.runs())} rows: nothing recorded)",
    )


# ------------------------------------------------------------------------------ disk, rows


@attack("disk")
def full_disk(tmp: Path) -> dict[str, Any]:
    needs_root()
    from dmlbench.errors import ResultsNotStored
    from dmlbench.launch import run_benchmark
    from dmlbench.resolve import recorded_deviations, resolve_spec
    from dmlbench.results import ResultsStore
    from dmlbench.results.recover import import_run_dir

    disk = tmp / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], check=True)
    filler = disk / "filler"
    filled: list[float] = []

    def fill(events: list[Event]) -> None:
        if any(e["key"] == "run_stop" for e in events) and not filler.exists():
            filled.append(time.monotonic())
            for chunk in (65536, 512):
                with contextlib.suppress(OSError), filler.open("ab", buffering=0) as out:
                    while True:
                        out.write(b"\0" * chunk)

    try:
        store = ResultsStore(disk / "store")
        spec = resolve_spec("synthetic-mlp", workers=2, overrides=["max_epochs=3"])
        try:
            run_benchmark(spec, store, echo=False, progress=fill)
            return row("the disk fills as a run ends", "STORED ANYWAY", None, "—")
        except ResultsNotStored as error:
            told = time.monotonic() - filled[0]
            message = str(error)
        run_dir = Path(message.rsplit("--import ", 1)[1])
        filler.unlink()
        imported = import_run_dir(
            ResultsStore(disk / "store"), run_dir, division=recorded_deviations
        )
        evals = len(ResultsStore(disk / "store").runs(imported.run_id)[0].evals)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    return row(
        "the store's disk is full when a run ends",
        "one line: the run was not stored, where it is kept, the --import command; "
        "the store still opens read-only",
        told,
        f"events, spec, record in the run folder; imported later as "
        f"{imported.status}, its evaluations ({evals}) included",
    )


@attack("pidns")
def pid_namespace(tmp: Path) -> dict[str, Any]:
    needs_root()
    from test_faults import _begin_in_a_pid_namespace

    from dmlbench.results import ResultsStore

    store = tmp / "pidns"
    launcher = _begin_in_a_pid_namespace(store)
    assert launcher.stdout is not None
    pid, run_id = launcher.stdout.readline().split()
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
    start = time.monotonic()
    while ResultsStore(store).runs(run_id)[0].status == "running":
        time.sleep(0.05)
    took = time.monotonic() - start
    return row(
        f"a launcher recorded as pid {pid} (its PID namespace) is killed",
        "its row reads interrupted at the next open: the launcher's flock is free",
        took,
        "the run folder",
    )


@attack("subnets")
def concurrent_networks(tmp: Path) -> dict[str, Any]:
    needs_root()
    from dmlbench.netem import Topology
    from dmlbench.netem.profiles import ResolvedNetwork

    network = ResolvedNetwork(name="t", rate_bps=1e9)
    start = time.monotonic()
    with Topology(2, network) as first, Topology(2, network) as second:
        subnets = (first.subnet, second.subnet)
    return row(
        "two emulated networks at once from one pid (pid % 100 collided)",
        f"subnets 10.{subnets[0]}/16 and 10.{subnets[1]}/16",
        time.monotonic() - start,
        "—",
    )


# ------------------------------------------------------------------------------ Dask


def _silent_listener() -> tuple[socket.socket, str]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        held = []
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)

    threading.Thread(target=serve, daemon=True).start()
    return server, f"tcp://127.0.0.1:{server.getsockname()[1]}"


@attack("dask-address")
def dask_address(tmp: Path) -> dict[str, Any]:
    import numpy as np

    from dmlbench.dask import DaskClassifier
    from dmlbench.models.mlp import MLP

    x, y = np.zeros((20, 4), np.float32), np.arange(20) % 2
    words, worst = [], 0.0
    server, silent = _silent_listener()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()
    for name, address in (("a silent listener", silent), ("a closed port", refused)):
        est = DaskClassifier(
            MLP, module__in_features=4, module__hidden=[4], module__num_outputs=2, client=address
        )
        start = time.monotonic()
        try:
            est.fit(x, y)
            words.append(f"{name}: ACCEPTED")
        except ConnectionError as error:
            words.append(f"{name}: {str(error).split(' (')[0][:60]}")
        worst = max(worst, time.monotonic() - start)
    server.close()
    return row(
        "client= a silent listener, or a closed port (timeout=120 s)",
        "; ".join(words),
        worst,
        "— (nothing starts)",
    )


@attack("dask-worker")
def dask_worker_lost(tmp: Path) -> dict[str, Any]:
    import warnings

    from dask_modules import KillsAWorker
    from distributed import Client, LocalCluster
    from sklearn.datasets import load_digits

    from dmlbench.dask import DaskClassifier
    from dmlbench.models.mlp import MLP

    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype("float32")
    pid_file = tmp / "dask.pid"
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        pid_file.write_text(str(min(client.run(os.getpid).values())))
        est = DaskClassifier(
            MLP,
            module__in_features=64,
            module__hidden=[32],
            module__num_outputs=10,
            client=client,
            optimizer__lr=0.3,
            batch_size=KillsAWorker,
            batch_size__initial=64,
            batch_size__at=4,
            batch_size__pid_file=str(pid_file),
            grads_per_worker=32,
            min_workers=2,
            max_workers=2,
            max_epochs=2,
        )
        start = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(x, y)
        took = time.monotonic() - start
    notes = [str(w.message) for w in caught if "lost a worker" in str(w.message)]
    return row(
        "a Dask worker is SIGKILLed between two updates",
        f"the fit finishes ({len(est.history_)} epochs, score "
        f"{est.score(x, y):.3f}); {len(notes)} warning(s): its tasks ran elsewhere",
        None,
        f"the whole fit (2 epochs in {took:.1f} s)",
    )


# ------------------------------------------------------- job files, outputs, recovery (issue 40)


def _one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}, nothing said"


def _timed(*args: str, **kwargs: Any) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run([*DMLBENCH, *args], capture_output=True, text=True, timeout=600, **kwargs)
    return done, time.monotonic() - start


@attack("sbatch")
def sbatch_injection(tmp: Path) -> dict[str, Any]:
    """Shell in every value that reaches a generated sbatch script, run with bash."""
    marker = tmp / "PWNED"
    said, took = [], 0.0
    for option in ("--partition", "--time", "--account", "--store"):
        done, seconds = _timed("slurm", "digits-mlp", option, f"x\ntouch {marker}")
        took = max(took, seconds)
        if done.stdout:  # a script was written: run it as the attack did
            subprocess.run(["bash"], input=done.stdout, capture_output=True, text=True)
        said.append(f"{option}: exit {done.returncode}")
    sweep = tmp / "s.yaml"
    sweep.write_text(
        json.dumps(
            {
                "name": f"../../../../{tmp}/x\ntouch {marker}",
                "task": "synthetic-mlp",
                "axes": {"workers": [1]},
            }
        )
    )
    done, _ = _timed("slurm", str(sweep), "--store", str(tmp / "store"))
    script = done.stdout.replace(f"{sys.executable} -m dmlbench sweep", "echo")
    subprocess.run(["bash"], input=script, capture_output=True, text=True)
    refused = _one_line(_timed("slurm", "digits-mlp", "--partition", "x\ntouch y")[0])
    return row(
        "text with a newline in `slurm --partition/--time/--account/--store` and a sweep's "
        "`name:`, the script then run with bash",
        f"{'a file was created: INJECTED' if marker.exists() else 'nothing ran'}; "
        f"{', '.join(said)}; e.g. `{refused}`; the sweep name becomes the job name "
        f"`{next(line for line in done.stdout.splitlines() if 'job-name' in line)[:60]}…`",
        took,
        "—",
    )


@attack("outputs")
def outputs_over_devices(tmp: Path) -> dict[str, Any]:
    """report/export/--png/slurm --out/k8s --out aimed at a device, a folder, a symlink."""
    needs_root()
    from dmlbench.resolve import deviations, resolve_spec
    from dmlbench.results import ResultsStore
    from dmlbench.results.environment import collect_environment
    from dmlbench.results.summary import summarize

    store = tmp / "store"
    spec = resolve_spec("synthetic-mlp")
    results = ResultsStore(store)
    results.begin("r1", spec.to_json_dict(), deviations(spec), collect_environment())
    results.finish("r1", status="failed", summary=summarize([]), evals=[], error="x")
    device = tmp / "full"
    os.mknod(device, 0o600 | 0o020000, os.makedev(1, 7))  # a character device, like /dev/full
    victim = tmp / "victim"
    victim.write_text("keep")
    folder = tmp / "tables"
    folder.mkdir()
    (folder / "runs.csv").symlink_to(victim)
    cases = [
        ("report", "--store", str(store), "--out", str(device)),
        ("report", "--store", str(store), "--out", str(tmp)),
        ("report", "--store", str(store), "--out", ""),
        ("report", "--store", str(store), "--png", str(victim)),
        ("export", "--store", str(store), "--out", str(folder)),
        ("export", "--store", str(store), "--out", str(victim)),
        ("slurm", "digits-mlp", "--out", str(device)),
        ("k8s", "digits-mlp", "--image", "i", "--out", str(device)),
    ]
    results_said, took = [], 0.0
    for args in cases:
        done, seconds = _timed(*args)
        took = max(took, seconds)
        results_said.append((done.returncode, "Traceback" in done.stderr, _one_line(done)))
    intact = os.path.exists(device) and not Path(device).is_file() and victim.read_text() == "keep"
    one_line = all(code == 2 and not trace for code, trace, _ in results_said)
    return row(
        "`report --out` a device node (as root), a folder or ''; `--png` a file; `export` "
        "into a folder with a planted symlink or onto a file; `slurm/k8s --out` a device",
        f"{len(cases)} of {len(cases)} refused in one line"
        if one_line
        else f"NOT ALL REFUSED: {results_said}"
        f"; device and link target intact: {intact}; e.g. `{results_said[0][2]}`, "
        f"`{results_said[4][2]}`",
        took,
        "the device, the link's target",
    )


@attack("paths")
def ids_as_paths(tmp: Path) -> dict[str, Any]:
    """--rdzv-id and sweep names that would put files outside the store."""
    store = tmp / "store"
    said, took = [], 0.0
    for rdzv_id in ("../../x", str(tmp / "outside")):
        done, seconds = _timed(
            "run",
            "synthetic-mlp",
            "--nnodes",
            "2",
            "--rdzv-endpoint",
            "127.0.0.1:1",
            "--rdzv-id",
            rdzv_id,
            "--store",
            str(store),
        )
        took = max(took, seconds)
        said.append(_one_line(done))
    outside = (tmp / "outside").exists() or (tmp / "x").exists()
    return row(
        "`--rdzv-id ../../x` or an absolute path",
        f"{'A FOLDER WAS MADE OUTSIDE THE STORE' if outside else 'refused'}: `{said[0]}`",
        took,
        "—",
    )


@attack("import")
def damaged_import(tmp: Path) -> dict[str, Any]:
    """`results --import` on damaged run folders."""
    from dmlbench.resolve import resolve_spec
    from dmlbench.results.environment import collect_environment
    from dmlbench.results.rundir import create_run_dir, write_json

    store = tmp / "store"
    spec = resolve_spec("synthetic-mlp").to_json_dict()
    evaluation = {
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
    cases = {
        "bytes": (spec, b"\xff\xfe\x80\n[1]\n" + json.dumps(evaluation).encode()),
        "recipe": ({k: v for k, v in spec.items() if k != "recipe"}, b""),
        "seed": ({**spec, "seed": 10**30}, b""),
        "task": ({**spec, "task": "no-such-task"}, b""),
    }
    said, took = [], 0.0
    for name, (data, events) in cases.items():
        _, folder = create_run_dir(store / "runs", data, name)
        write_json(folder / "run.json", {"environment": collect_environment(), "deviations": {}})
        (folder / "events.jsonl").write_bytes(events)
        done, seconds = _timed("results", "--store", str(store), "--import", str(folder))
        took = max(took, seconds)
        trace = " TRACEBACK" if "Traceback" in done.stderr else ""
        said.append(
            f"{name}: exit {done.returncode}{trace}, "
            f"`{(done.stdout.strip() or _one_line(done))[-110:]}`"
        )
    return row(
        "`results --import` of folders with non-UTF-8 and non-object lines, no recipe, "
        "seed 10**30, an unknown task",
        "; ".join(said),
        took,
        "what is readable (the evaluation)",
    )


@attack("threads")
def threads(tmp: Path) -> dict[str, Any]:
    done, took = _timed(
        "run", "synthetic-mlp", "--set", "threads_per_worker=600", "--store", str(tmp / "s")
    )
    return row(
        "`threads_per_worker=600` (1,206 threads in one process before)",
        f"exit {done.returncode}: `{_one_line(done)}`",
        took,
        "— (nothing starts)",
    )


@attack("markup")
def markup_and_sizes(tmp: Path) -> dict[str, Any]:
    """A sweep named x[/] [bold]y; a 120 KB --set; a seed of 2^63; an emptied store."""
    store = tmp / "store"
    sweep = tmp / "s.yaml"
    sweep.write_text(
        "name: 'x[/] [bold]y'\ntask: synthetic-mlp\nset: {max_steps: 3}\naxes: {workers: [1]}\n"
    )
    done, took = _timed("sweep", str(sweep), "--store", str(store))
    hint = next((line for line in done.stdout.splitlines() if "Report:" in line), "no hint")
    huge, _ = _timed("run", "synthetic-mlp", "--set", "exchange=" + "x" * 120_000, "--dry-run")
    seed, _ = _timed("run", "synthetic-mlp", "--seed", str(2**63), "--dry-run")
    (store / "dmlbench.sqlite").write_bytes(b"")
    emptied, _ = _timed("results", "--store", str(store))
    return row(
        "a sweep named `x[/] [bold]y`; a 120 KB `--set` value; `--seed 2**63`; the "
        "store's database emptied",
        f"exit {done.returncode}, the hint printed: `{hint.strip()[-60:]}`; "
        f"{len(huge.stderr):,} characters of error; `{_one_line(seed)[-70:]}`; "
        f"`{_one_line(emptied)[:90]}…`",
        took,
        "the sweep's run",
    )


@attack("sweep-signals")
def signals_between_runs(tmp: Path) -> dict[str, Any]:
    """SIGINT at random moments of a sweep of short runs (2 of 13 leaked a traceback)."""
    import random

    sweep = tmp / "s.yaml"
    sweep.write_text(
        "name: quick\ntask: synthetic-mlp\nset: {max_steps: 5}\naxes: {workers: [1]}\nrepeats: 6\n"
    )
    chance = random.Random(0)
    codes, tracebacks, took = [], 0, 0.0
    for trial in range(8):
        proc = subprocess.Popen(
            [*DMLBENCH, "sweep", str(sweep), "--store", str(tmp / f"s{trial}"), "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        time.sleep(chance.uniform(6.0, 20.0))
        os.killpg(proc.pid, signal.SIGINT)
        start = time.monotonic()
        out, err = proc.communicate(timeout=120)
        took = max(took, time.monotonic() - start)
        codes.append(proc.returncode)
        tracebacks += ("Traceback" in out + err) or ("KeyboardInterrupt" in out + err)
    return row(
        "Ctrl-C at a random moment of a sweep of short runs (8 trials, 6–20 s in)",
        f"exit codes {codes}; {tracebacks} of 8 printed a traceback",
        took,
        "every finished run",
    )


# ---------------------------------------------------------------- multi-node (issue 40)


def _cluster(store: Path, *extra: str, sigint_ignored: bool = False) -> subprocess.Popen:
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    return subprocess.Popen(
        [
            *DMLBENCH,
            "run",
            "synthetic-mlp",
            "--nodes",
            "2",
            "--nproc-per-node",
            "2",
            "--store",
            str(store),
            "--quiet",
            "--json",
            "--set",
            "max_steps=1000000",
            "--set",
            "max_epochs=100000",
            "--set",
            "stop_at_target=false",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ignore,
    )


def _cluster_training(store: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        logs = list(store.glob("runs/*/nodes/*/runs/*/events.jsonl"))
        if logs and '"run_start"' in logs[0].read_text():
            return
        time.sleep(0.2)
    raise RuntimeError("the emulated cluster never trained")


def _cluster_end(proc: subprocess.Popen, store: Path, start: float) -> tuple[str, float, bool]:
    _, err = proc.communicate(timeout=900)
    took = time.monotonic() - start
    from dmlbench.netem import leftovers

    run = stored(store)[0]
    left = leftovers()
    return (
        f"exit {proc.returncode}, run {run.status}: {run.error}; left in ip netns/link: "
        f"{len(left)}",
        took,
        "Traceback" in err,
    )


def _heartbeat_pid(store: Path, pattern: str) -> int:
    path = next(store.glob(f"runs/*/nodes/{pattern}"))
    return int(json.loads(path.read_text())["pid"])


@attack("cluster-frozen-agent")
def frozen_agent(tmp: Path) -> dict[str, Any]:
    needs_root()
    store = tmp / "s"
    proc = _cluster(store)
    _cluster_training(store)
    os.kill(_heartbeat_pid(store, "node1/agent-heartbeat.json"), signal.SIGSTOP)
    happens, took, _ = _cluster_end(proc, store, time.monotonic())
    return row(
        "an emulated 2×2 cluster's node 1 agent is stopped (SIGSTOP)",
        happens,
        took,
        "the event log of node 0 (rank 0)",
    )


@attack("cluster-remote-stall")
def remote_stall(tmp: Path) -> dict[str, Any]:
    needs_root()
    store = tmp / "s"
    proc = _cluster(store)
    _cluster_training(store)
    os.kill(_heartbeat_pid(store, "node1/runs/*/heartbeats/rank-3.json"), signal.SIGSTOP)
    happens, took, _ = _cluster_end(proc, store, time.monotonic())
    return row(
        "rank 3, on node 1 of an emulated 2×2 cluster, is stopped (SIGSTOP)",
        happens,
        took,
        "the event log of node 0 (rank 0)",
    )


def _cluster_signal(tmp: Path, how: str) -> dict[str, Any]:
    needs_root()
    store = tmp / "s"
    proc = _cluster(store, sigint_ignored=how == "kill -INT")
    _cluster_training(store)
    start = time.monotonic()
    if how == "Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGINT if how == "kill -INT" else signal.SIGTERM)
    happens, took, trace = _cluster_end(proc, store, start)
    return row(
        f"{how} to an emulated 2×2 cluster's launcher"
        + (
            " (started with SIGINT ignored, as a script's background job)"
            if how == "kill -INT"
            else ""
        ),
        happens + ("; a traceback" if trace else ""),
        took,
        "the event log of node 0 (rank 0)",
    )


@attack("cluster-ctrl-c")
def cluster_ctrl_c(tmp: Path) -> dict[str, Any]:
    return _cluster_signal(tmp, "Ctrl-C")


@attack("cluster-sigint")
def cluster_sigint(tmp: Path) -> dict[str, Any]:
    return _cluster_signal(tmp, "kill -INT")


@attack("cluster-sigterm")
def cluster_sigterm(tmp: Path) -> dict[str, Any]:
    return _cluster_signal(tmp, "kill -TERM")


def _node(store: Path, port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *DMLBENCH,
            "run",
            "synthetic-mlp",
            "--nnodes",
            "2",
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--rdzv-id",
            "job",
            "--store",
            str(store),
            "--quiet",
            "--json",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@attack("silent-endpoint")
def silent_endpoint(tmp: Path) -> dict[str, Any]:
    server, address = _silent_listener()
    port = int(address.rsplit(":", 1)[1])
    start = time.monotonic()
    out, _ = _node(tmp / "s", port, "--rdzv-timeout", "20").communicate(timeout=600)
    took = time.monotonic() - start
    server.close()
    run = json.loads(out)
    return row(
        "a node's `--rdzv-endpoint` is a listener that accepts and never answers "
        "(`--rdzv-timeout 20`)",
        f"run {run['status']}: {run['error']}",
        took,
        "— (no worker started)",
    )


@attack("rogue-node")
def rogue_node(tmp: Path) -> dict[str, Any]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    forever = (
        "--set",
        "max_steps=1000000",
        "--set",
        "max_epochs=100000",
        "--set",
        "stop_at_target=false",
    )
    job = [_node(tmp / f"n{i}", port, *forever) for i in range(2)]
    try:
        deadline = time.monotonic() + 180
        while not any(
            '"run_start"' in log.read_text() for log in tmp.glob("n*/runs/*/events.jsonl")
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the job never trained")
            time.sleep(0.2)
        start = time.monotonic()
        out, _ = _node(tmp / "rogue", port, "--rdzv-timeout", "20", *forever).communicate(
            timeout=900
        )
        took = time.monotonic() - start
        alive = all(node.poll() is None for node in job)
    finally:
        for node in job:
            node.kill()
            node.communicate()
    run = json.loads(out)
    return row(
        "a third, rogue node joins a training 2-node job's rendezvous id (`--rdzv-timeout 20`)",
        f"run {run['status']}: {run['error']}; the job goes on: {alive}",
        took,
        "—",
    )


# ------------------------------------------------------------------------------ main


# ----------------------------------------------------- bounds on what is read (issue 53)
#
# Each attack runs against whatever dmlbench the interpreter imports, so the "before"
# column comes from the same script with PYTHONPATH at the earlier revision's src/.
# Children run with a 6 GiB address-space limit: an unbounded read or decode ends in
# a MemoryError there instead of taking the machine, and a hang is cut at TIMEOUT_S.

TIMEOUT_S = 60
MEMORY_LIMIT = 6 << 30


def _limited() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _bounded(*args: str, timeout: float = TIMEOUT_S) -> tuple[str, float, int]:
    """Run ``dmlbench ARGS`` limited; (what it said, seconds, exit code). A traceback or
    a hang is said so; otherwise the last line of stderr (or of stdout)."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            [*DMLBENCH, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=_limited,
            env={**os.environ, "COLUMNS": "4096"},
        )
    except subprocess.TimeoutExpired:
        return f"HUNG: killed after {timeout:.0f} s", time.monotonic() - start, -9
    took = time.monotonic() - start
    text = done.stderr.strip() or done.stdout.strip()
    last = text.splitlines()[-1] if text else f"exit {done.returncode}, nothing said"
    if done.returncode < 0:
        return f"killed by signal {-done.returncode}: `{last[:110]}`", took, done.returncode
    if "Traceback" in done.stderr:
        return f"TRACEBACK: `{last[:110]}`", took, done.returncode
    return f"`{last[:150]}`", took, done.returncode


def _short(text: str, tmp: Path) -> str:
    return text.replace(str(tmp), "…")


def _latest(store: Path, said: str, tmp: Path) -> str:
    """What the store's newest run says (status and error), or what the command said
    where no run was stored."""
    from dmlbench.results import ResultsStore

    runs = ResultsStore(store).runs() if (store / "dmlbench.sqlite").exists() else []
    if not runs:
        return f"no run stored; {said}"
    run = max(runs, key=lambda r: r.run_id)
    error = " ".join((run.error or "").split())[:170]
    return _short(f"run {run.status}" + (f": {error}" if error else ""), tmp)


@attack("png")
def png_outputs(tmp: Path) -> dict[str, Any]:
    """`simulate --png` aimed at a symlink, a named pipe, a folder and /dev/full."""
    Path("/dev/full.png").unlink(missing_ok=True)  # left by an earlier revision's run
    victim = tmp / "victim.png"
    victim.write_text("keep")
    (tmp / "link.png").symlink_to(victim)
    os.mkfifo(tmp / "pipe.png")
    (tmp / "folder").mkdir()
    targets = ["link.png", "pipe.png", "folder"] + (["/dev/full"] if os.geteuid() == 0 else [])
    said, took = [], 0.0
    for name in targets:
        path = name if name.startswith("/") else str(tmp / name)
        text, seconds, _ = _bounded(
            "simulate-cluster",
            "imagenet-resnet50",
            "--cluster",
            "dgx-a100",
            "--nodes",
            "1",
            "--png",
            path,
        )
        took = max(took, seconds)
        said.append(f"{name}: {_short(text, tmp)}")
    damage = []
    if victim.read_bytes() != b"keep":
        damage.append("the link's target overwritten")
    if (tmp / "folder.png").exists():
        damage.append("folder.png made")
    if Path("/dev/full.png").exists():
        damage.append("/dev/full.png made")
        Path("/dev/full.png").unlink()
    return row(
        "`simulate-cluster --cluster … --png` a symbolic link, a named pipe, a folder, /dev/full",
        f"{'; '.join(damage) or 'nothing written'}; " + "; ".join(said),
        took,
        "the link's target, the device",
    )


@attack("import-bounds")
def import_bounds(tmp: Path) -> dict[str, Any]:
    """`results --import` of a run folder whose spec.json or events.log is a link to
    /dev/zero or a named pipe."""
    from dmlbench.resolve import resolve_spec
    from dmlbench.results.rundir import create_run_dir

    spec = resolve_spec("synthetic-mlp").to_json_dict()
    said, took = [], 0.0
    for name in ("spec.json", "events.log"):
        for kind in ("zero", "fifo"):
            _, folder = create_run_dir(tmp / "store" / "runs", spec, f"{kind}-{name[:4]}")
            target = folder / name
            target.unlink(missing_ok=True)
            if kind == "zero":
                target.symlink_to("/dev/zero")
            else:
                os.mkfifo(target)
            text, seconds, _ = _bounded(
                "results", "--store", str(tmp / "store"), "--import", str(folder), timeout=30
            )
            took = max(took, seconds)
            said.append(f"{name} {kind}: {_short(text, tmp)} ({seconds:.1f} s)")
    return row(
        "`results --import` of a folder whose spec.json or events.log is a link to "
        "/dev/zero or a named pipe",
        "; ".join(said),
        took,
        "—",
    )


@attack("corpus")
def huge_corpus(tmp: Path) -> dict[str, Any]:
    """A 30 GB kjv.txt (sparse) in the data folder."""
    data = tmp / "data"
    data.mkdir()
    with (data / "kjv.txt").open("wb") as sparse:
        sparse.truncate(30 * 10**9)
    text, took, _ = _bounded("run", "kjv-gpt", "--data-dir", str(data), "--store", str(tmp / "s"))
    return row("a 30 GB `kjv.txt` (sparse) in the data folder", _short(text, tmp), took, "—")


def _imagenet_with(tmp: Path, name: str, image: bytes) -> Path:
    from dmlbench.data import imagenet

    root = imagenet.write_sample(tmp / name, 2, 4, 1, quality=75)
    victim = sorted((root / "val").rglob("*.JPEG"))[0]
    victim.write_bytes(image)
    return root


def _declaring(width: int, height: int) -> bytes:
    """A real 16×16 JPEG whose SOF marker declares ``width``×``height``."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(out, "JPEG")
    data = bytearray(out.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


@attack("images")
def hostile_images(tmp: Path) -> dict[str, Any]:
    """In val/ of a generated ImageNet: a 65,000×1 JPEG, and JPEGs whose header declares
    60,000² and 12,000² pixels; a 2-worker ResNet-18 run that evaluates once."""
    import io

    from PIL import Image

    long = io.BytesIO()
    Image.new("L", (65_000, 1), 128).save(long, "JPEG")
    cases = {
        "65,000×1": long.getvalue(),
        "60,000² declared": _declaring(60_000, 60_000),
        "12,000² declared": _declaring(12_000, 12_000),
    }
    said, took = [], 0.0
    for number, (name, image) in enumerate(cases.items()):
        root = _imagenet_with(tmp, f"in{number}", image)
        quick = ["partial_data=true", "recipe.model.options.depth=18", "recipe.local_batch=2"]
        quick += ["max_steps=2", "warmup_steps_excluded=1", "loader_processes=0"]
        sets = [part for value in quick for part in ("--set", value)]
        store = tmp / f"s{number}"
        text, seconds, _ = _bounded(
            "run",
            "imagenet-resnet50",
            "--data-dir",
            str(root),
            "--workers",
            "2",
            *sets,
            "--store",
            str(store),
            "--quiet",
            timeout=300,
        )
        took = max(took, seconds)
        said.append(f"{name} ({len(image):,} bytes): {_latest(store, text, tmp)}")
    return row(
        "in `val/`: a 17 KB JPEG of 65,000×1 pixels; 633-byte JPEGs declaring 60,000² and "
        "12,000² (a 2-worker ResNet-18 run that evaluates once; 6 GiB limit)",
        "; ".join(said),
        took,
        "the run's row and folder (failed)",
    )


@attack("token-cache")
def token_cache(tmp: Path) -> dict[str, Any]:
    """The kjv-gpt token cache damaged four ways, and a GPT-2 vocab.json with an id of
    2·10⁹; each followed by a 1-worker kjv-gpt run of 2 steps."""
    import numpy as np

    from dmlbench.data import text as corpus

    data = tmp / "data"
    data.mkdir()
    folder = corpus.prepare(data, "kjv", 4096, False)
    pristine = {p.name: p.read_bytes() for p in folder.iterdir()}
    meta = json.loads(pristine["meta.json"])

    def restore() -> None:
        if not folder.is_dir():
            folder.mkdir()
        for name, content in pristine.items():
            (folder / name).write_bytes(content)

    def out_of_range() -> None:
        ids = np.fromfile(folder / "valid.bin", dtype=np.int32)
        ids[10] = 5_000
        ids.tofile(folder / "valid.bin")

    damages = {
        "ids ≥ the vocabulary": out_of_range,
        "meta.json a list": lambda: (folder / "meta.json").write_text(json.dumps([meta])),
        "vocab 10¹¹": lambda: (folder / "meta.json").write_text(
            json.dumps({**meta, "vocab": 10**11})
        ),
        "no meta.json": lambda: (folder / "meta.json").unlink(),
    }
    run = ["run", "kjv-gpt", "--data-dir", str(data), "--set", "max_steps=2", "--quiet"]
    said, took = [], 0.0
    for number, (name, damage) in enumerate(damages.items()):
        restore()
        damage()
        store = tmp / f"s{number}"
        text, seconds, code = _bounded(*run, "--store", str(store), timeout=300)
        took = max(took, seconds)
        said.append(f"{name}: exit {code}, {_latest(store, text, tmp)}")
    (data / "gpt2").mkdir()
    vocab = {chr(0x100 + i): i for i in range(300)}
    vocab["Ā"] = 2 * 10**9
    (data / "gpt2" / "vocab.json").write_text(json.dumps(vocab))
    (data / "gpt2" / "merges.txt").write_text("#version: 0.2\n")
    text, seconds, code = _bounded(*run, "--store", str(tmp / "s"), timeout=300)
    staging = [p.name for p in (data / "text-cache").iterdir() if p.name.startswith(".")]
    said.append(
        f"vocab.json id 2·10⁹: exit {code}, {_short(text, tmp)}; left in text-cache: "
        f"{[n for n in staging if not n.endswith('.lock')] or 'nothing'}"
    )
    return row(
        "the token cache's ids ≥ its vocabulary, meta.json a list, a vocabulary of 10¹¹, no "
        "meta.json; GPT-2's vocab.json with an id of 2·10⁹ (each: a kjv-gpt run)",
        "; ".join(said),
        max(took, seconds),
        "the cache, made again",
    )


@attack("sharded-options")
def sharded_options(tmp: Path) -> dict[str, Any]:
    """fsdp with an L2 term in the loss, and with noise_scale=true."""
    said, took = [], 0.0
    for option in ("recipe.l2=0.01", "noise_scale=true"):
        text, seconds, _ = _bounded(
            "run",
            "digits-mlp",
            "--workers",
            "2",
            "--exchange",
            "fsdp",
            "--set",
            option,
            "--set",
            "max_steps=3",
            "--store",
            str(tmp / "s"),
            "--quiet",
            timeout=180,
        )
        took = max(took, seconds)
        said.append(f"{option}: {_latest(tmp / 's', text, tmp)} ({seconds:.1f} s)")
    return row(
        "`--exchange fsdp` with `recipe.l2=0.01`; with `noise_scale=true`",
        "; ".join(said),
        took,
        "—",
    )


@attack("unpack")
def concurrent_unpacks(tmp: Path) -> dict[str, Any]:
    """Two unpacks of the official archives' layout into one folder at once (3 trials),
    and an unpack into a folder holding train/ without val/."""
    from helpers import write_imagenet_archives

    from dmlbench.data import imagenet

    sample = imagenet.write_sample(tmp / "sample", 3, 6, 2, quality=75)
    sums = write_imagenet_archives(sample, tmp / "archives")
    code = (
        "import json, sys; from pathlib import Path; from dmlbench.data import imagenet\n"
        "root, dest, sums = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])\n"
        "try:\n"
        "    imagenet.unpack(root, dest, checksums=sums)\n"
        "    print('ok')\n"
        "except Exception as e:\n"
        "    print(type(e).__name__ + ': ' + str(e))\n"
    )
    outcomes, took = [], 0.0
    for trial in range(3):
        dest = tmp / f"dest{trial}"
        start = time.monotonic()
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(tmp / "archives"), str(dest), json.dumps(sums)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outcomes += [proc.communicate(timeout=120)[0].strip() for proc in procs]
        took = max(took, time.monotonic() - start)
    failed = [o for o in outcomes if o != "ok"]
    half = tmp / "half"
    (half / "train" / "n00000001").mkdir(parents=True)  # a class of a layout begun by hand
    try:
        imagenet.unpack(tmp / "archives", half, checksums=sums)
        half_said = "unpacked"
    except DmlbenchError as error:
        half_said = str(error)
    return row(
        "two unpacks of the archives into one folder at once (3 trials); one into a folder "
        "holding train/ without val/",
        f"{6 - len(failed)} of 6 unpacks succeeded"
        + (f" (e.g. `{_short(failed[0], tmp)[:140]}`)" if failed else "")
        + f"; train/ without val/: `{_short(half_said, tmp)[:160]}`",
        took,
        "the unpacked layout",
    )


@attack("low")
def small_inputs(tmp: Path) -> dict[str, Any]:
    """The low-severity inputs: hardware files that are devices, pipes or /etc/shadow; a
    peak of 1e308; an unknown cluster; counts of 10²¹ and 10⁸; a price of nan; memory of
    1e400 and 0.4 bytes; a wrong MD5; an empty val/ with partial data; a diverged run's
    event log."""
    os.mkfifo(tmp / "pipe")
    huge = tmp / "huge.yaml"
    huge.write_text(
        "accelerators:\n  x: {name: x, peak_tflops: {fp32: 1e308}, memory_gb: 80,"
        " memory_bandwidth_gbs: 2000, source: s}\n"
    )
    cluster = ("simulate-cluster", "imagenet-resnet50", "--cluster", "dgx-a100")
    cases = {
        "--hardware /dev/null": (*cluster, "--hardware", "/dev/null"),
        "--hardware FIFO": (*cluster, "--hardware", str(tmp / "pipe")),
        "--hardware /etc/shadow": (*cluster, "--hardware", "/etc/shadow"),
        "a peak of 1e308": ("simulate-cluster", "x", "--cluster", "list", "--hardware", str(huge)),
        "--cluster nope": ("simulate-cluster", "imagenet-resnet50", "--cluster", "nope"),
        "--nodes 10²¹": (*cluster, "--nodes", "1" + "0" * 21),
        "--price nan": ("simulate", "digits-mlp", "--price", "nan", "--store", str(tmp / "e")),
        "--price -1": ("simulate", "digits-mlp", "--price", "-1", "--store", str(tmp / "e")),
        "--memory-per-worker 1e400": ("advise", "kjv-gpt", "--memory-per-worker", "1e400"),
        "--memory-per-worker 0.4": ("advise", "kjv-gpt", "--memory-per-worker", "0.4"),
    }
    from dmlbench.results import ResultsStore

    ResultsStore(tmp / "e")  # an empty store: the price is read before its runs are
    said, took = [], 0.0
    for name, args in cases.items():
        text, seconds, code = _bounded(*args)
        took = max(took, seconds)
        if "/etc/shadow" in name and ":*:" in text:
            text = f"echoed a line of it: {text}"
        if "1e308" in name and code == 0:
            shown = subprocess.run([*DMLBENCH, *args], capture_output=True, text=True).stdout
            text = "printed `inf TFLOP/s`" if "inf" in shown else "accepted"
        elif code == 0:
            text = f"accepted (exit 0): {text}"
        said.append(f"{name}: {_short(text, tmp)}")
    from helpers import write_imagenet_archives

    from dmlbench.data import imagenet

    sample = imagenet.write_sample(tmp / "sample", 2, 4, 1, quality=75)
    write_imagenet_archives(sample, tmp / "archives")
    text, _, _ = _bounded("run", "imagenet-resnet50", "--data-dir", str(tmp / "archives"))
    left = (tmp / "archives" / "imagenet").exists()
    said.append(f"wrong MD5: {_short(text, tmp)[:70].strip('`')}…`, imagenet/ left: {left}")
    for image in (sample / "val").rglob("*.JPEG"):
        image.unlink()
    store = tmp / "s"
    text, _, _ = _bounded(
        "run",
        "imagenet-resnet50",
        "--data-dir",
        str(sample),
        "--set",
        "partial_data=true",
        "--set",
        "recipe.model.options.depth=18",
        "--set",
        "recipe.local_batch=2",
        "--store",
        str(store),
        "--quiet",
        timeout=300,
    )
    rows = len(ResultsStore(store).runs()) if (store / "dmlbench.sqlite").exists() else 0
    said.append(f"empty val/: {_short(text, tmp)[:90]}, rows stored: {rows}")
    diverged = tmp / "d"
    _bounded(
        "run",
        "digits-mlp",
        "--set",
        "recipe.schedule.lr_per_sample=1e9",
        "--set",
        "max_steps=30",
        "--set",
        "stop_at_target=false",
        "--store",
        str(diverged),
        "--quiet",
    )
    bare = named = 0
    for log in diverged.glob("runs/*/events.log"):
        for line in log.read_text().splitlines():
            named += '"NaN"' in line or 'Infinity"' in line
            try:
                json.loads(line.removeprefix(":::MLLOG "), parse_constant=lambda c: 1 / 0)
            except ZeroDivisionError:
                bare += 1
    said.append(
        f"a diverged run: {bare} event-log lines with a bare NaN or Infinity (not strict "
        f"JSON), {named} with it as a string"
    )
    return row(
        "`--hardware` a device, a pipe, /etc/shadow; a peak of 1e308; an unknown cluster; "
        "`--nodes 10²¹`; `--price nan`; `--memory-per-worker 1e400` and `0.4`; a wrong "
        "MD5; an empty val/ with partial data; a diverged run's event log",
        "; ".join(said),
        took,
        "—",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated: {','.join(ATTACKS)}")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/reliability.json")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(ATTACKS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dmlbench-attacks-") as folder:
        os.environ["DMLBENCH_CACHE"] = str(Path(folder) / "cache")
        for name in chosen:
            tmp = Path(folder) / name
            tmp.mkdir()
            print(f"attack {name} …", flush=True)
            try:
                result = ATTACKS[name](tmp)
            except PermissionError as error:
                result = row(name, f"skipped: {error}", None, "—")
            result["attack"] = name
            rows.append(result)
            print(f"  {result['happens']}", flush=True)
    record = {"platform": platform.platform(), "rows": rows}
    if args.only and args.out.is_file():  # keep the other attacks' latest results
        rerun = {r["attack"] for r in rows}
        earlier = json.loads(args.out.read_text())["rows"]
        rows = [r for r in earlier if r["attack"] not in rerun] + rows
        order = list(ATTACKS)
        rows.sort(key=lambda r: order.index(r["attack"]) if r["attack"] in order else 99)
        record["rows"] = rows
    write_summary(args.out, record)
    print("\n| fault | what happens | time to detect | what is kept |\n|---|---|---|---|")
    for r in rows:
        detect = "—" if r["detect_s"] is None else f"{r['detect_s']:.1f} s"
        print(f"| {r['fault']} | {r['happens']} | {detect} | {r['kept']} |")


if __name__ == "__main__":
    run_main(main)
