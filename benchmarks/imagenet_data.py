"""ImageNet-class input: JPEG decoders compared, and the data share of ResNet-50's step.

    python benchmarks/imagenet_data.py               # decoders, then the share at 1 and 2 workers
    python benchmarks/imagenet_data.py --skip-runs   # decoders only

1. Decoders, on the generated ImageNet sample's files held in memory (no disk in the
   timing), one thread in one process: images/s per core for decoding alone, and for
   decoding plus the training view (random-resized crop to 224², flip) as dmlbench's
   loader processes do it. Pillow (dmlbench's choice) against OpenCV where
   ``opencv-python-headless`` is installed; both wheels carry libjpeg-turbo.
2. The data share: ``imagenet-resnet50`` on the sample with the default loader settings
   (``loader_processes=auto``), batch 32 a worker, at 1 and 2 workers; the share of the
   steady steps spent waiting for input (the ``data`` phase). Goal: ≤ 10%.

The sample (``dmlbench.data.imagenet.write_sample``) is real JPEG files of ImageNet's
typical size (about 460×360, quality 90, ~130 KB: ImageNet's average is ~110 KB).
Results go to ``benchmarks/results/imagenet_data.json``.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from summary import run_main, write_summary

from dmlbench.data import imagenet
from dmlbench.data.images import train_view

HERE = Path(__file__).parent

RUN = r"""
import json, sys
from pathlib import Path

def main():
    from dmlbench.launch import run_benchmark
    from dmlbench.resolve import resolve_spec
    from dmlbench.results import ResultsStore

    store_dir, data_dir = sys.argv[1], sys.argv[2]
    workers, steps, synthetic = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
    overrides = [
        f"data_dir={data_dir}", "partial_data=true", f"max_steps={steps}",
        "warmup_steps_excluded=2", "eval_every_epochs=1000", f"synthetic_data={synthetic}",
    ]
    spec = resolve_spec("imagenet-resnet50", workers=workers, overrides=overrides)
    store = ResultsStore(Path(store_dir))
    outcome = run_benchmark(spec, store, echo=False)
    row = store.runs(outcome.run_id)[0]
    shares = []
    for phases in row.summary.phases_steady:
        train = {k: v for k, v in phases.items() if k != "eval"}
        shares.append(train["data"] / sum(train.values()))
    print(json.dumps({
        "status": outcome.status, "data_share": shares,
        "step_s": row.summary.global_batch / row.throughput if row.throughput else None,
        "loader_processes": spec.loader_processes_per_worker(), "disturbed": row.disturbed,
    }))

if __name__ == "__main__":
    run_main(main)
"""


def pillow_decode(data: bytes) -> torch.Tensor:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)


def opencv_decode(data: bytes) -> torch.Tensor:
    import cv2

    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return torch.from_numpy(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)).permute(2, 0, 1)


def decoders() -> dict:
    found = {"pillow": pillow_decode}
    try:
        import cv2

        cv2.setNumThreads(1)
        found["opencv"] = opencv_decode
    except ImportError:
        print("opencv-python-headless is not installed: Pillow alone", flush=True)
    return found


def rate(fn, files: list[bytes], repeats: int = 3) -> float:
    """Images per second, the best of ``repeats`` passes over ``files``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for data in files:
            fn(data)
        best = min(best, time.perf_counter() - start)
    return len(files) / best


def decoder_versions() -> dict[str, str]:
    """The versions of the JPEG decoders installed here (each is optional)."""
    versions = {}
    for name, module in (("pillow", "PIL"), ("opencv", "cv2")):
        try:
            versions[name] = importlib.import_module(module).__version__
        except ImportError:
            continue
    return versions


def compare_decoders(sample: Path) -> dict:
    torch.set_num_threads(1)
    files = [p.read_bytes() for p in sorted((sample / "train").rglob("*.JPEG"))[:200]]
    rng = np.random.default_rng(0)
    results: dict[str, Any] = {}
    for name, fn in decoders().items():
        decode_rate = rate(fn, files)
        view_rate = rate(lambda d, fn=fn: train_view(fn(d), rng), files)
        results[name] = {"decode_per_s": decode_rate, "decode_and_view_per_s": view_rate}
        print(
            f"{name:7s} decode {decode_rate:6.0f} images/s per core; "
            f"decode + training view {view_rate:6.0f}",
            flush=True,
        )
    results["mean_file_kb"] = sum(map(len, files)) / len(files) / 1024
    return results


def _run(sample: Path, workers: int, steps: int, synthetic: bool) -> dict:
    with tempfile.TemporaryDirectory() as store:
        args = [store, str(sample), str(workers), str(steps), "1" if synthetic else "0"]
        out = subprocess.run(
            [sys.executable, "-c", RUN, *args], capture_output=True, text=True, check=True
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def data_share(sample: Path, workers: int, steps: int) -> dict:
    """The share of the step spent waiting for decoded batches, and the step time
    against synthetic data at the same settings: the decoding processes share the cores
    with the model, which the data share alone does not show."""
    files = _run(sample, workers, steps, synthetic=False)
    synthetic = _run(sample, workers, steps, synthetic=True)
    files["synthetic_step_s"] = synthetic["step_s"]
    print(
        f"{workers} worker(s), {files['loader_processes']} loader processes each: data "
        f"share {max(files['data_share']):.1%} (the most of any worker), "
        f"{files['step_s']:.2f} s per step; synthetic data {synthetic['step_s']:.2f} s "
        f"({files['step_s'] / synthetic['step_s']:.2f}x)",
        flush=True,
    )
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--per-class", type=int, default=80)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-runs", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "imagenet_data.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sample = imagenet.write_sample(Path(tmp), args.classes, args.per_class, 4)
        result = {
            "decoders": compare_decoders(sample),
            "runs": {}
            if args.skip_runs
            else {str(w): data_share(sample, w, args.steps) for w in args.workers},
        }
    result["decoder_versions"] = decoder_versions()
    write_summary(args.out, result)


if __name__ == "__main__":
    run_main(main)
