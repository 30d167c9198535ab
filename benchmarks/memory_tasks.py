"""Predicted against measured memory on every task's default configuration: DDP, ZeRO-1
and FSDP at 2 workers.

    python benchmarks/memory_tasks.py                       # every task
    python benchmarks/memory_tasks.py --tasks kjv-gpt,digits-mlp
    python benchmarks/memory_tasks.py --runtime             # the constant K, first
    python benchmarks/memory_tasks.py --widths 16,128,512   # what grows with the model
    python benchmarks/memory_tasks.py --tasks digits-mlp --passes 5   # the spread of a cell

Each run is the task's reference recipe (its model, local batch and optimizer) with
``cpu_allocator=returning`` (glibc gives back every block of 4 KiB or more when freed, so
resident memory follows the live tensors), synthetic batches where the task has an
input shape (DLBS's mode: no data to read, no evaluation) and its own data otherwise,
5 steps. Measured: a worker's peak anonymous resident memory in training steps less its
resident memory when the trainer started, the most of any worker. Predicted: what
:mod:`dmlbench.perfmodel.memory` makes of the run's own accounting. A task whose data is
not on this machine is listed as skipped. Results go to
``benchmarks/results/memory/tasks.json`` (``--tasks`` replaces only its tasks' rows).

``--flight-recorder`` measures what one record of torch's Flight Recorder takes (it
keeps one for every collective, up to ``TORCH_FR_BUFFER_SIZE``), apart from any run: a
two-process gloo group makes all-reduces and broadcasts of one small tensor in turn
until the recorder is full and 1,000 more, reading glibc's allocated bytes
(``mallinfo2``) and the records held every ``--every`` calls; the bytes at the first
full reading, less a record's own (the growth from the last reading on the same slots
of the vector that holds them), over its slots are a slot's bytes.
The figure goes to
``benchmarks/results/memory/flight_recorder.json`` and, by hand, into
:data:`dmlbench.perfmodel.memory.FLIGHT_RECORD_BYTES` and ``FLIGHT_SLOT_BYTES``, before
``--runtime``.

``--runtime`` measures the prediction's constant ``K`` (what a worker allocates whatever
the model) on a model with almost nothing in it, ``digits-mlp --model linear``, which no
task's row uses: measured less predicted without ``K`` and less its Flight Recorder's
records, the most of ``--repeats`` runs. The figures go to
``benchmarks/results/memory/runtime.json`` and, by hand, into
:data:`dmlbench.perfmodel.memory.RUNTIME_CPU_BYTES`, before the tasks are measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from summary import run_main, write_summary

from dmlbench.perfmodel.memory import MemoryAccount, flight_recorder_bytes, predicted_bytes
from dmlbench.results import ResultsStore
from dmlbench.tasks import all_tasks, get_task

OUT = Path(__file__).parent / "results" / "memory"
EXCHANGES = ("ddp", "zero1", "fsdp")
WORKERS = 2
STEPS = ["max_steps=5", "warmup_steps_excluded=2", "cpu_allocator=returning"]
MIB = 1 << 20


def run(
    store: Path, task: str, exchange: str, model: str = "", overrides: tuple[str, ...] = ()
) -> dict:
    synthetic = get_task(task).input_shape is not None
    command = [sys.executable, "-m", "dmlbench", "run", task, "--workers", str(WORKERS)]
    command += ["--exchange", exchange, "--store", str(store), "--quiet"]
    command += ["--model", model] if model else []
    for override in [*STEPS, f"synthetic_data={str(synthetic).lower()}", *overrides]:
        command += ["--set", override]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    mine = [r for r in ResultsStore(store).runs() if r.task == task and r.exchange == exchange]
    if done.returncode > 1 or not mine or mine[-1].status == "failed":
        why = (mine[-1].error if mine else "") or done.stderr.strip() or done.stdout.strip()
        return {
            "task": task,
            "exchange": exchange,
            "skipped": (why or f"exit {done.returncode}")[-300:],
        }
    newest = mine[-1]
    summary = newest.summary
    measured = newest.measured_memory  # peak less start, the most of any worker
    summed = summary.memory_account
    if measured is None or summed is None:
        raise SystemExit(f"{task} {exchange}: the run measured no memory")
    records = int(summed.get("flight_records") or 0)
    account = MemoryAccount.from_summary(summed)
    predicted = predicted_bytes(account, exchange, WORKERS)
    return {
        "task": task,
        "exchange": exchange,
        "local_batch": newest.local_batch,
        "synthetic": synthetic,
        "measured_mib": measured / MIB,
        "predicted_mib": predicted["total"] / MIB,
        "error": measured / predicted["total"] - 1,
        "at": "backward" if predicted["at"] else "optimizer step",
        "first_gradients_mib": predicted.get("first_gradients", 0.0) / MIB,
        "account_mib": {k: v / MIB for k, v in summed.items() if isinstance(v, int | float)},
        "unaccounted_mib": (
            measured
            - predicted_bytes(dataclasses.replace(account, runtime=0.0), exchange, WORKERS)["total"]
        )
        / MIB,
        "flight_records": records,
    }


def median_pass(passes: list[dict]) -> dict:
    """The pass with the median measured memory (the lower middle of an even count),
    carrying every pass's error; a skipped pass stands for all."""
    skipped = [p for p in passes if "skipped" in p]
    if skipped:
        return skipped[0]
    ordered = sorted(passes, key=lambda p: p["measured_mib"])
    return {**ordered[(len(ordered) - 1) // 2], "pass_errors": [p["error"] for p in passes]}


def runtime(repeats: int) -> None:
    """K by exchange: measured less predicted without K on the linear model."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for exchange in EXCHANGES:
            for _ in range(repeats):
                row = run(Path(folder) / "store", "digits-mlp", exchange, model="linear")
                if "skipped" in row:
                    sys.exit(f"{exchange}: {row['skipped']}")
                row["constant_mib"] = (
                    row["unaccounted_mib"] - flight_recorder_bytes(row["flight_records"]) / MIB
                )
                rows.append(row)
                print(
                    f"{exchange:<6} unaccounted {row['unaccounted_mib']:.3f} MiB, of which "
                    f"{row['flight_records']} flight records: K {row['constant_mib']:.3f} MiB",
                    flush=True,
                )
    constants = {
        exchange: max(r["constant_mib"] for r in rows if r["exchange"] == exchange) * MIB
        for exchange in EXCHANGES
    }
    print("RUNTIME_CPU_BYTES =", {k: round(v) for k, v in constants.items()})
    write_summary(
        OUT / "runtime.json",
        {"model": "digits-mlp --model linear", "runtime_bytes": constants, "rows": rows},
    )


def _allocated() -> int:
    """glibc's allocated bytes in this process: its heaps' and its mapped blocks'."""
    import ctypes

    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in names.split()]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Mallinfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def _recorder_worker(rank: int, port: int, every: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from dmlbench.perfmodel.memory import flight_recorder_capacity
    from dmlbench.train.memory import flight_records

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    tensor = torch.ones(16)
    capacity = flight_recorder_capacity()
    start, records = _allocated(), flight_records()
    curve = [{"records": records, "bytes": 0}]
    calls = 0
    while calls < capacity + 1000:  # an all-reduce and a broadcast in turn, past full
        if calls % 2:
            dist.broadcast(tensor, src=0)
        else:
            dist.all_reduce(tensor)
        calls += 1
        if calls % every == 0:
            curve.append({"records": flight_records(), "bytes": _allocated() - start})
    if rank == 0:
        Path(out).write_text(json.dumps({"calls": calls, "curve": curve}))
    dist.destroy_process_group()


def flight_recorder(every: int) -> None:
    """Bytes a record of torch's Flight Recorder, from a two-process gloo group's own
    allocations (see the module's text)."""
    import socket

    import torch.multiprocessing as mp

    from dmlbench.perfmodel.memory import flight_recorder_capacity, flight_recorder_slots

    capacity = flight_recorder_capacity()
    if capacity == 0:
        sys.exit("TORCH_FR_BUFFER_SIZE=0: the Flight Recorder is off; unset it to measure")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "recorder.json"
        mp.spawn(_recorder_worker, args=(port, every, str(out)), nprocs=2)
        found = json.loads(out.read_text())
    for point in found["curve"]:
        print(f"{point['records']:>6} records: {point['bytes'] / 1024:7.0f} KiB allocated")
    # the vector of records doubles up to the power of two at or above the capacity: a
    # record's own bytes from the growth between a reading past its last doubling and
    # the first full one (the same slots), a slot's from what is left when full
    slots = flight_recorder_slots(capacity)
    full = next(p for p in found["curve"] if p["records"] >= capacity)
    after = next(p for p in found["curve"] if p["records"] > slots // 2)
    if after["records"] == full["records"]:
        sys.exit(f"--every {every}: no reading between {slots // 2} records and full")
    own = (full["bytes"] - after["bytes"]) / (full["records"] - after["records"])
    slot = (full["bytes"] - own * full["records"]) / slots
    print(f"FLIGHT_RECORD_BYTES = {own:.0f}, FLIGHT_SLOT_BYTES = {slot:.0f} ({slots} slots)")
    write_summary(
        OUT / "flight_recorder.json",
        {**found, "capacity": capacity, "slots": slots, "record_bytes": own, "slot_bytes": slot},
    )


def widths(hidden: list[int]) -> None:
    """What no term accounts for (measured less predicted without ``K``) on
    ``digits-mlp`` with one hidden layer of each width, beside ``--model linear``: a
    figure that stays flat as the model grows is the runtime's ``K``; one that grows is a
    term the prediction lacks."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for width in [0, *hidden]:
            for exchange in EXCHANGES:
                model, overrides = (
                    ("linear", ())
                    if width == 0
                    else ("", (f"recipe.model.options.hidden=[{width}]",))
                )
                row = run(Path(folder) / "store", "digits-mlp", exchange, model, overrides)
                if "skipped" in row:
                    sys.exit(f"{exchange}: {row['skipped']}")
                row["hidden"] = width
                row["parameter_mib"] = row["account_mib"]["parameters"]
                rows.append(row)
                print(
                    f"hidden {width or 'none (linear)':>13} {exchange:<6} parameters "
                    f"{row['parameter_mib'] * 1024:7.1f} KiB: unaccounted "
                    f"{row['unaccounted_mib']:.2f} MiB",
                    flush=True,
                )
    write_summary(OUT / "widths.json", {"model": "digits-mlp, one hidden layer", "rows": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="")
    parser.add_argument("--runtime", action="store_true", help="measure the constant K")
    parser.add_argument(
        "--flight-recorder", action="store_true", help="measure a Flight Recorder record"
    )
    parser.add_argument("--every", type=int, default=250, help="--flight-recorder's step")
    parser.add_argument("--repeats", type=int, default=2, help="--runtime's runs an exchange")
    parser.add_argument(
        "--passes",
        type=int,
        default=1,
        help="runs of each task and exchange: the row is the median, with every pass's error",
    )
    parser.add_argument(
        "--widths", help="hidden widths of digits-mlp (e.g. 16,128,512): what grows with it"
    )
    args = parser.parse_args()
    if args.flight_recorder:
        flight_recorder(args.every)
        return
    if args.runtime:
        runtime(args.repeats)
        return
    if args.widths:
        widths([int(w) for w in args.widths.split(",")])
        return
    names = (
        args.tasks.split(",")
        if args.tasks
        else [t.name for t in all_tasks() if not t.builtin_for_tests]
    )
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for task in names:
            for exchange in EXCHANGES:
                row = median_pass(
                    [run(Path(folder) / "store", task, exchange) for _ in range(args.passes)]
                )
                rows.append(row)
                if "skipped" in row:
                    print(f"{task:<18} {exchange:<6} skipped: {row['skipped'][-120:]}")
                    break
                every = (
                    "; passes " + ", ".join(f"{e:+.1%}" for e in row["pass_errors"])
                    if args.passes > 1
                    else ""
                )
                print(
                    f"{task:<18} {exchange:<6} measured {row['measured_mib']:8.1f} MiB, "
                    f"predicted {row['predicted_mib']:8.1f} MiB ({row['error']:+.1%}{every}) "
                    f"at {row['at']}; first gradients {row['first_gradients_mib']:.1f} MiB",
                    flush=True,
                )
    fields: dict = {"rows": rows}
    previous = OUT / "tasks.json"
    if args.tasks and previous.is_file():  # keep the other tasks' rows, and their commands
        kept = json.loads(previous.read_text())
        fields["rows"] = [r for r in kept["rows"] if r["task"] not in names] + rows
        fields["other_rows_from"] = [*kept.get("other_rows_from", []), kept["command"]]
    write_summary(previous, fields)


if __name__ == "__main__":
    run_main(main)
