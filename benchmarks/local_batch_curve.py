"""One device's step time against its local batch, from stored runs: the measured curve
``replay_mlperf.py --curve`` takes in place of its stated compute model (issue 54,
item 2). ``gpu_check.sh`` makes the runs (synthetic data, one device, local batch 8 to
256, DLBS-style); this writes their steady step times:

    python benchmarks/local_batch_curve.py --store S --task imagenet-resnet50 \
        --precision bf16 --out curve.json      # [[local_batch, seconds per step], ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from dmlbench.results import ResultsStore


def curve(store: Path, task: str, precision: str) -> list[list[float]]:
    """The median steady step time of the finished one-device runs at each local batch."""
    by_batch: dict[int, list[float]] = {}
    for run in ResultsStore(store).runs(task=task):
        recipe = run.spec.get("recipe") or {}
        step = run.summary.get("step_time_s")
        if run.finished and run.workers == 1 and recipe.get("precision") == precision and step:
            by_batch.setdefault(run.local_batch, []).append(float(step))
    return [[float(b), statistics.median(s)] for b, s in sorted(by_batch.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    points = curve(args.store, args.task, args.precision)
    if len(points) < 2:
        raise SystemExit(
            f"{args.store}: finished one-device runs of {args.task} at two or more "
            "local batches needed"
        )
    args.out.write_text(json.dumps(points) + "\n")
    for batch, seconds in points:
        rate = batch / seconds
        print(f"local batch {batch:5.0f}: {1000 * seconds:8.2f} ms a step, {rate:9,.0f} samples/s")


if __name__ == "__main__":
    main()
