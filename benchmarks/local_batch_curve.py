"""One device's step time against its local batch, from stored runs in one or more
stores (the same runs on two leases of a lent GPU, say): the measured curve
``replay_mlperf.py --curve`` takes in place of its stated compute model (issue 54,
item 2). ``dmlbench bench curve`` measures and writes one from one store; this merges
several (the median at each batch) and writes the same file:

    python benchmarks/local_batch_curve.py --store S1 --store S2 --task imagenet-resnet50 \
        --precision bf16 --out curve.json

or from the summary of an earlier GPU check (``benchmarks/results/gpu/h200.json``)::

    python benchmarks/local_batch_curve.py --gpu-json benchmarks/results/gpu/h200.json \
        --task imagenet-resnet50 --precision bf16 --out curve.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from summary import run_main

from dmlbench.perfmodel.curve import Curve, curve_from_runs
from dmlbench.results import ResultsStore


def curve(stores: list[Path], task: str, precision: str) -> Curve:
    """The median steady step time of the finished one-device runs at each local batch,
    over every store given (the same sweep on two machines' leases, say)."""
    runs = [run for store in stores for run in ResultsStore(store).runs(task=task)]
    measured, elsewhere = curve_from_runs(runs, precision)
    if elsewhere:
        how = f"{measured.device}{f', compiled {measured.compiled}' if measured.compiled else ''}"
        print(f"left out: {elsewhere} runs on another device, or compiled otherwise, than {how}")
    return measured


def from_gpu_json(path: Path, task: str, precision: str) -> Curve:
    """The same from a GPU check's summary: its runs' ``step_ms`` by local batch."""
    runs = json.loads(path.read_text())["runs"]
    mine = [run for run in runs if run["task"] == task and run["precision"] == precision]
    points = [(run["local_batch"], run["step_ms"] / 1000) for run in mine]
    if not points:
        raise SystemExit(f"{path}: no run of {task} in {precision}")
    return Curve.of(points, task=task, precision=precision)


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
        measured = from_gpu_json(args.gpu_json, args.task, args.precision)
    else:
        measured = curve(args.store, args.task, args.precision)
        print(f"{len(measured.runs)} runs of {args.task} on {measured.device}")
    if len(measured.points) < 2:
        raise SystemExit(
            f"{args.gpu_json or ', '.join(map(str, args.store))}: finished one-device runs "
            f"of {args.task} at two or more local batches needed"
        )
    args.out.write_text(json.dumps(measured.to_json(), indent=1) + "\n")
    for batch, seconds in measured.points:
        rate = batch / seconds
        print(f"local batch {batch:5.0f}: {1000 * seconds:8.2f} ms a step, {rate:9,.0f} samples/s")


if __name__ == "__main__":
    run_main(main)
