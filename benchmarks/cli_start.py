"""`dmlbench run` as a user meets it, from the command to its exit: this checkout against
another revision of dmlbench, side by side.

    python benchmarks/cli_start.py --against HEAD~1            # 6 rounds, 1 worker
    python benchmarks/cli_start.py --against v0.1 --rounds 8 --workers 2

Each round runs a one-step ``synthetic-mlp`` run once with this checkout's source and
once with the other revision's (a ``git worktree``), in alternating order, each in a
fresh process and a store of its own. The peak-FLOP/s probe is taken out (a configured
peak), so the time is the command's own: imports, the fork server, the rendezvous, the
workers' start, one step, storing the run and printing its summary. Reported: each
round's seconds, the medians and their ratio (this checkout / the other).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from summary import run_main, write_summary

HERE = Path(__file__).parent
REPO = HERE.parent


def one_run(source: Path, workers: int, work: Path) -> float:
    command = [sys.executable, "-m", "dmlbench", "run", "synthetic-mlp", "--quiet"]
    command += ["--workers", str(workers), "--set", "max_steps=1", "--set", "peak_tflops=1"]
    env = {**os.environ, "PYTHONPATH": str(source), "DMLBENCH_CACHE": str(work)}
    with tempfile.TemporaryDirectory(dir=work) as store:
        started = time.perf_counter()
        done = subprocess.run(
            [*command, "--store", store], env=env, capture_output=True, text=True, check=False
        )
        took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the run with {source} failed:\n{done.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="a git revision of this repository")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cli_start.json")
    args = parser.parse_args()
    revision = subprocess.run(
        ["git", "rev-parse", "--short", args.against],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    seconds: dict[str, list[float]] = {"this": [], revision: []}
    with tempfile.TemporaryDirectory() as tmp:
        work, other = Path(tmp), Path(tmp) / "other"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(other), revision],
            cwd=REPO,
            check=True,
        )
        try:
            sources = {"this": REPO / "src", revision: other / "src"}
            for round_ in range(args.rounds):
                order = list(sources)[round_ % 2 :] + list(sources)[: round_ % 2]
                for who in order:
                    seconds[who].append(one_run(sources[who], args.workers, work))
                print(
                    f"round {round_ + 1}: this {seconds['this'][-1]:.2f} s, "
                    f"{revision} {seconds[revision][-1]:.2f} s"
                )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=REPO)
    medians = {who: statistics.median(values) for who, values in seconds.items()}
    ratio = medians["this"] / medians[revision]
    print(
        f"median: this {medians['this']:.2f} s, {revision} {medians[revision]:.2f} s, "
        f"ratio {ratio:.3f}"
    )
    write_summary(
        args.out,
        {
            "against": revision,
            "workers": args.workers,
            "seconds": seconds,
            "median_s": medians,
            "ratio": ratio,
        },
    )


if __name__ == "__main__":
    run_main(main)
