"""Which data-parallel strategy fits a memory budget, and what it costs in step time.

The NERSC guide's decision: if the model fits a worker, plain data parallelism; if not,
shard it. Here "fits" is :mod:`dmlbench.perfmodel.memory`'s prediction from the
accounting of the task's latest stored run, with the activations scaled to the local
batch planned, or, where the task's stored runs of a strategy at the planned worker
count and batch measured more (the tuned allocator keeps freed blocks, and the
prediction leaves the runtime's own buffers out), the most they measured; the cost is
the median steady step time of those runs (undisturbed ones first), where there are any.
A strategy no run measured there is judged as the measured ones are: its prediction plus
the most any measured strategy there exceeded its own (``allowance``), so an unmeasured
DDP is not chosen on a bare prediction over a ZeRO-1 whose run counted the allocator's
cache.
Strategies are tried in the order of their communication: DDP (an all-reduce a step),
ZeRO-1 (and the updated parameters broadcast), FSDP keeping gathered parameters (an
all-gather and a reduce-scatter a unit), FSDP (an all-gather more).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ByteSize, TypeAdapter, ValidationError

from dmlbench.errors import SpecError
from dmlbench.names import shorten
from dmlbench.perfmodel.memory import (
    MemoryAccount,
    flight_recorder_capacity,
    predicted_bytes,
    runtime_bytes,
)
from dmlbench.results.records import RunRecord

STRATEGIES: list[tuple[str, str, dict[str, Any]]] = [
    ("ddp", "ddp", {}),
    ("zero1", "zero1", {}),
    ("fsdp, kept gathered", "fsdp", {"reshard_after_forward": False}),
    ("fsdp", "fsdp", {}),
]
_BYTE_SIZE = TypeAdapter(ByteSize)
MAX_BYTES = 2**60  # 1 EiB: more than any worker has; past it a size is a typo


def parse_bytes(text: str) -> int:
    """``16GiB``, ``500 MB`` (pydantic's ``ByteSize``), ``2e9`` bytes → bytes; a one-line
    error otherwise."""
    try:
        size = float(text)  # bytes, also as 2e9 (1e400: inf)
    except ValueError:
        try:
            size = float(_BYTE_SIZE.validate_python(text.strip()))
        except ValidationError:
            raise SpecError(
                f"memory {shorten(text)!r}: say a size like 16GiB, 500MB or 2e9 (bytes)"
            ) from None
    if size != size:  # nan
        raise SpecError(f"memory {shorten(text)!r}: say a size like 16GiB, 500MB or 2e9 (bytes)")
    if not size < MAX_BYTES:
        raise SpecError(f"memory {shorten(text)!r} is more than 1 EiB: say a worker's memory")
    if size < 1:
        raise SpecError(f"memory {shorten(text)!r} is less than one byte: say a worker's memory")
    return int(size)


@dataclass(frozen=True)
class StrategyFit:
    name: str
    exchange: str
    options: dict[str, Any]
    predicted: dict[str, float]
    measured: int | None  # the most the task's runs at the worker count and batch measured
    step_s: float | None  # measured, median over the task's runs at the worker count
    runs: int
    budget: int
    # unmeasured: the most a measured strategy at this point exceeded its prediction
    allowance: float = 0.0

    @property
    def needs(self) -> float:
        """What a worker needs: the larger of predicted and measured; unmeasured, the
        prediction plus the allowance."""
        return max(self.predicted["total"] + self.allowance, self.measured or 0)

    @property
    def fits(self) -> bool:
        return self.needs <= self.budget


@dataclass(frozen=True)
class MemoryAdvice:
    task: str
    workers: int
    local_batch: int
    budget: int
    account: MemoryAccount
    source: str  # the run the accounting came from
    fits: list[StrategyFit]

    @property
    def choice(self) -> StrategyFit | None:
        return next((f for f in self.fits if f.fits), None)

    def to_json(self) -> dict[str, Any]:
        choice = self.choice
        return {
            "task": self.task,
            "workers": self.workers,
            "local_batch": self.local_batch,
            "memory_per_worker": self.budget,
            "account": self.account.__dict__,
            "account_from": self.source,
            "choice": choice.name if choice else None,
            "strategies": [
                {
                    "strategy": f.name,
                    "exchange": f.exchange,
                    "exchange_options": f.options,
                    "predicted_bytes": f.predicted["total"],
                    "measured_bytes": f.measured,
                    "allowance_bytes": f.allowance,
                    "fits": f.fits,
                    "step_s": f.step_s,
                    "runs": f.runs,
                }
                for f in self.fits
            ],
        }


def advise_memory(
    runs: list[RunRecord], task: str, budget: int, workers: int, local_batch: int | None
) -> MemoryAdvice:
    accounted = [r for r in runs if r.summary.memory_account]
    if not accounted:
        raise SpecError(
            f"no stored run of {task} has a memory account: run it once (any exchange, a "
            f"few steps: dmlbench run {task} --set max_steps=10), same --store"
        )
    latest = accounted[-1]
    batch = local_batch or latest.local_batch
    base = MemoryAccount.from_summary(latest.summary.memory_account or {})
    scale = batch / latest.local_batch  # what one worker's batch makes grows with it
    account = MemoryAccount(
        **{
            **base.__dict__,
            "activations": base.activations * scale,
            "outputs": base.outputs * scale,
        }
    )
    device = (latest.summary.device or "cpu").split(":")[0]
    fits = []
    for name, exchange, options in STRATEGIES:
        # the runtime K: on a CPU the exchange's own, with the Flight Recorder full, as a
        # whole training run leaves it; a GPU's (cuBLAS's workspaces) is the same for
        # every exchange, as the run recorded it
        cpu = device == "cpu" and bool(base.runtime)
        whole_run = runtime_bytes(exchange, device, flight_records=flight_recorder_capacity())
        own = replace(account, runtime=whole_run if cpu else base.runtime)
        predicted = predicted_bytes(own, exchange, workers, options)
        mine = [
            r
            for r in runs
            if r.exchange == exchange
            and r.workers == workers
            and r.local_batch == batch
            and r.summary.step_time_s
            and bool((r.spec.get("exchange_options") or {}).get("reshard_after_forward", True))
            == options.get("reshard_after_forward", True)
        ]
        quiet = [r for r in mine if not r.disturbed] or mine
        step = statistics.median(r.summary.step_time_s or 0.0 for r in quiet) if quiet else None
        measured = [size for r in mine if (size := r.measured_memory) is not None]
        most = max(measured) if measured else None
        fits.append(StrategyFit(name, exchange, options, predicted, most, step, len(quiet), budget))
    over = [f.measured - f.predicted["total"] for f in fits if f.measured is not None]
    allowance = max([0.0, *over])
    fits = [f if f.measured is not None else replace(f, allowance=allowance) for f in fits]
    return MemoryAdvice(task, workers, batch, budget, account, latest.run_id, fits)
