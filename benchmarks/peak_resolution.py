"""How finely a CPU worker's memory peak can be measured: dmlbench's own instrument
(``dmlbench.train.memory``: restart the kernel's peak, read the resident memory, later
read the peak) on transient blocks of known size.

Linux keeps a process's resident-page counts per CPU and folds each CPU's share into
the process's total in batches (32 pages with 2 CPUs). ``/proc/self/status`` sums the
shares when it is read, so the resident memory *now* is exact. The peak of memory
that has since been unmapped (``VmHWM``) was recorded from the folded total at the
moment of unmapping, as was the reset that starts the peak over. That folded total is
off by whatever each CPU had not folded in yet, in either direction.

Each trial does what a training step does to the instrument, on a block whose size is
known:

- it leaves the per-CPU counters in some state: blocks of random sizes touched and
  freed on random CPUs;
- it restarts the peak and reads the resident memory, as the trainer does before its
  steps;
- it touches a block of N pages on one CPU and unmaps it on another, as a step's
  temporaries are;
- it reads the peak, as the trainer does after its steps.

It prints, by block size, the measured rise against the block's size. The spread is
the instrument's resolution: a cell of the memory table within it is not a miss of the
prediction.

    python benchmarks/peak_resolution.py --out benchmarks/results/memory/peak_resolution.json
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import random
import statistics
from pathlib import Path

import torch
from summary import run_main, write_summary

from dmlbench.train.memory import peak_bytes, resident_bytes, restart_peak

PAGE = mmap.PAGESIZE
CPU = torch.device("cpu")


def touch(pages: int) -> mmap.mmap:
    block = mmap.mmap(-1, pages * PAGE)
    for index in range(pages):
        block[index * PAGE] = 1
    return block


def on_cpu(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})


def stir(cpus: list[int], rng: random.Random) -> None:
    """Leave each CPU's unfolded share of the counters somewhere in its range."""
    for _ in range(8):
        on_cpu(rng.choice(cpus))
        block = touch(rng.randrange(1, 64))
        on_cpu(rng.choice(cpus))
        block.close()


def trial(pages: int, cpus: list[int], rng: random.Random) -> int:
    """The peak's measured rise, in bytes, over a transient block of ``pages`` pages."""
    stir(cpus, rng)
    restart_peak(CPU)
    start = resident_bytes(CPU)
    on_cpu(rng.choice(cpus))
    block = touch(pages)
    on_cpu(rng.choice(cpus))
    block.close()
    return peak_bytes(CPU) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--pages", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if platform.system() != "Linux":
        raise SystemExit("the kernel's peak (VmHWM) is Linux's")
    cpus = sorted(os.sched_getaffinity(0))
    rng = random.Random(args.seed)
    rows = []
    print(f"{len(cpus)} CPUs, kernel {platform.release()}, page {PAGE // 1024} KiB")
    for pages in args.pages:
        errors_kib = [(trial(pages, cpus, rng) - pages * PAGE) / 1024 for _ in range(args.trials)]
        rows.append(
            {
                "block_kib": pages * PAGE // 1024,
                "trials": args.trials,
                "error_kib_min": min(errors_kib),
                "error_kib_median": statistics.median(errors_kib),
                "error_kib_max": max(errors_kib),
            }
        )
        row = rows[-1]
        print(
            f"block {row['block_kib']:6,} KiB: measured less true "
            f"{row['error_kib_min']:+6.0f} to {row['error_kib_max']:+6.0f} KiB "
            f"(median {row['error_kib_median']:+.0f}) over {args.trials} trials"
        )
    if args.out:
        summary = {"cpus": len(cpus), "kernel": platform.release(), "rows": rows}
        write_summary(args.out, summary)


if __name__ == "__main__":
    run_main(main)
