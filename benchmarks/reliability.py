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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the test plugin tasks (crash-hang) and helpers
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])

from processes import process_tree, spawned_workers, wait_until_gone  # noqa: E402

from dmlbench.errors import DmlbenchError  # noqa: E402

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
        for log in store.glob("runs/*/events.jsonl"):
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
    task = ["crash-hang", "--plugin", "dmlbench_test_plugins", "--quiet"] if how == "hang" \
        else ["synthetic-mlp", *LONG]  # fmt: skip
    proc = subprocess.Popen([*DMLBENCH, "run", *task, "--workers", "2", "--store", str(store)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    if how == "hang":  # rank 1 sleeps in its 6th forward pass, a moment after run_start
        proc.wait(timeout=600)
        ended = time.time()
        events = next(store.glob("runs/*/events.jsonl")).read_text().splitlines()
        started = next(json.loads(e)["time_ms"] for e in events if '"run_start"' in e) / 1e3
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
    return row("a worker is stopped (SIGSTOP) mid-run",
               f"run {run.status}: {run.error}", found["detected"],
               f"its evaluations ({len(run.evals)}), the event log, worker logs")  # fmt: skip


@attack("hang")
def hung_worker(tmp: Path) -> dict[str, Any]:
    """Rank 1 sleeps forever in its forward pass; rank 0 waits in the all-reduce."""
    found = _stall(tmp, "hang")
    run = found["run"]
    return row("a worker hangs in its forward pass; its peer waits in the all-reduce",
               f"run {run.status}: {run.error}", found["detected"],
               "the event log, worker logs")  # fmt: skip


@attack("orphans")
def killed_launcher(tmp: Path) -> dict[str, Any]:
    """SIGKILL the launcher while its workers are importing (start-up)."""
    store = tmp / "orphans"
    with (tmp / "orphans.log").open("w") as out:
        proc = subprocess.Popen([*DMLBENCH, "run", "synthetic-mlp", "--workers", "2", *LONG,
                                 "--store", str(store)], stdout=out, stderr=out)  # fmt: skip
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

    status = ResultsStore(store).runs()[0].status if (store / "dmlbench.sqlite").exists() \
        else "no row yet"  # fmt: skip
    return row("the launcher is SIGKILLed while its workers start",
               f"{len(workers) - len(left)} of {len(workers)} workers exit on their own "
               f"(PR_SET_PDEATHSIG); the row reads {status} on the next open", gone,
               "the run folder (spec, record)")  # fmt: skip


# ------------------------------------------------------------------------------ listeners


@attack("listeners")
def listeners(tmp: Path) -> dict[str, Any]:
    """During a 2-worker run, connect from a second network namespace to every port the
    launcher and workers listen on."""
    needs_root()
    from test_listeners import Outsider, is_loopback
    from test_listeners import listeners as listening

    store = tmp / "listen"
    proc = subprocess.Popen([*DMLBENCH, "run", "synthetic-mlp", "--workers", "2", *LONG,
                             "--store", str(store)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
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
    return row("another host connects to the run's c10d stores and gloo ports",
               f"{len(found)} listeners, {len(public)} beyond loopback; {len(reached)} "
               "reached from the other namespace", took, "—")  # fmt: skip


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
    return row("hostile sweep files (10**10**10, a 1-KB billion laughs, 100,000-deep nesting)",
               "; ".join(words), worst, "— (nothing starts)")  # fmt: skip


@attack("data")
def incomplete_data(tmp: Path) -> dict[str, Any]:
    from datafiles import write_cifar_binary, write_libsvm

    from dmlbench.data.libsvm import load_libsvm
    from dmlbench.launch import run_benchmark
    from dmlbench.results import ResultsStore
    from dmlbench.spec import resolve_spec

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
    return row("incomplete CIFAR-10 (500 images a batch); a LIBSVM row with a NaN and label 2",
               f"CIFAR {cifar}; LIBSVM {libsvm}", took,
               f"— ({len(store.runs())} rows: nothing recorded)")  # fmt: skip


# ------------------------------------------------------------------------------ disk, rows


@attack("disk")
def full_disk(tmp: Path) -> dict[str, Any]:
    needs_root()
    from dmlbench.errors import ResultsNotStored
    from dmlbench.launch import run_benchmark
    from dmlbench.results import ResultsStore
    from dmlbench.results.recover import import_run_dir
    from dmlbench.spec import resolve_spec

    disk = tmp / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], check=True)
    filler = disk / "filler"
    filled: list[float] = []

    def fill(events: list[dict]) -> None:
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
        imported = import_run_dir(ResultsStore(disk / "store"), run_dir)
        evals = len(ResultsStore(disk / "store").runs(imported.run_id)[0].evals)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    return row("the store's disk is full when a run ends",
               "one line: the run was not stored, where it is kept, the --import command; "
               "the store still opens read-only", told,
               f"events, spec, record in the run folder; imported later as "
               f"{imported.status}, its evaluations ({evals}) included")  # fmt: skip


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
    return row(f"a launcher recorded as pid {pid} (its PID namespace) is killed",
               "its row reads interrupted at the next open: the launcher's flock is free",
               took, "the run folder")  # fmt: skip


@attack("subnets")
def concurrent_networks(tmp: Path) -> dict[str, Any]:
    needs_root()
    from dmlbench.netem import Topology
    from dmlbench.netem.profiles import ResolvedNetwork

    network = ResolvedNetwork(name="t", rate_bps=1e9)
    start = time.monotonic()
    with Topology(2, network) as first, Topology(2, network) as second:
        subnets = (first.subnet, second.subnet)
    return row("two emulated networks at once from one pid (pid % 100 collided)",
               f"subnets 10.{subnets[0]}/16 and 10.{subnets[1]}/16", time.monotonic() - start,
               "—")  # fmt: skip


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
        est = DaskClassifier(MLP, module__in_features=4, module__hidden=[4],
                             module__num_outputs=2, client=address)  # fmt: skip
        start = time.monotonic()
        try:
            est.fit(x, y)
            words.append(f"{name}: ACCEPTED")
        except ConnectionError as error:
            words.append(f"{name}: {str(error).split(' (')[0][:60]}")
        worst = max(worst, time.monotonic() - start)
    server.close()
    return row("client= a silent listener, or a closed port (timeout=120 s)", "; ".join(words),
               worst, "— (nothing starts)")  # fmt: skip


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
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, \
            Client(cluster, set_as_default=False) as client:  # fmt: skip
        pid_file.write_text(str(min(client.run(os.getpid).values())))
        est = DaskClassifier(MLP, module__in_features=64, module__hidden=[32],
                             module__num_outputs=10, client=client, optimizer__lr=0.3,
                             batch_size=KillsAWorker,
                             batch_size__initial=64, batch_size__at=4,
                             batch_size__pid_file=str(pid_file), grads_per_worker=32,
                             min_workers=2, max_workers=2, max_epochs=2)  # fmt: skip
        start = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(x, y)
        took = time.monotonic() - start
    notes = [str(w.message) for w in caught if "lost a worker" in str(w.message)]
    return row("a Dask worker is SIGKILLed between two updates",
               f"the fit finishes ({len(est.history_)} epochs, score "
               f"{est.score(x, y):.3f}); {len(notes)} warning(s): its tasks ran elsewhere",
               None, f"the whole fit (2 epochs in {took:.1f} s)")  # fmt: skip


# ------------------------------------------------------------------------------ main


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
    from dmlbench.results.environment import collect_environment

    env = collect_environment()
    record = {
        "command": "sudo .venv/bin/python benchmarks/reliability.py"
        + (f" --only {args.only}" if args.only else ""),
        "host": {
            k: env[k] for k in ("cpu_model", "cores", "torch", "python", "dmlbench", "git_revision")
        },
        "platform": platform.platform(),
        "rows": rows,
    }
    if args.only and args.out.is_file():  # keep the other attacks' latest results
        rerun = {r["attack"] for r in rows}
        earlier = json.loads(args.out.read_text())["rows"]
        rows = [r for r in earlier if r["attack"] not in rerun] + rows
        order = list(ATTACKS)
        rows.sort(key=lambda r: order.index(r["attack"]) if r["attack"] in order else 99)
        record["rows"] = rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print("\n| fault | what happens | time to detect | what is kept |\n|---|---|---|---|")
    for r in rows:
        detect = "—" if r["detect_s"] is None else f"{r['detect_s']:.1f} s"
        print(f"| {r['fault']} | {r['happens']} | {detect} | {r['kept']} |")


if __name__ == "__main__":
    main()
