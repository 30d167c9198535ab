"""What a run costs before its first step: workers forked from the launcher's fork server
against workers spawned afresh, side by side.

    python benchmarks/startup.py                    # 3 rounds, sweeps of 5 runs, 2 workers
    python benchmarks/startup.py --rounds 5 --runs 8 --workers 2 4

Each round starts one fresh launcher process per start method (``DMLBENCH_START_METHOD``
= ``forkserver``, dmlbench's default, or ``spawn``), in rotating order, and in it runs
``--runs`` one-step runs of ``synthetic-mlp`` one after another into one store, as a
sweep does. Reported per run: the launcher's wall time (``run_benchmark``, from the
spec to the stored row) and the part of it before the workers' ``init_start`` event
(process start, imports, rendezvous, process group). The first run of a launcher
includes starting the fork server; the later runs are what every further run of a
sweep, and every run a long-lived process (a notebook, a test session) starts, costs.
The peak-FLOP/s probe is taken out (a configured peak) so that only start-up counts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from summary import run_main, write_summary

HERE = Path(__file__).parent
METHODS = ("forkserver", "spawn")

LAUNCHER = """
import json, sys, time
from pathlib import Path

def main():
    from dmlbench.launch import run_benchmark
    from dmlbench.resolve import resolve_spec
    from dmlbench.results import ResultsStore
    from dmlbench.results.events import EVENTS_FILE, read_events

    store_dir, runs, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = ResultsStore(Path(store_dir))
    rows = []
    for _ in range(runs):
        spec = resolve_spec(
            "synthetic-mlp", workers=workers, overrides=["max_steps=1", "peak_tflops=1"]
        )
        started = time.time()
        outcome = run_benchmark(spec, store, echo=False)
        took = time.time() - started
        events = read_events(Path(outcome.run_dir) / EVENTS_FILE)
        init = next(e["time_ms"] for e in events if e["key"] == "init_start") / 1000
        rows.append({"status": outcome.status, "run_s": took, "to_init_s": init - started})
    print(json.dumps(rows))

if __name__ == "__main__":
    run_main(main)
"""


def one_launcher(method: str, runs: int, workers: int, work: Path) -> list[dict]:
    script = work / "launcher.py"
    script.write_text(LAUNCHER)
    env = {**os.environ, "DMLBENCH_START_METHOD": method, "DMLBENCH_CACHE": str(work)}
    with tempfile.TemporaryDirectory(dir=work) as store:
        done = subprocess.run(
            [sys.executable, str(script), store, str(runs), str(workers)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"the {method} launcher failed:\n{done.stderr[-2000:]}")
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    if any(row["status"] != "target_not_reached" for row in rows):
        raise SystemExit(f"a {method} run did not finish: {rows}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5, help="runs per launcher (a sweep)")
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "startup.json")
    args = parser.parse_args()
    results: dict[str, dict[str, list[list[dict]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for workers in args.workers:
            per_method: dict[str, list[list[dict]]] = {m: [] for m in METHODS}
            for round_ in range(args.rounds):
                order = METHODS[round_ % 2 :] + METHODS[: round_ % 2]
                for method in order:
                    rows = one_launcher(method, args.runs, workers, work)
                    per_method[method].append(rows)
                    first, later = rows[0], rows[1:]
                    print(
                        f"workers {workers} round {round_ + 1} {method:10s} first run "
                        f"{first['run_s']:.2f} s, later runs median "
                        f"{statistics.median(r['run_s'] for r in later):.2f} s "
                        f"(to init_start {statistics.median(r['to_init_s'] for r in later):.2f} s)"
                    )
            results[str(workers)] = per_method
    summary = {}
    print()
    print("| workers | | fork server | spawn | ratio |")
    print("|---:|---|---:|---:|---:|")
    for workers, per_method in results.items():
        medians = {}
        for method, launchers in per_method.items():
            later = [r for rows in launchers for r in rows[1:]]
            medians[method] = {
                "first_run_s": statistics.median(rows[0]["run_s"] for rows in launchers),
                "later_run_s": statistics.median(r["run_s"] for r in later),
                "later_to_init_s": statistics.median(r["to_init_s"] for r in later),
            }
        summary[workers] = medians
        for key, label in (
            ("first_run_s", "first run of a launcher"),
            ("later_run_s", "each later run"),
            ("later_to_init_s", "each later run, before init_start"),
        ):
            fork, spawn = medians["forkserver"][key], medians["spawn"][key]
            print(f"| {workers} | {label} | {fork:.2f} s | {spawn:.2f} s | {fork / spawn:.2f}× |")
    write_summary(
        args.out,
        {
            "rounds": args.rounds,
            "runs_per_launcher": args.runs,
            "medians": summary,
            "runs": results,
        },
    )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    run_main(main)
