"""Submit to first step: a 2-node run through a real Slurm against the same run started
directly on an emulated cluster, side by side (root; Debian's slurm-wlm and munge).

Starts the test Slurm of ``tests/slurm_cluster.py`` (two slurmds, each in a network
namespace with its own host name), then, ``--repeats`` times and interleaved:

- ``dmlbench slurm synthetic-mlp --nodes 2 --submit``: from the moment sbatch is called
  to the workers' ``init_start`` (processes up) and ``run_start`` (the first step);
- ``dmlbench run synthetic-mlp --nodes 2`` (the emulated cluster, same namespaces'
  path, no scheduler): the same two moments from the moment the command starts.

    python benchmarks/slurm_startup.py --json benchmarks/results/slurm/startup.json
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from summary import run_main, write_summary

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import slurm_cluster

from dmlbench.results import ResultsStore, read_events

STEPS = ["--set", "max_steps=20", "--set", "stop_at_target=false"]


def moments(store: Path, since: float) -> dict[str, float]:
    """Seconds from ``since`` to the run's init_start and run_start (rank 0's node)."""
    (run,) = ResultsStore(store).runs()
    (events_file,) = Path(run.run_dir).glob("nodes/node*/runs/*/events.log")
    times = {
        e["key"]: e["time_ms"] / 1e3
        for e in read_events(events_file)
        if e["key"] in ("init_start", "run_start")
    }
    assert run.finished, run.error
    return {
        "processes_up_s": times["init_start"] - since,
        "first_step_s": times["run_start"] - since,
    }


def through_slurm(cluster: slurm_cluster.SlurmCluster, store: Path) -> dict[str, float]:
    since = time.time()
    out = cluster.command(
        sys.executable,
        "-m",
        "dmlbench",
        "slurm",
        "synthetic-mlp",
        "--nodes",
        "2",
        *STEPS,
        "--store",
        str(store),
        "--submit",
    )
    job = out.split("submitted job ", 1)[1].split()[0]
    state = cluster.wait(job)
    if state != "COMPLETED":
        sys.exit(f"job {job}: {state}")
    return moments(store, since)


def direct(store: Path) -> dict[str, float]:
    since = time.time()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dmlbench",
            "run",
            "synthetic-mlp",
            "--nodes",
            "2",
            *STEPS,
            "--store",
            str(store),
            "--quiet",
            "--json",
        ],
        check=True,
        capture_output=True,
    )
    return moments(store, since)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if slurm_cluster.missing():
        sys.exit(slurm_cluster.missing())
    rows: dict[str, list[dict[str, float]]] = {"slurm": [], "direct": []}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with slurm_cluster.slurm_cluster(root / "slurm") as cluster:
            for i in range(args.repeats):
                rows["slurm"].append(through_slurm(cluster, root / f"slurm-{i}"))
                rows["direct"].append(direct(root / f"direct-{i}"))
    summary: dict[str, Any] = {"repeats": args.repeats, "runs": rows}
    print("| path | processes up (median) | first step (median) |")
    print("|---|---:|---:|")
    for path, measured in rows.items():
        medians = {k: statistics.median(m[k] for m in measured) for k in measured[0]}
        summary[path] = medians
        print(f"| {path} | {medians['processes_up_s']:.2f} s | {medians['first_step_s']:.2f} s |")
    ratio = summary["slurm"]["first_step_s"] / summary["direct"]["first_step_s"]
    summary["first_step_ratio"] = ratio
    print(f"\nsubmit to first step through Slurm: {ratio:.2f}× the direct start")
    if args.json:
        write_summary(args.json, summary)
    return 0


if __name__ == "__main__":
    run_main(main)
