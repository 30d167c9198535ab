"""``dmlbench advise``: how many workers and what batch, joined from three measurements.

- **The statistics**: the gradient noise scale ``B_noise`` measured in the task's runs
  (:mod:`dmlbench.noise`). McCandlish et al. (2018) model the epochs a target
  takes at global batch ``B`` as ``E(B) = E_min·(1 + B / B_noise)``: below ``B_noise``
  a larger batch costs few extra epochs, far above it each doubling costs about twice
  the epochs.
- **The store's epochs to the target**: measured where a run reached the target at that
  global batch; elsewhere the model above through the measured points (or, without a
  noise scale, the nearest measured batch's epochs, said to be assumed).
- **The performance model**: step time at each worker count and local batch on the
  network (:mod:`dmlbench.perfmodel`), communication from ``bench allreduce``. Compute
  per step is a line ``fixed + per example · b`` fitted through the local batches the
  store measured (proportional to ``b`` where it measured one), times the slowdown
  measured at each worker count, or, for workers that share one host's cores, assumed
  from how many share them.

A local batch below the smallest one measured is never recommended: there the per-step
overhead the line cannot see dominates, and the line is optimistic (cifar10-resnet20 at
b = 8: 26 ms a step predicted from b = 32–128, 35.6 ms measured). Such points, where
they predict faster than the recommendation, are listed as worth measuring instead.
Above the largest batch measured the line holds better (per-example cost settles), and
the advice says it is extrapolated.

Every number in the advice carries where it came from.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from dmlbench.advise.noise_evidence import (
    UNMEASURED,
    NoiseEvidence,
    noise_evidence,
    noise_unmeasured,
)
from dmlbench.errors import DmlbenchError

if TYPE_CHECKING:
    from dmlbench.perfmodel import CommCalibration, Link
    from dmlbench.perfmodel.calibrate import TaskCalibration
    from dmlbench.prices import Price
    from dmlbench.results.records import RunRecord
    from dmlbench.results.store import ResultsStore
    from dmlbench.tasks import TaskDefinition

BATCH_FACTORS = (0.25, 0.5, 1, 2, 4, 8)  # local batches tried: the recipe's × these
BUSY_WORKER = 0.5  # a worker waiting on the network for more of a step than this is wasted


@dataclass(frozen=True)
class ComputeModel:
    """Compute seconds per step at (workers, local batch), and where that came from."""

    workers: int  # the worker count the line was fitted at
    fixed_s: float
    per_example_s: float
    batches: list[int]  # the local batches measured at ``workers``
    slowdown: dict[int, float]  # measured: compute at n workers ÷ at ``workers``, same b
    cores: int | None  # workers share this many cores (one host); None: one host each

    def shared(self, workers: int) -> float:
        """How much slower each worker computes when ``workers`` share the cores."""
        return max(1.0, workers / self.cores) if self.cores else 1.0

    def factor(self, workers: int) -> tuple[float, str]:
        """The slowdown at ``workers`` against the line's, and where it came from."""
        line = "line" if len(self.batches) > 1 else "assumed ∝ b"
        if workers in self.slowdown:
            return self.slowdown[workers], f"{line} ×{self.slowdown[workers]:.2f} measured"
        # from the nearest count measured below, as more workers share the same cores
        anchor = max((n for n in self.slowdown if n < workers), default=self.workers)
        factor = self.slowdown.get(anchor, 1.0) * self.shared(workers) / self.shared(anchor)
        if factor == 1.0:
            return 1.0, line
        if self.shared(workers) == self.shared(anchor):
            return factor, f"{line} ×{factor:.2f} assumed as at {anchor}"
        return factor, f"{line} ×{factor:.2f} assumed: {workers} share {self.cores} cores"

    def line(self) -> str:
        points = ", ".join(str(b) for b in self.batches)
        fit = "fitted" if len(self.batches) > 1 else "assumed proportional to b from"
        per = self.per_example_s  # 10.03 ms, not 10031.71 µs
        each = f"{1e3 * per:.2f} ms" if per >= 1e-3 else f"{1e6 * per:.2f} µs"
        workers = f"{self.workers} worker{'s' * (self.workers != 1)}"
        # a line through one point has no fixed part: "0.000 ms + ..." said one
        fixed = f"{1e3 * self.fixed_s:.3f} ms + " if len(self.batches) > 1 else ""
        return f"{fixed}{each} × b per step ({fit} b={points} at {workers})"


def compute_model(runs: Sequence[RunRecord], task: str, cores: int | None) -> ComputeModel:
    """The compute line from ``task``'s timed runs (undisturbed ones preferred) at their
    fewest workers, and the slowdown measured at every other worker count."""
    from dmlbench.perfmodel.calibrate import compute_step_s, timed_runs

    mine = timed_runs(runs, task)
    quiet = [r for r in mine if not r.disturbed] or mine
    if not quiet:
        raise DmlbenchError(
            f"no finished run of {task} in the store to calibrate compute from; run "
            f"`dmlbench run {task}` with the same --store first"
        )
    by_point: dict[tuple[int, int], list[float]] = {}
    for run in quiet:
        by_point.setdefault((run.workers, run.local_batch), []).append(compute_step_s(run.summary))
    step = {point: statistics.median(v) for point, v in by_point.items()}
    fewest = min(n for n, _ in step)
    line = {b: t for (n, b), t in step.items() if n == fewest}
    batches = sorted(line)
    if len(batches) > 1:
        slope, fixed = statistics.linear_regression(batches, [line[b] for b in batches])
        if fixed < 0 or slope < 0:  # noise: through the origin, or flat
            slope, fixed = (
                (sum(b * line[b] for b in batches) / sum(b * b for b in batches), 0.0)
                if slope > 0
                else (0.0, statistics.mean(line.values()))
            )
    else:
        (only,) = batches
        slope, fixed = line[only] / only, 0.0
    slowdown: dict[int, float] = {}
    for n in {n for n, _ in step} - {fewest}:
        ratios = [t / line[b] for (m, b), t in step.items() if m == n and b in line]
        if ratios:
            slowdown[n] = statistics.median(ratios)
    return ComputeModel(fewest, fixed, slope, batches, slowdown, cores)


@dataclass(frozen=True)
class EpochModel:
    """Epochs to the target at a global batch, and where that number came from."""

    measured: dict[int, float]  # global batch → mean epochs of the runs that reached it
    noise: float | None  # B_noise
    given: bool = False  # ``measured`` is the user's assumption (--epochs), not runs'

    def fit(self) -> tuple[float, float, str] | None:
        """``(E_min, B_crit, where B_crit came from)`` of ``E(B) = E_min·(1 + B/B_crit)``.

        Fitted to the epochs measured at two or more global batches where they grow with
        the batch (a line in ``B``: intercept ``E_min``, slope ``E_min/B_crit``). The
        measured noise scale ``B_simple`` stands in for ``B_crit`` otherwise; it can
        underestimate it (McCandlish et al. §2.3: the Hessian's conditioning), so
        measured epochs win where there are enough."""
        if len(self.measured) >= 2 and not self.given:
            batches = sorted(self.measured)
            epochs = [self.measured[b] for b in batches]
            slope, least = statistics.linear_regression(batches, epochs)
            if slope > 0 and least > 0:
                return least, least / slope, "a line through the measured epochs"
        if self.noise is None or not self.measured:
            return None
        least = statistics.mean(e / (1 + b / self.noise) for b, e in self.measured.items())
        return least, self.noise, "the measured noise scale"

    def at(self, batch: int) -> tuple[float, str]:
        if batch in self.measured:
            return self.measured[batch], f"{self.kind} at B={batch}"
        fitted = self.fit()
        if fitted is not None:
            least, critical, source = fitted
            points = ", ".join(str(b) for b in sorted(self.measured))
            return least * (1 + batch / critical), (
                f"modelled: E_min·(1 + B/B_crit) through B={points} ({self.kind}), "
                f"B_crit ≈ {critical:,.0f} from {source}"
            )
        if not self.measured:
            raise DmlbenchError(
                "no run reached the target, so epochs to the target are unknown; run the "
                "task to its target once (same --store), or assume a number with --epochs"
            )
        nearest = min(self.measured, key=lambda b: abs(b - batch))
        return self.measured[nearest], f"assumed: as at B={nearest} ({self.kind}; no noise scale)"

    @property
    def kind(self) -> str:
        return "assumed (--epochs)" if self.given else "measured"


@dataclass
class Candidate:
    workers: int
    local_batch: int
    global_batch: int
    epochs: float
    epochs_source: str
    step_s: float
    compute_s: float
    compute_source: str
    comm_ratio: float
    tta_s: float
    cost: float | None
    below_measured: bool = False  # compute extrapolated below the local batches measured


@dataclass
class Advice:
    task: str
    network: str
    candidates: list[Candidate]  # fastest first, within or above the measured local batches
    noise: NoiseEvidence | None
    sources: dict[str, str]
    learning_rate: str
    current: Candidate | None = None
    broken: list[str] = field(default_factory=list)  # guidelines the current plan breaks
    # faster than the best on paper, but their compute is extrapolated below the batches
    # measured: measure one before trusting it
    worth_measuring: list[Candidate] = field(default_factory=list)
    unpriced: str | None = None  # why there is no cost: the price is for another device

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "network": self.network,
            "recommended": asdict(self.best),
            "runners_up": [asdict(c) for c in self.candidates[1:5]],
            "current": asdict(self.current) if self.current else None,
            "broken_guidelines": self.broken,
            "worth_measuring": [asdict(c) for c in self.worth_measuring],
            "noise_scale": self.noise.b_simple if self.noise else None,
            "learning_rate": self.learning_rate,
            "sources": self.sources,
        }


def worker_counts(maximum: int) -> list[int]:
    """1, 2, 4, … up to ``maximum``, and ``maximum`` itself."""
    counts = [2**k for k in range(int(math.log2(maximum)) + 1)]
    return counts if counts[-1] == maximum else [*counts, maximum]


def advise(
    task: TaskDefinition,
    calibration: TaskCalibration,
    compute: ComputeModel,
    comm: dict[int, CommCalibration],
    noise: NoiseEvidence | None,
    *,
    max_workers: int,
    network: str,
    link: Link,
    price_per_worker_hour: float | None = None,
    current: tuple[int, int] | None = None,  # (workers, local batch) the user plans
    assume_epochs: float | None = None,  # at the recipe's batch, when no run reached it
    unmeasured: str = UNMEASURED,  # why ``noise`` is None
) -> Advice:
    """Every (workers, local batch) up to ``max_workers``, predicted and ranked by time
    to accuracy; the guidelines ``current`` breaks."""
    from dmlbench.perfmodel import comm_for, predict

    b_noise = noise.b_simple if noise else None
    epochs = EpochModel(calibration.epochs_by_batch, b_noise)
    if not epochs.measured and assume_epochs is not None:
        epochs = EpochModel({task.recipe.local_batch: assume_epochs}, b_noise, given=True)
    examples = calibration.train_examples or task.train_examples or 0

    def candidate(workers: int, local: int) -> Candidate:
        batch = workers * local
        assumed, source = epochs.at(batch)
        factor, shared = compute.factor(workers)
        lowest, highest = compute.batches[0], compute.batches[-1]
        if local < lowest:
            shared += f", extrapolated below b={lowest}"
        elif local > highest:
            shared += f", extrapolated above b={highest}"
        guess = predict(
            workers=workers,
            algorithm="ring",
            local_batch=local,
            compute_per_example_s=compute.per_example_s * factor,
            compute_fixed_s=compute.fixed_s * factor,
            gradient_bytes=calibration.gradient_bytes,
            train_examples=examples,
            epochs_to_target=assumed,
            # evaluation is sharded over the workers, and as slow as their compute
            eval_s_per_epoch=calibration.eval_s_per_epoch * calibration.workers / workers * factor,
            link=link,
            calibration=comm_for(comm, max(2, workers)),
            price_per_worker_hour=price_per_worker_hour,
        )
        return Candidate(
            workers,
            local,
            batch,
            assumed,
            source,
            guess.step_s,
            guess.compute_s,
            shared,
            guess.comm_ratio,
            guess.tta_s,
            guess.cost,
            below_measured=local < lowest,
        )

    base = task.recipe.local_batch
    # the recipe's batch scaled, and every batch measured (so one is always trusted)
    locals_ = sorted({max(1, round(base * f)) for f in BATCH_FACTORS} | set(compute.batches))
    grid = [
        candidate(n, b)
        for n in worker_counts(max_workers)
        for b in locals_
        if not examples or n * b <= examples
    ]
    if not grid:
        raise DmlbenchError(f"no configuration fits {examples} training examples")
    grid.sort(key=lambda c: (c.tta_s, c.workers))
    trusted = [c for c in grid if not c.below_measured] or grid  # the measured batches fit
    untried = [c for c in grid if c.below_measured and c.tta_s < trusted[0].tta_s]
    sources = {
        "compute": compute.line(),
        "communication": f"ring all-reduce on {network}, overhead and host bandwidth from "
        "bench allreduce",
        "epochs": _epochs_text(epochs),
        "noise_scale": noise.source if noise else unmeasured,
    }
    advice = Advice(
        task.name,
        network,
        trusted,
        noise,
        sources,
        _rate_text(task, trusted[0]),
        worth_measuring=untried,
    )
    if current is not None:
        advice.current = candidate(*current)
        advice.broken = broken_guidelines(advice.current, noise, examples, compute.cores)
    return advice


def advise_from_store(
    store: ResultsStore,
    task: str,
    *,
    max_workers: int,
    network: str,
    price: Price | None = None,
    workers: int | None = None,
    local_batch: int | None = None,
    assume_epochs: float | None = None,
) -> Advice:
    """:func:`advise` calibrated from ``store``: the task's runs and ``bench allreduce``.
    The plan checked against the guidelines is ``workers`` (default ``max_workers``) at
    ``local_batch`` (default the recipe's), when either is given. On the host network
    (``none``) the workers share this machine's cores; on a profile each is a host of
    its own."""
    from dmlbench.perfmodel import calibrate_comm, calibrate_task
    from dmlbench.perfmodel.simulate import resolve_links
    from dmlbench.tasks import get_task

    definition = get_task(task)
    runs = store.runs(task=task)
    links, _ = resolve_links([network])
    cores = len(os.sched_getaffinity(0)) if network == "none" else None
    calibration = calibrate_task(runs, task)
    priced = price is not None and price.covers(calibration.device)  # a CPU's is no GPU's
    advice = advise(
        definition,
        calibration,
        compute_model(runs, task, cores),
        calibrate_comm(store.comm_runs()),
        noise_evidence(runs, task),
        max_workers=max_workers,
        network=network,
        link=links[network],
        price_per_worker_hour=price.per_worker_hour if price and priced else None,
        current=(workers or max_workers, local_batch or definition.recipe.local_batch)
        if workers or local_batch
        else None,  # no plan given: none to check, and no row of "yours"
        assume_epochs=assume_epochs,
        unmeasured=noise_unmeasured(runs, task),
    )
    if price is not None and not priced:
        advice.unpriced = price.unpriced(calibration.device)
    return advice


def _epochs_text(epochs: EpochModel) -> str:
    points = ", ".join(str(b) for b in sorted(epochs.measured))
    fitted = epochs.fit()
    if fitted is None:
        return f"{epochs.kind} at B={points}; elsewhere the nearest one's, assumed"
    least, critical, source = fitted
    return (
        f"{epochs.kind} at B={points}; elsewhere E_min·(1 + B/B_crit) with E_min ≈ "
        f"{least:.1f}, B_crit ≈ {critical:,.0f} from {source}"
    )


def broken_guidelines(
    plan: Candidate, noise: NoiseEvidence | None, examples: int, cores: int | None
) -> list[str]:
    """The rules of thumb (the NERSC guidelines, McCandlish et al.) ``plan`` breaks."""
    broken = []
    batch = plan.global_batch
    if noise is not None and batch > noise.b_simple:
        broken.append(
            f"global batch {batch} is above the critical batch ≈ "
            f"{noise.b_simple:,.0f} (the measured noise scale): expect more "
            "epochs, not fewer steps"
        )
    if examples and batch > math.sqrt(examples):
        broken.append(
            f"global batch {batch} is above √(training examples) ≈ "
            f"{math.sqrt(examples):,.0f}, where large-batch recipes start to need "
            "rate warm-up and tuning"
        )
    if plan.workers > 1 and plan.comm_ratio > BUSY_WORKER:
        broken.append(
            f"local batch {plan.local_batch} is too small to use a worker: "
            f"{plan.comm_ratio:.0%} of each step waits on the network"
        )
    if cores is not None and plan.workers > cores:
        broken.append(
            f"{plan.workers} workers on {cores} cores are oversubscribed: they "
            "share cores instead of adding them"
        )
    return broken


def _rate_text(task: TaskDefinition, best: Candidate) -> str:
    """The recipe's learning-rate rule at the recommended batch."""
    from dmlbench.optim import learning_rate

    schedule = task.recipe.schedule
    steps_per_epoch = max(
        1, math.ceil((task.train_examples or best.global_batch) / best.global_batch)
    )
    warmup = float(getattr(schedule, "warmup_epochs", 0) or 0)

    def rate(epoch: float) -> float:
        return learning_rate(
            schedule,
            step=round(epoch * steps_per_epoch),
            epoch=epoch,
            local_batch=best.local_batch,
            world_size=best.workers,
        )

    text = f"the recipe's rule ({schedule.describe()}): {rate(0):.3g} at the start"
    if warmup:
        text += f", {rate(warmup):.3g} after {warmup:g} warm-up epochs"
    return text
