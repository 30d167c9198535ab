"""Multi-node correctness and failure figures (the kill and Ctrl-C parts need root).

1. Weight equivalence: digits-mlp, 25 steps, seed 0: 1 node × 4 workers against
   2 nodes × 2 workers (two node agents on this host's loopback: the real multi-node
   command), for both exchange forms; the largest absolute weight difference.
2. A node's agent SIGKILLed mid-run on an emulated 2×2 cluster: seconds from the kill
   to the run stored ``failed`` (polling the store), and the stored error.
3. A node that never arrives: one node of 2 with ``--rdzv-timeout 10``: seconds to the
   one-line error.

    sudo .venv/bin/python benchmarks/multinode_checks.py

Writes ``benchmarks/results/multinode-checks.json``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from summary import run_main, write_summary

DMLBENCH = [sys.executable, "-m", "dmlbench", "run", "digits-mlp"]
STEPS = ["--set", "max_steps=25", "--set", "stop_at_target=false", "--quiet", "--json"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def node(store: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *DMLBENCH,
            "--nnodes",
            "2",
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--rdzv-id",
            "check",
            "--store",
            str(store),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def equivalence(root: Path, exchange: str) -> float:
    common = [*STEPS, "--exchange", exchange, "--set", "save_model=true"]
    one = subprocess.run(
        [*DMLBENCH, "--workers", "4", "--store", str(root / "one"), *common],
        capture_output=True,
        text=True,
        check=True,
    )
    single = torch.load(Path(json.loads(one.stdout)["run_dir"]) / "model.pt")
    port = free_port()
    procs = [node(root / f"n{i}", port, "--nproc-per-node", "2", *common) for i in range(2)]
    outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    recorded = next(o for o in outs if o.get("recorded", True))
    spread = torch.load(Path(recorded["run_dir"]) / "model.pt")
    return max(float((spread[k] - single[k]).abs().max()) for k in single)


def status(store: Path) -> tuple[str, str] | None:
    try:
        with sqlite3.connect(store / "dmlbench.sqlite") as db:
            row = db.execute("SELECT status, error FROM runs").fetchone()
    except sqlite3.Error:
        return None
    return (row[0], row[1]) if row else None


def killed_node(root: Path) -> dict[str, Any]:
    store = root / "cluster"
    proc = subprocess.Popen(
        [
            *DMLBENCH,
            "--nodes",
            "2",
            "--nproc-per-node",
            "2",
            "--network",
            "1gbit",
            "--store",
            str(store),
            "--set",
            "max_steps=1000000",
            "--set",
            "stop_at_target=false",
            "--quiet",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while not list(store.glob("runs/*/nodes/*/runs/*/events.log")):
        time.sleep(0.2)
    time.sleep(5)  # training
    agents = subprocess.run(
        ["pgrep", "-f", f"{store}/runs/.*/nodes/node1"], capture_output=True, text=True
    ).stdout.split()
    os.kill(int(agents[0]), signal.SIGKILL)
    killed = time.monotonic()
    while (status(store) or ("running", ""))[0] == "running":
        time.sleep(0.05)
    stored = time.monotonic() - killed
    proc.communicate(timeout=120)
    found = status(store)
    return {
        "stored_after_s": round(stored, 2),
        "status": found and found[0],
        "error": found and found[1],
        "exit_code": proc.returncode,
    }


def lonely_node(root: Path) -> dict[str, Any]:
    started = time.monotonic()
    proc = node(root / "alone", free_port(), "--rdzv-timeout", "10", *STEPS[:4], "--json")
    out, _ = proc.communicate(timeout=300)
    return {
        "timeout_s": 10,
        "error_after_s": round(time.monotonic() - started, 2),
        "error": json.loads(out)["error"],
        "exit_code": proc.returncode,
    }


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="dmlbench-checks-"))
    result: dict[str, Any] = {
        "max_abs_weight_difference_2x2_vs_1x4": {
            exchange: equivalence(root / exchange, exchange) for exchange in ("allreduce", "ddp")
        },
        "rendezvous_timeout": lonely_node(root),
    }
    if os.geteuid() == 0:
        result["killed_node_agent"] = killed_node(root)
    print(json.dumps(result, indent=1))
    write_summary(Path("benchmarks/results/multinode-checks.json"), result)
    return 0


if __name__ == "__main__":
    run_main(main)
