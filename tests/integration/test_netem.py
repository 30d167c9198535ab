"""Emulated networks: profiles, namespaces and tc for real (as root), nothing left behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from helpers import cli, inside, root_only, wait_for_evaluation

from dmlbench.netem import Topology, leftovers, remove_stale
from dmlbench.netem.host import prefix
from dmlbench.netem.profiles import ResolvedNetwork


def _ours(tag: str) -> list[str]:
    return [name for name in leftovers() if tag in name]


def _connects(topology: Topology, source: int, target: int) -> bool:
    """Whether rank ``source``'s namespace opens a TCP connection to rank ``target``'s."""
    server = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            topology.namespaces[target],
            sys.executable,
            "-c",
            "import socket, sys\n"
            "s = socket.create_server((sys.argv[1], 0))\n"
            "print(s.getsockname()[1], flush=True)\n"
            "s.settimeout(10)\n"
            "s.accept()\n",
            topology.address(target),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    port = server.stdout.readline().strip()
    client = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            topology.namespaces[source],
            sys.executable,
            "-c",
            "import socket, sys\nsocket.create_connection((sys.argv[1], int(sys.argv[2])), 5)\n",
            topology.address(target),
            port,
        ],
        capture_output=True,
    )
    server.wait(timeout=15)
    return client.returncode == 0


@pytest.mark.slow
@root_only
def test_topology_builds_shapes_and_removes_everything() -> None:
    network = ResolvedNetwork(name="t", rate_bps=1e8)
    with Topology(3, network) as topology:
        assert len(_ours(topology.tag)) == 7  # 3 namespaces, their 3 veths and the bridge
        qdiscs = subprocess.run(
            ["ip", "netns", "exec", topology.namespaces[1], "tc", "qdisc", "show", "dev", "eth0"],
            capture_output=True,
            text=True,
        ).stdout
        assert "tbf" in qdiscs and "100Mbit" in qdiscs
        assert _connects(topology, 0, 2)
    assert _ours(topology.tag) == []


@pytest.mark.slow
@root_only
def test_concurrent_topologies_get_their_own_subnets() -> None:
    """Launchers once took 10.(100 + pid % 100): two with equal pids mod 100 collided."""
    network = ResolvedNetwork(name="t", rate_bps=1e9)
    with Topology(2, network) as first, Topology(2, network) as second:  # one pid, two nets
        assert first.subnet != second.subnet
        assert 100 <= min(first.subnet, second.subnet) < max(first.subnet, second.subnet) < 200
        assert _connects(first, 0, 1) and _connects(second, 1, 0)
        bridges = subprocess.run(
            ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True
        ).stdout
        assert bridges.count(first.hub_address + "/") == 1
        assert bridges.count(second.hub_address + "/") == 1


def _forwarders() -> list[str]:
    """This session's delay forwarders: their endpoints name its namespaces."""
    ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    ours = re.compile(rf" {prefix()}[0-9a-z_]+n\d+=")
    return [
        line for line in ps.splitlines() if "dmlbench.netem.forwarder" in line and ours.search(line)
    ]


@pytest.mark.slow
@root_only
def test_leftovers_of_a_killed_launcher_are_removed(tmp_path: Path) -> None:
    script = (  # with latency, so the delay forwarder runs too
        "import os, signal\nfrom dmlbench.netem import Topology\n"
        "from dmlbench.netem.profiles import ResolvedNetwork\n"
        "t = Topology(2, ResolvedNetwork(name='t', rate_bps=1e9, delay_s=0.001)).__enter__()\n"
        "print(t.tag, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    scratch = tmp_path / "tmp"  # a killed launcher leaves no file there
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == -signal.SIGKILL
    tag = done.stdout.strip()
    assert len(_ours(tag)) == 5  # 2 namespaces, their veths, the bridge
    removed = remove_stale()
    assert set(_ours(tag)) == set() and len([n for n in removed if tag in n]) == 5
    time.sleep(0.5)  # an orphaned forwarder notices its parent is gone within 50 ms
    assert _forwarders() == []
    assert list(scratch.iterdir()) == []


@root_only
def test_another_prefixs_names_are_neither_counted_nor_removed() -> None:
    """Issue 53: the leftover check counted another checkout's emulated cluster, running
    beside the tests, as its own. Names of another prefix (here the default, of a
    launcher long gone) are neither this session's leftovers nor its to remove."""
    assert prefix() != "dmlb"  # tests/conftest.py gives each test process its own
    other = f"dmlb{np.base_repr(4_194_304, 36).lower()}_1n0"  # 2**22, past any pid: dead
    subprocess.run(["ip", "netns", "add", other], check=True)
    try:
        assert other not in leftovers()
        assert other not in remove_stale()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        assert other in listed.stdout
    finally:
        subprocess.run(["ip", "netns", "del", other], check=False)


@root_only
@pytest.mark.multiprocess
def test_latency_takes_effect_and_its_cost_is_recorded(tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = cli(
        "bench",
        "allreduce",
        "--workers",
        "2",
        "--set",
        "network.latency=5ms",
        "--max-bytes",
        "4",
        "--repeats",
        "3",
        "--warmup",
        "1",
        "--json",
        "--store",
        str(store),
    )
    (run,) = json.loads(done.stdout)
    latency = run["results"][0]["latency_s"]
    # at least one round trip of 2 × 5 ms (physics, so load cannot break it); the cap is
    # wide because a busy machine delays the processes, not the link
    assert 0.010 <= latency < 0.5
    network = json.loads((store / "runs" / run["run_id"] / "network.json").read_text())
    assert network["delay_by"] in ("netem", "forwarder")
    if network["delay_by"] == "forwarder":
        stats = network["forwarder"]
        assert stats["packets"] > 0 and stats["cpu_s"] > 0 and stats["delay_s"] == 0.005
        assert stats["late_mean_s"] < 0.1  # a forwarder that holds packets is late by seconds
    assert leftovers() == [] and _forwarders() == []


@root_only
@pytest.mark.multiprocess
def test_shaping_caps_all_reduce_bandwidth(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    args = (
        "bench",
        "allreduce",
        "--workers",
        "2",
        "--max-bytes",
        str(2**20),
        "--factor",
        "16",
        "--repeats",
        "3",
        "--warmup",
        "1",
        "--json",
        "--store",
        store,
    )
    # a list benchmarks on each, as a list of worker counts does
    shaped, free = json.loads(cli(*args, "--network", "100mbit,none").stdout)
    big = {r["bytes"]: r["busbw"] for r in shaped["results"]}[2**20]
    # the cap is the link (100 Mbit/s = 12.5 MB/s, less TCP/IP overhead); the floor is
    # generous because a busy machine slows the workers, not the link
    assert 1e6 < big < 12.6e6
    assert {r["bytes"]: r["busbw"] for r in free["results"]}[2**20] > 4 * big
    assert shaped["network"] == "100mbit · 100 Mbit/s" and free["network"] == "none"
    assert leftovers() == []


def _processes_marked(mark: str) -> list[str]:
    """Processes that inherited the environment variable ``DMLBENCH_TEST_MARK=mark``:
    the run's launcher, its fork server, workers and parameter server (and nothing that
    other runs on this machine started)."""
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if process.environ().get("DMLBENCH_TEST_MARK") == mark:
                found.append(" ".join(process.info["cmdline"] or []))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@root_only
@pytest.mark.multiprocess
@pytest.mark.parametrize("exchange", ["allreduce", "ps-async"])
def test_a_killed_worker_leaves_no_namespace_behind(tmp_path: Path, exchange: str) -> None:
    """Also a parameter server: it listens on rank 0's own address in its namespace, and
    dies with rank 0."""
    mark = uuid.uuid4().hex
    probe = subprocess.Popen(["sleep", "30"], env={"DMLBENCH_TEST_MARK": mark})
    try:  # the scan sees what carries the mark
        assert [line for line in _processes_marked(mark) if line == "sleep 30"]
    finally:
        probe.kill()
        probe.wait()
    done = cli(
        "run",
        "crash-kill",
        "--plugin",
        "dmlbench_test_plugins",
        "--workers",
        "2",
        "--network",
        "1gbit",
        "--exchange",
        exchange,
        "--json",
        "--store",
        str(tmp_path / "s"),
        check=False,
        env={"DMLBENCH_TEST_MARK": mark},
    )
    assert done.returncode == 1, done.stderr
    run = json.loads(done.stdout)
    assert run["status"] == "failed" and "rank 1" in run["error"], run["error"]
    assert run["network"] == "1gbit · 1000 Mbit/s"
    assert leftovers() == []
    deadline = time.monotonic() + 10
    while _processes_marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_marked(mark) == []


@pytest.mark.slow
@root_only
def test_refusals_are_one_line(tmp_path: Path) -> None:
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if shutil.which("setpriv"):
        done = subprocess.run(
            [
                *nobody,
                sys.executable,
                "-m",
                "dmlbench",
                "bench",
                "allreduce",
                "--network",
                "1gbit",
                "--store",
                str(tmp_path / "n"),
            ],
            capture_output=True,
            text=True,
            cwd="/",
        )
        assert done.returncode == 2 and "network emulation needs root" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    bad = inside("run", "--network", "10gbt", "--dry-run", check=False)
    assert bad.returncode == 2 and "did you mean '10gbit'" in bad.stderr
    assert leftovers() == []


@root_only
@pytest.mark.multiprocess
def test_mpi_runs_under_an_emulated_network(tmp_path: Path) -> None:
    done = cli(
        "bench",
        "allreduce",
        "--backend",
        "mpi",
        "--workers",
        "2",
        "--network",
        "100mbit",
        "--max-bytes",
        str(2**18),
        "--factor",
        "64",
        "--repeats",
        "3",
        "--json",
        "--store",
        str(tmp_path / "s"),
    )
    (run,) = json.loads(done.stdout)
    big = {r["bytes"]: r["busbw"] for r in run["results"]}[2**18]
    # the 100 Mbit/s cap applies (a cap, not a floor: a busy machine may fall far below it)
    assert run["backend"] == "mpi" and 0 < big < 12.6e6
    assert leftovers() == []


@root_only
@pytest.mark.multiprocess
def test_ctrl_c_under_an_emulated_network_leaves_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dmlbench",
            "run",
            "synthetic-mlp",
            "--workers",
            "2",
            "--quiet",
            "--store",
            str(store),
            "--set",
            "max_epochs=100000",
            "--set",
            "stop_at_target=false",
            "--set",
            "network.latency=1ms",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_evaluation(proc, store)
        assert _forwarders() != [] and leftovers() != []  # the emulated network is up
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # a failed check must not leave a run training forever
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert leftovers() == [] and _forwarders() == []
