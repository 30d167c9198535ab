"""Single-node efficiency: dmlbench's one-worker cifar10-resnet20 against a plain
PyTorch loop written here, interleaved, with each side's share of the machine's peak.

    python benchmarks/single_node.py --data-dir ../shared/data/cifar10            # 3 × 1 epoch
    python benchmarks/single_node.py --data-dir ../shared/data/cifar10 --steps 200  # quick

The plain loop is independent of dmlbench: its own ResNet-20 (He et al. 2015, option A
shortcuts, 269,722 weights), its own CIFAR-10 reader, per-example random crop (pad 4)
and flip, the task's recipe (SGD, Nesterov momentum 0.9, weight decay 1e-4, batch 32,
learning rate η·b = 0.1/256 × 32: the recipe's warm-up runs from η·b to η·b·k, flat
for k = 1 worker), data in memory, one process,
``--threads`` threads, the eager default memory layout. dmlbench runs the same
recipe through ``dmlbench run cifar10-resnet20 --workers 1`` with its defaults (and
``--compile`` adds a compiled dmlbench run to each round, ``--default-allocator`` one
with glibc's own allocator settings).

Each round runs the plain loop, the plain loop again in a process of its own with
jemalloc preloaded (``plain-jemalloc``, ``expert.py``: what an expert adds; issue 57),
then dmlbench; ratios are dmlbench's time over each plain loop's from the same round
(the machine drifts between rounds, not within one).
Utilisation is FLOP/s over the peak of a 2048² float32 GEMM on the same threads,
measured once here: the faster of torch.matmul (the BLAS) and oneDNN (a 1×1
convolution), as dmlbench's own probe does. The JSON summary goes to ``--out``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from expert import jemalloc_env, plain_result
from summary import run_main, write_summary
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

HERE = Path(__file__).parent
MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)
BATCH, LR_PER_SAMPLE = 32, 0.1 / 256


# -- the plain loop: nothing below imports dmlbench -----------------------------------


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.stride, self.pad = stride, cout - cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        short = x[:, :, :: self.stride, :: self.stride] if self.stride > 1 else x
        if self.pad:
            short = F.pad(short, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + short)


class ResNet20(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                layers.append(Block(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(x.mean((2, 3)))


def read_cifar(folder: Path) -> tuple[torch.Tensor, ...]:
    """CIFAR-10's binary archive: one label byte and 3,072 pixel bytes per record."""
    if not (folder / "cifar-10-binary.tar.gz").is_file():
        sys.exit(f"{folder} holds no cifar-10-binary.tar.gz: give --data-dir CIFAR-10's folder")
    with tarfile.open(folder / "cifar-10-binary.tar.gz") as archive:

        def read(names: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
            blobs = []
            for name in names:
                member = archive.extractfile(f"cifar-10-batches-bin/{name}")
                assert member is not None, name
                blobs.append(np.frombuffer(member.read(), np.uint8))
            rows = np.concatenate(blobs).reshape(-1, 3073)
            images = torch.from_numpy(rows[:, 1:].reshape(-1, 3, 32, 32).copy())
            return images, torch.from_numpy(rows[:, 0].astype(np.int64))

        train = read([f"data_batch_{i}.bin" for i in range(1, 6)])
        return (*train, *read(["test_batch.bin"]))


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Per example: pad 4, crop 32×32 at a random offset, mirror half of them."""
    padded = F.pad(images, (4, 4, 4, 4))
    out = torch.empty_like(images)
    offsets = torch.randint(0, 9, (len(images), 2), generator=generator).tolist()
    flips = (torch.rand(len(images), generator=generator) < 0.5).tolist()
    for i, ((dy, dx), flip) in enumerate(zip(offsets, flips, strict=True)):
        crop = padded[i, :, dy : dy + 32, dx : dx + 32]
        out[i] = crop.flip(-1) if flip else crop
    return out


def normalise(images: torch.Tensor) -> torch.Tensor:
    return (images.float() / 255 - MEAN) / STD


def plain_loop(data: tuple[torch.Tensor, ...], steps: int | None, seed: int) -> dict[str, Any]:
    """One epoch (or ``steps``) of the recipe, then the test set; seconds of each."""
    train_x, train_y, test_x, test_y = data
    torch.manual_seed(seed)
    model = ResNet20()
    # one worker: the recipe's warm-up from η·b to η·b·k is flat at η·b
    optimizer = torch.optim.SGD(
        model.parameters(), lr=LR_PER_SAMPLE * BATCH, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(train_x), generator=generator)
    per_epoch = len(train_x) // BATCH
    total = min(steps or per_epoch, per_epoch)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    for step in range(total):
        index = order[step * BATCH : (step + 1) * BATCH]
        x = normalise(augment(train_x[index], generator))
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), train_y[index])
        loss.backward()
        optimizer.step()
    train_s = time.perf_counter() - start
    faults_per_step = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / total
    model.eval()
    correct = 0
    with torch.no_grad():
        for at in range(0, len(test_x), 1000):
            out = model(normalise(test_x[at : at + 1000]))
            correct += int((out.argmax(1) == test_y[at : at + 1000]).sum())
    eval_s = time.perf_counter() - start - train_s
    model.train()
    x = normalise(train_x[:BATCH])
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), train_y[:BATCH]).backward()
    flops = counter.get_total_flops()
    return {
        "steps": total,
        "train_s": train_s,
        "eval_s": eval_s,
        "loss": loss.item(),
        "accuracy": correct / len(test_x),
        "flops_per_step": flops,
        "page_faults_per_step": faults_per_step,
    }


def gemm_peaks(threads: int, size: int = 2048, repeats: int = 8) -> dict[str, float]:
    """FLOP/s of a ``size``² float32 GEMM by torch.matmul (the BLAS) and by oneDNN (a 1×1
    convolution over a channels-last image of one row: the same product)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    weight = a.reshape(size, size, 1, 1)
    image = b.reshape(1, size, 1, size).contiguous(memory_format=torch.channels_last)
    paths = {"matmul": lambda: a @ b, "oneDNN": lambda: F.conv2d(image, weight)}
    peaks = {}
    for name, gemm in paths.items():
        gemm()
        peaks[name] = 2 * size**3 / min(_timed(gemm) for _ in range(repeats))
    return peaks


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# -- dmlbench, as a user runs it -----------------------------------------------------


def instrumentation_per_step(steps: int = 20_000) -> float:
    """Seconds per step of what dmlbench's training step adds for its bookkeeping: the
    phase timer's start and laps and the heartbeat's beats, as ``Trainer.train_step``
    calls them (one start, six laps, four beats)."""
    from dmlbench.heartbeat import beat
    from dmlbench.train.timers import PhaseTimer

    timer = PhaseTimer()
    start = time.perf_counter()
    for step in range(steps):
        beat(step, "data")
        timer.start()
        timer.lap("data")
        beat(step, "forward")
        timer.lap("forward")
        timer.lap("backward")
        beat(step, "comm")
        timer.lap("comm")
        beat(step, "optimizer")
        timer.lap("optimizer")
        timer.lap("comm")
    return (time.perf_counter() - start) / steps


def dmlbench_run(args: argparse.Namespace, store: Path, *extra: str) -> dict[str, Any]:
    limit = ["--set", f"max_steps={args.steps}"] if args.steps else []
    command = [
        sys.executable,
        "-m",
        "dmlbench",
        "run",
        "cifar10-resnet20",
        "--workers",
        "1",
        "--set",
        "recipe.max_epochs=1",
        "--set",
        "stop_at_target=false",
        "--set",
        f"data_dir={args.data_dir}",
        "--set",
        f"threads_per_worker={args.threads}",
        *limit,
        *extra,
        "--store",
        str(store),
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"dmlbench run failed: {done.stderr.strip().splitlines()[-1:]}")
    summary = json.loads(done.stdout)["summary"]
    keys = (
        "train_s",
        "eval_s",
        "elapsed_s",
        "steps",
        "flops_per_step",
        "flops_per_s",
        "utilisation",
        "peak_flops_per_s",
        "compile_s",
        "channels_last",
        "compiled",
        "cpu_allocator",
    )
    faults = max(summary.get("page_faults_per_step") or [None])
    return {k: summary.get(k) for k in keys} | {
        "accuracy": summary.get("best_metric"),
        "page_faults_per_step": faults,
    }


def plain_jemalloc(args: argparse.Namespace, seed: int, peak: float) -> dict[str, Any]:
    """The plain loop in a process of its own with jemalloc preloaded (``expert.py``)."""
    command = [sys.executable, __file__, "--data-dir", str(args.data_dir)]
    command += ["--threads", str(args.threads), "--plain-seed", str(seed)]
    if args.steps:
        command += ["--steps", str(args.steps)]
    env = jemalloc_env()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode or not done.stdout.strip():
        sys.exit(f"the plain-jemalloc loop failed: {done.stderr.strip().splitlines()[-1:]}")
    got = plain_result(done.stdout, env)
    got["utilisation"] = got["flops_per_step"] * got["steps"] / got["train_s"] / peak
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/cifar10"))
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: an epoch)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--compile", action="store_true", help="also a compiled dmlbench run")
    parser.add_argument(
        "--default-allocator",
        action="store_true",
        help="also a dmlbench run with cpu_allocator=default",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "single_node.json")
    parser.add_argument("--plain-seed", type=int, help=argparse.SUPPRESS)  # one plain loop
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.plain_seed is not None:  # the plain-jemalloc contender's own process
        got = plain_loop(read_cifar(args.data_dir), args.steps, seed=args.plain_seed)
        print(json.dumps({**got, "jemalloc": hasattr(ctypes.CDLL(None), "mallctl")}))
        return
    peaks = gemm_peaks(args.threads)
    peak = max(peaks.values())
    print(
        f"GEMM peak: {peak / 1e9:.0f} GFLOP/s on {args.threads} threads ("
        + ", ".join(f"{k} {v / 1e9:.0f}" for k, v in peaks.items())
        + ")"
    )
    data = read_cifar(args.data_dir)
    variants: dict[str, tuple[str, ...]] = {"dmlbench": ()}
    if args.compile:
        variants["dmlbench compiled"] = ("--set", "compile=true")
    if args.default_allocator:
        variants["dmlbench default allocator"] = ("--set", "cpu_allocator=default")
    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(args.rounds):
            plain = plain_loop(data, args.steps, seed=number)
            plain["utilisation"] = (
                plain["flops_per_step"] * plain["steps"] / plain["train_s"] / peak
            )
            expert = plain_jemalloc(args, number, peak)
            row: dict[str, Any] = {"plain": plain, "plain-jemalloc": expert}
            for name, extra in variants.items():
                row[name] = dmlbench_run(args, Path(scratch) / f"store-{number}", *extra)
                ours = row[name]
                ours["ratio_train"] = ours["train_s"] / plain["train_s"]
                ours["ratio_train_jemalloc"] = ours["train_s"] / row["plain-jemalloc"]["train_s"]
                # both sides' utilisation the same way: every step's FLOPs over the
                # training time, against the peak measured here
                ours["utilisation_reported"] = ours["utilisation"]
                achieved = ours["flops_per_step"] * ours["steps"] / ours["train_s"]
                ours["utilisation"] = achieved / peak
                ours["ratio_with_eval"] = ours["elapsed_s"] / (plain["train_s"] + plain["eval_s"])
            rounds.append(row)
            line = [
                f"round {number + 1}: plain {plain['train_s']:.1f} s (+{plain['eval_s']:.1f} "
                f"s eval, {plain['utilisation']:.0%} of peak, "
                f"{plain['page_faults_per_step']:,.0f} page faults a step)"
            ]
            for name in variants:
                ours = row[name]
                line.append(
                    f"{name} {ours['train_s']:.1f} s (+{ours['eval_s']:.1f} s eval, "
                    f"{ours['utilisation']:.0%}, {ours['page_faults_per_step']:,.0f} "
                    f"faults): {ours['ratio_train']:.2f}× training "
                    f"({ours['ratio_train_jemalloc']:.2f}× plain-jemalloc's "
                    f"{row['plain-jemalloc']['train_s']:.1f} s), "
                    f"{ours['ratio_with_eval']:.2f}× with evaluation"
                )
            print("; ".join(line), flush=True)
    medians = {
        name: {
            k: statistics.median(r[name][k] for r in rounds)
            for k in ("ratio_train", "ratio_train_jemalloc", "ratio_with_eval", "utilisation")
        }
        for name in variants
    }
    for baseline in ("plain", "plain-jemalloc"):
        medians[baseline] = {
            "utilisation": statistics.median(r[baseline]["utilisation"] for r in rounds)
        }
    bookkeeping = instrumentation_per_step()
    step = statistics.median(r["dmlbench"]["train_s"] / r["dmlbench"]["steps"] for r in rounds)
    print(
        f"phase timers and heartbeats: {bookkeeping * 1e6:.1f} µs per step, "
        f"{bookkeeping / step:.3%} of dmlbench's {step * 1e3:.0f} ms step"
    )
    for name, figures in medians.items():
        print(f"median {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    write_summary(
        args.out,
        {
            "threads": args.threads,
            "gemm_peak_flops_per_s": peak,
            "gemm_paths_flops_per_s": peaks,
            "rounds": rounds,
            "medians": medians,
            "bookkeeping_s_per_step": bookkeeping,
        },
    )


if __name__ == "__main__":
    run_main(main)
