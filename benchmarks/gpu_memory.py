"""GPU runs' peak memory against dmlbench's prediction: as the run predicted it on the
device, and as this revision predicts it (the activations counted again on the meta
device under ``AsOnDevice("cuda")``, the runtime ``K`` as cuBLAS's workspaces on that
GPU, every other part as the run recorded it). Needs no GPU: it reads the stores a GPU
check (``gpu_check.sh``) brought back.

    python benchmarks/gpu_memory.py --store S [--store S2 ...] --out memory.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from summary import run_main, write_summary

from dmlbench.models import build_model
from dmlbench.models.losses import LOSSES
from dmlbench.perfmodel.memory import MemoryAccount, predicted_bytes, runtime_bytes
from dmlbench.results import ResultsStore
from dmlbench.tasks import get_task
from dmlbench.train.hardware import to_channels_last
from dmlbench.train.memory import AsOnDevice, SavedForBackward

# compute capability by the GPU's name (runs before the account recorded K carry none)
CAPABILITY = {"H100": (9, 0), "H200": (9, 0), "A100": (8, 0), "V100": (7, 0)}


def activations_now(task_name: str, batch: int, precision: str, channels_last: bool) -> int:
    """The bytes a step's forward keeps for backward, as this revision counts them for
    a CUDA device (what ``count_step_flops`` counts there)."""
    task = get_task(task_name)
    shape, outputs = task.input_shape, task.num_outputs
    if shape is None or outputs is None:
        sys.exit(f"{task_name}: its input shape is known only from its data")
    with torch.device("meta"):
        model = build_model(task.recipe.model, shape, outputs)
        if channels_last:
            model = to_channels_last(model)
        if task.loss == "next_token":
            x = y = torch.zeros(batch, *shape, dtype=torch.long)
        else:
            x, y = torch.zeros(batch, *shape), torch.zeros(batch, dtype=torch.long)
    dtype = torch.bfloat16 if precision == "bf16" else None
    with SavedForBackward(model) as saved, AsOnDevice("cuda", dtype):
        LOSSES[task.loss][0](model(x), y).mean()
    return saved.bytes


def rows(stores: list[Path]) -> list[dict[str, Any]]:
    found = []
    for store in stores:
        for run in ResultsStore(store).runs():
            account, measured = run.summary.memory_account, run.measured_memory
            if not (run.finished and account and measured and run.gpus):
                continue
            precision = run.precision
            before = predicted_bytes(MemoryAccount.from_summary(account), run.exchange, 1)
            now = dict(account)
            now["activations"] = activations_now(
                run.task, run.local_batch, precision, bool(run.summary.channels_last)
            )
            capability = next((c for k, c in CAPABILITY.items() if k in run.gpus[0]), None)
            now["runtime"] = runtime_bytes(run.exchange, "cuda", capability)
            after = predicted_bytes(MemoryAccount.from_summary(now), run.exchange, 1)
            found.append(
                {
                    "run": run.run_id,
                    "task": run.task,
                    "local_batch": run.local_batch,
                    "precision": precision,
                    "gpu": run.gpus[0],
                    "measured": measured,
                    "predicted_at_run": before["total"],
                    "predicted_now": after["total"],
                    "error_at_run": before["total"] / measured - 1,
                    "error_now": after["total"] / measured - 1,
                }
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, action="append", required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    found = rows(args.store)
    if not found:
        raise SystemExit("no finished GPU runs with a memory account in the stores given")
    gib = 2**30
    for row in sorted(found, key=lambda r: (r["task"], r["precision"], r["local_batch"])):
        print(
            f"{row['task']:18} {row['precision']:5} b={row['local_batch']:<4} measured "
            f"{row['measured'] / gib:6.2f} GiB, predicted {row['predicted_at_run'] / gib:6.2f} "
            f"({100 * row['error_at_run']:+5.1f}%), now {row['predicted_now'] / gib:6.2f} "
            f"({100 * row['error_now']:+5.1f}%)"
        )
    for key in ("error_at_run", "error_now"):
        errors = [abs(row[key]) for row in found]
        within = sum(e <= 0.15 for e in errors)
        print(
            f"{key}: median |error| {100 * statistics.median(errors):.1f}%, "
            f"{within} of {len(errors)} within 15%"
        )
    if args.out:
        write_summary(args.out, {"runs": found})


if __name__ == "__main__":
    run_main(main)
