"""A busy machine against a quiet one: does dmlbench notice, and what speedup does it report?

    .venv/bin/python benchmarks/contention.py                 # digits-mlp, 1 and 2 workers
    .venv/bin/python benchmarks/contention.py --epochs 20 --out /tmp/contention

Runs the same weak-scaling pair (1 and 2 workers, fixed epochs, no early stop) twice
into two stores, side by side in one run: quiet, then with one busy loop per core
beside it (the loops run only during the 1-worker baseline, as when other work
shares a machine for a while). For every run it prints the contention check's numbers
(wait share, other processes' cores, verdict); for each store the speedup in step time
that `dmlbench compare` reports, with disturbed runs left out (the default) and
counted (`--include-disturbed`). The busy baseline is what made "speedup 35×" before.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from summary import run_main

CLI = [sys.executable, "-m", "dmlbench"]


def run(store: Path, workers: int, epochs: int) -> None:
    subprocess.run(
        [
            *CLI,
            "run",
            "digits-mlp",
            "--workers",
            str(workers),
            "--store",
            str(store),
            "--set",
            f"max_epochs={epochs}",
            "--set",
            "stop_at_target=false",
            "--quiet",
        ],
        check=True,
        capture_output=True,
    )


def compare(store: Path, *extra: str) -> list[dict]:
    done = subprocess.run(
        [*CLI, "compare", "--json", "--store", str(store), *extra],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="keep the stores here")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="dmlbench-contention-"))
    quiet, busy = root / "quiet", root / "busy"
    for workers in (1, 2):
        run(quiet, workers, args.epochs)
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        run(busy, 1, args.epochs)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    run(busy, 2, args.epochs)

    from dmlbench.results import ResultsStore

    print(
        f"digits-mlp, {args.epochs} epochs, {os.cpu_count()} cores; busy: "
        f"{os.cpu_count()} busy loops beside the 1-worker run"
    )
    print(f"{'store':6} {'N':>2} {'step ms':>8} {'wait':>6} {'others':>7}  verdict")
    for name, store in (("quiet", quiet), ("busy", busy)):
        for r in ResultsStore(store).runs():
            c = r.summary.contention or {}
            m = (c.get("machines") or [{}])[0]
            verdict = (
                "not measured"
                if r.disturbed is None
                else "disturbed"
                if r.disturbed
                else "undisturbed"
            )
            print(
                f"{name:6} {r.workers:>2} {(r.summary.step_time_s or math.nan) * 1e3:8.2f} "
                f"{c.get('wait_share_max') or 0:6.0%} {m.get('outside_cores') or 0:7.2f}  "
                f"{verdict}"
            )
    print("\nspeedup in throughput at 2 workers (step time), as `dmlbench compare` gives it")
    for name, store in (("quiet", quiet), ("busy", busy)):
        default = compare(store)[-1]["speedup_throughput"]
        counted = compare(store, "--include-disturbed")[-1]["speedup_throughput"]
        shown = "none (baseline disturbed)" if default is None else f"{default:.2f}"
        print(f"{name:6} default: {shown:26} --include-disturbed: {counted:.2f}")
    print(f"\nstores: {root}")


if __name__ == "__main__":
    run_main(main)
