"""What rank 0's progress word costs a run: the word's own time, and the check a step
makes for it, against a training step.

    python benchmarks/progress_word.py

A word (``dmlbench.train.progress.ProgressMeter.word``: the loss read, the rates, the
process's memory from ``/proc``) is timed over 2,000 calls; the check every step makes
(``due``, two clock reads) over 200,000. Their cost is set beside the step times this
machine measured for ``digits-mlp`` (2.77 ms, the README's run) and ``kjv-gpt`` (1.26 s,
BENCHMARKS.md): a word every 2 s adds word / 2 s, a check adds check / step.
Results go to ``benchmarks/results/progress_word.json``.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from summary import run_main, write_summary

from dmlbench.train.hardware import Peak
from dmlbench.train.progress import PROGRESS_EVERY_S, ProgressMeter

OUT = Path(__file__).parent / "results" / "progress_word.json"
STEPS_S = {"digits-mlp": 2.77e-3, "kjv-gpt": 1.26}


def best_of(calls: int, action, rounds: int = 5) -> float:
    """Seconds a call, the best of ``rounds`` rounds of ``calls`` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            action()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    meter = ProgressMeter(torch.device("cpu"), 64, 128, 1e9, Peak(1e11, "configured"))
    loss = torch.tensor(123.0)
    word_s = best_of(2_000, lambda: meter.word(100, loss, 10))
    check_s = best_of(200_000, meter.due)
    rows = {
        task: {
            "step_s": step,
            "word_share": word_s / PROGRESS_EVERY_S,
            "check_share": check_s / step,
        }
        for task, step in STEPS_S.items()
    }
    print(f"a word: {word_s * 1e6:.1f} µs; the check a step makes: {check_s * 1e9:.0f} ns")
    for task, row in rows.items():
        print(
            f"{task}: a word every {PROGRESS_EVERY_S:g} s adds {row['word_share']:.5%} of the "
            f"run's time; the check adds {row['check_share']:.5%} to each step"
        )
    write_summary(
        OUT,
        {
            "word_s": word_s,
            "check_s": check_s,
            "every_s": PROGRESS_EVERY_S,
            "tasks": rows,
        },
    )


if __name__ == "__main__":
    run_main(main)
