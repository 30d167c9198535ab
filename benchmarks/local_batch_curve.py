"""One device's step time against its local batch, from stored runs: the measured curve
``replay_mlperf.py --curve`` takes in place of its stated compute model (issue 54,
item 2). ``gpu_check.sh`` makes the runs (synthetic data, one device, local batch 8 to
256, DLBS-style); this writes their steady step times:

    python benchmarks/local_batch_curve.py --store S --task imagenet-resnet50 \
        --precision bf16 --out curve.json      # [[local_batch, seconds per step], ...]

or from the summary of an earlier GPU check (``benchmarks/results/gpu/h200.json``)::

    python benchmarks/local_batch_curve.py --gpu-json benchmarks/results/gpu/h200.json \
        --task imagenet-resnet50 --precision bf16 --out curve.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from dmlbench.results import ResultsStore


def curve(stores: list[Path], task: str, precision: str) -> list[list[float]]:
    """The median steady step time of the finished one-device runs at each local batch,
    over every store given (the same sweep on two machines' leases, say)."""
    by_batch: dict[int, list[float]] = {}
    runs = [run for store in stores for run in ResultsStore(store).runs(task=task)]
    for run in runs:
        recipe = run.spec.get("recipe") or {}
        step = run.summary.step_time_s
        if run.finished and run.workers == 1 and recipe.get("precision") == precision and step:
            by_batch.setdefault(run.local_batch, []).append(float(step))
    return [[float(b), statistics.median(s)] for b, s in sorted(by_batch.items())]


def from_gpu_json(path: Path, task: str, precision: str) -> list[list[float]]:
    """The same from a GPU check's summary: its runs' ``step_ms`` by local batch."""
    by_batch: dict[int, list[float]] = {}
    for run in json.loads(path.read_text())["runs"]:
        if run["task"] == task and run["precision"] == precision:
            by_batch.setdefault(int(run["local_batch"]), []).append(run["step_ms"] / 1000)
    return [[float(b), statistics.median(s)] for b, s in sorted(by_batch.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--store", type=Path, action="append", help="repeatable")
    source.add_argument("--gpu-json", type=Path, help="a GPU check's summary instead")
    parser.add_argument("--task", required=True)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.gpu_json:
        points = from_gpu_json(args.gpu_json, args.task, args.precision)
    else:
        points = curve(args.store, args.task, args.precision)
        count = sum(1 for store in args.store for _ in ResultsStore(store).runs(task=args.task))
        print(f"{count} stored runs of {args.task}")
    if len(points) < 2:
        raise SystemExit(
            f"{args.gpu_json or ', '.join(map(str, args.store))}: finished one-device runs "
            f"of {args.task} at two or more local batches needed"
        )
    args.out.write_text(json.dumps(points) + "\n")
    for batch, seconds in points:
        rate = batch / seconds
        print(f"local batch {batch:5.0f}: {1000 * seconds:8.2f} ms a step, {rate:9,.0f} samples/s")


if __name__ == "__main__":
    main()
