"""Validate `dmlbench advise` against a measured grid of workers × local batch.

1. Calibrate: the task at 1 worker on two local batches (the compute line, epochs to
   the target), at 2 workers on the recipe's batch (the gradient noise scale, the
   slowdown of two workers on this host's cores), and `bench allreduce` at 2 workers.
2. Ask `advise` for the best (workers, local batch) on this host (``--network none``).
3. Measure every grid point, ``--repeats`` seeds each, in a second store, and rank the
   points by measured time to accuracy as ``compare`` does: the olympic mean over the
   seeds (the median of three), a seed that missed the target counting as never.

The advice passes when its point is the measured best or within 10% of it.

    python benchmarks/advise_validation.py --root /tmp/advise-digits \\
        --json benchmarks/results/advise/digits-mlp.json

Both stores resume: points already measured are not run again.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from summary import run_main, write_summary

from dmlbench.advise.recommend import advise_from_store
from dmlbench.launch import run_benchmark
from dmlbench.launch.bench import resolve_bench, run_comm_bench
from dmlbench.report.analysis import olympic_mean
from dmlbench.resolve import resolve_spec
from dmlbench.results import ResultsStore

WITHIN = 0.10


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} s"


def measure(
    store: ResultsStore, task: str, workers: int, local: int, seed: int, overrides: list[str]
) -> None:
    """One run of the grid, unless the store has it already."""
    done = [
        r
        for r in store.runs(task=task)
        if r.finished
        and not r.disturbed
        and r.workers == workers
        and r.local_batch == local
        and r.seed == seed
    ]
    if done:
        return
    spec = resolve_spec(
        task, overrides=[*overrides, f"recipe.local_batch={local}"], workers=workers, seed=seed
    )
    outcome = run_benchmark(spec, store, echo=False)
    if outcome.status == "failed":
        sys.exit(f"run {workers} × b={local} seed {seed} failed: {outcome.error}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="digits-mlp")
    parser.add_argument("--root", type=Path, required=True, help="folder for both stores")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--batches", default="8,16,32,64,128,256")
    parser.add_argument("--calibrate-batches", default="32,128")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        help="a spec override for every run, e.g. recipe.target=0.6",
    )
    parser.add_argument("--json", type=Path, help="write the summary here")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    calibration = ResultsStore(args.root / "calibration")
    first, second = (int(b) for b in args.calibrate_batches.split(","))
    for workers, local in ((1, first), (1, second), (2, first)):
        measure(calibration, args.task, workers, local, 0, args.overrides)
    if not calibration.comm_runs():
        spec = resolve_bench({"workers": 2, "max_bytes": 2**22, "repeats": 5, "warmup": 2})
        run_comm_bench(spec, calibration)
    advice = advise_from_store(calibration, args.task, max_workers=max(counts), network="none")
    best = advice.best
    print(
        f"advice: {best.workers} × b={best.local_batch}, predicted {best.tta_s:.3f} s "
        f"({advice.sources['compute']}; noise scale {advice.noise.b_simple:.0f})"
        if advice.noise
        else f"advice: {best.workers} × b={best.local_batch}"
    )
    for untried in advice.worth_measuring:
        print(
            f"  worth measuring (below the measured batches): {untried.workers} × "
            f"b={untried.local_batch}, predicted {untried.tta_s:.3f} s"
        )

    grid = ResultsStore(args.root / "grid")
    points = [(workers, local) for workers in counts for local in batches]
    if (best.workers, best.local_batch) not in points:  # the advice is always measured
        points.append((best.workers, best.local_batch))
    for seed in range(args.repeats):
        for workers, local in points:
            measure(grid, args.task, workers, local, seed, args.overrides)
    predicted = {(c.workers, c.local_batch): c.tta_s for c in advice.candidates}
    rows: list[dict[str, Any]] = []
    for workers, local in points:
        # runs other processes disturbed were measured again, and are left out
        runs = [
            r
            for r in grid.runs(task=args.task)
            if r.finished and not r.disturbed and r.workers == workers and r.local_batch == local
        ]
        times = [r.time_to_accuracy_s for r in runs]
        reached = [t for t in times if t is not None]
        # as `compare` ranks: the olympic mean, a seed that missed counting as ∞
        olympic = olympic_mean(math.inf if t is None else t for t in times)
        rows.append(
            {
                "workers": workers,
                "local_batch": local,
                "global_batch": workers * local,
                "predicted_tta_s": predicted.get((workers, local)),
                "tta_s": olympic if math.isfinite(olympic) else None,
                "tta_mean_s": statistics.mean(reached) if reached else None,
                "tta_std_s": statistics.stdev(reached) if len(reached) > 1 else 0.0,
                "reached": f"{len(reached)}/{len(times)}",
            }
        )
    rows.sort(key=lambda r: math.inf if r["tta_s"] is None else r["tta_s"])
    fastest = rows[0]["tta_s"]
    advised = (best.workers, best.local_batch)
    mine = next(r for r in rows if (r["workers"], r["local_batch"]) == advised)
    print(
        "| rank | N | b / B | predicted TTA | measured TTA (olympic mean) | mean ± std | reached |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for rank, row in enumerate(rows, 1):
        mark = " ← advised" if row is mine else ""
        guess, got = row["predicted_tta_s"], row["tta_s"]
        print(
            f"| {rank} | {row['workers']} | {row['local_batch']} / {row['global_batch']} | "
            f"{fmt(guess)} | {fmt(got)} | {fmt(row['tta_mean_s'])} ± "
            f"{row['tta_std_s']:.3f} s | {row['reached']}{mark} |"
        )
    # an advised point that missed the target (in most seeds) is as far from the best as can be
    ratio = math.inf if mine["tta_s"] is None else mine["tta_s"] / fastest
    verdict = "PASS" if ratio <= 1 + WITHIN else "FAIL"
    print(f"\nadvised point: {ratio:.2f}× the measured best ({verdict}: within {WITHIN:.0%})")
    if args.json:
        write_summary(
            args.json,
            {
                "task": args.task,
                "advice": advice.to_json(),
                "grid": rows,
                "ratio_to_best": ratio if math.isfinite(ratio) else None,
                "verdict": verdict,
                "repeats": args.repeats,
                "overrides": args.overrides,
            },
        )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    run_main(main)
