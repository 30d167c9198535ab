"""Memory × speed of data-parallel strategies on the transformer: DDP, ZeRO-1 and FSDP.

    python benchmarks/memory.py                 # 1, 2 and 4 workers
    python benchmarks/memory.py --workers 1,2   # fewer

Each run is ``kjv-gpt`` with a wider model (width 512, 6 blocks, 8 heads: 21 M
parameters, so that parameters, gradients and Adam's state weigh against the
activations of 4 sequences of 128 tokens a worker) on synthetic token batches (DLBS's
mode: no evaluation), 8 steps of which 3 are warm-up. For each exchange and worker count
it runs twice: with dmlbench's tuned allocator for the step time, tokens/s per worker,
utilisation, comm share and bytes sent a step, and with ``cpu_allocator=returning``
(glibc gives back every block of 4 KiB or more when freed, so resident memory follows
the live tensors) for memory: a worker's peak resident memory in training steps less
its resident memory when the trainer started (the most of any worker), beside what
:mod:`dmlbench.perfmodel.memory` predicts from the model's accounting, and the
optimizer state each worker held.
Results go to ``benchmarks/results/memory/`` (JSON and a figure).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from summary import run_main, write_summary

from dmlbench.perfmodel.memory import MemoryAccount, predicted_bytes
from dmlbench.results import ResultsStore

HERE = Path(__file__).parent
OUT = HERE / "results" / "memory"
MODEL = [
    "recipe.model.options.width=512",
    "recipe.model.options.depth=6",
    "recipe.model.options.heads=8",
    "recipe.local_batch=4",
    "synthetic_data=true",
    "max_steps=8",
    "warmup_steps_excluded=3",
]
STRATEGIES = [
    ("ddp", {}),
    ("zero1", {}),
    ("fsdp", {}),
    ("fsdp", {"reshard_after_forward": False}),
]
MIB = 1 << 20


def label(exchange: str, options: dict) -> str:
    return "fsdp (kept gathered)" if options.get("reshard_after_forward") is False else exchange


def measure(store: Path, workers: int, exchange: str, options: dict) -> dict:
    """Speed from a run with the tuned allocator, memory from one that gives freed
    memory back (the tuned allocator keeps it for the next step by design, and glibc's
    default raises its threshold to the largest block freed so far)."""
    fast = _run(store, workers, exchange, options, "tuned")
    lean = _run(store, workers, exchange, options, "returning")
    return {
        **lean,
        "step_ms": fast["step_ms"],
        "tokens_per_s_per_worker": fast["tokens_per_s_per_worker"],
        "utilisation": fast["utilisation"],
        "comm_share": fast["comm_share"],
        "sent_mb_per_step": fast["sent_mb_per_step"],
        "step_ms_returning": lean["step_ms"],
        "disturbed": fast["disturbed"] or lean["disturbed"],
    }


def _run(store: Path, workers: int, exchange: str, options: dict, allocator: str) -> dict:
    command = [
        sys.executable,
        "-m",
        "dmlbench",
        "run",
        "kjv-gpt",
        "--workers",
        str(workers),
        "--exchange",
        exchange,
        "--store",
        str(store),
        "--quiet",
    ]
    overrides = [*MODEL, f"cpu_allocator={allocator}", f"exchange_options={json.dumps(options)}"]
    for override in overrides:
        command += ["--set", override]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    runs = ResultsStore(store).runs()
    run = runs[-1]  # the newest
    if run.status != "throughput":
        raise SystemExit(f"{exchange} × {workers}: {run.status}: {run.error or done.stderr[-500:]}")
    summary = run.summary
    measured = run.measured_memory  # peak less start, the most of any worker
    account, step_s, rate = (
        summary.memory_account,
        summary.step_time_s,
        summary.samples_per_s_per_worker,
    )
    if measured is None or account is None or step_s is None or rate is None:
        raise SystemExit(f"{exchange} × {workers}: the run measured no memory or no steps")
    predicted = predicted_bytes(MemoryAccount.from_summary(account), exchange, workers, options)
    context = summary.tokens_per_sample or 0
    return {
        "strategy": label(exchange, options),
        "workers": workers,
        "step_ms": 1000 * step_s,
        "tokens_per_s_per_worker": rate * context,
        "utilisation": summary.utilisation,
        # the steady steps' comm phase, mean over ranks, and what a worker handed to
        # collectives a step (FSDP's: counted, and on a CPU its blocked calls timed)
        "comm_share": (summary.phase_shares or {}).get("comm", {}).get("mean"),
        "sent_mb_per_step": (summary.bytes_per_step or 0) / 1e6 or None,
        "measured_mib": measured / MIB,
        "predicted_mib": predicted["total"] / MIB,
        "predicted_parts_mib": {
            k: v / MIB for k, v in predicted.items() if k not in ("total", "other", "at")
        },
        "predicted_at": "backward" if predicted["at"] else "optimizer step",
        "optimizer_state_mib": max(summary.optimizer_state_bytes or [0]) / MIB,
        "account_mib": {k: v / MIB for k, v in account.items() if isinstance(v, int | float)},
        "disturbed": bool(run.disturbed),
    }


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, speed) = plt.subplots(1, 2, figsize=(11, 4))
    counts = sorted({r["workers"] for r in rows})
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == strategy]
        workers = [r["workers"] for r in mine]
        line = mem.plot(workers, [r["measured_mib"] for r in mine], "o-", label=strategy)[0]
        mem.plot(workers, [r["predicted_mib"] for r in mine], "x--", color=line.get_color())
        speed.plot(workers, [r["step_ms"] for r in mine], "o-", label=strategy)
    mem.set(xlabel="workers", ylabel="MiB per worker (training steps)", xticks=counts)
    mem.set_title("memory: measured (o) and predicted (x)")
    speed.set(xlabel="workers", ylabel="ms per step", xticks=counts)
    speed.set_title("step time (tuned allocator; 4 workers share 2 cores)")
    mem.legend()
    fig.suptitle("kjv-gpt, width 512 × 6 blocks (21 M parameters), 4 × 128 tokens a worker")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for workers in counts:
            for exchange, options in STRATEGIES:
                if workers == 1 and options:
                    continue  # one worker: nothing is sharded, one fsdp row is enough
                row = measure(Path(folder) / "store", workers, exchange, options)
                rows.append(row)
                print(
                    f"{row['strategy']:<22} × {workers}: {row['step_ms']:7.0f} ms/step "
                    f"{row['tokens_per_s_per_worker']:7.0f} tok/s/worker  "
                    f"comm {row['comm_share'] or 0:4.0%}, {row['sent_mb_per_step'] or 0:5.1f} "
                    "MB sent a step  "
                    f"memory {row['measured_mib']:6.0f} MiB measured, "
                    f"{row['predicted_mib']:6.0f} predicted "
                    f"({row['measured_mib'] / row['predicted_mib'] - 1:+.0%}); optimizer state "
                    f"{row['optimizer_state_mib']:5.1f} MiB"
                    + ("  [disturbed]" if row["disturbed"] else "")
                )
    ddp = {r["workers"]: r["optimizer_state_mib"] for r in rows if r["strategy"] == "ddp"}
    for row in rows:
        if row["strategy"] == "zero1" and row["workers"] in ddp:
            share = row["optimizer_state_mib"] / ddp[row["workers"]]
            print(f"zero1 × {row['workers']}: optimizer state {share:.3f} of DDP's (1/N)")
    write_summary(OUT / "memory.json", {"rows": rows})
    figure(rows, OUT / "memory.png")


if __name__ == "__main__":
    run_main(main)
