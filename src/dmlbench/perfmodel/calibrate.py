"""Calibrate the performance model from what the store measured.

- Communication (``CommCalibration``) from unshaped ``bench allreduce`` runs: the
  per-message overhead ``α`` from the fastest repeats of small messages, the hosts' own
  bus bandwidth from the largest message, per worker count.
- A task (``TaskCalibration``) from its training runs: compute seconds per step and
  per example (data + forward + backward + optimizer, mean over ranks, steady state),
  gradient bytes, evaluation seconds per epoch, and epochs to the target by global
  batch. What was not measured is said to be assumed.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from dmlbench.errors import DmlbenchError
from dmlbench.names import first_few
from dmlbench.netem.profiles import NetworkSpec
from dmlbench.perfmodel.model import CommCalibration
from dmlbench.results.records import CommRun, RunRecord, RunSummary, matching_ids
from dmlbench.spec.recipe import goal_reached

SMALL = (64, 4096)  # bytes: messages small enough that only the overhead counts
# The smallest largest message a benchmark measures bandwidth with: below it the
# per-message overhead sets the time (on loopback gloo's 1-2 ms artifact outlasts a
# 256 KiB message's bytes as it is; a 1 KB one's "bandwidth" is a thousandth of a link's).
BANDWIDTH_BYTES = 2**18


def _network_of(run: CommRun) -> tuple[float | None, float]:
    spec = NetworkSpec.model_validate(run.spec.get("network") or {})
    if not spec.enabled:
        return None, 0.0
    resolved = spec.resolve()
    return resolved.rate_bps, resolved.delay_s


def _measures_bandwidth(run: CommRun) -> bool:
    """Whether ``run`` sent a message of :data:`BANDWIDTH_BYTES` or more
    (``--max-bytes 1KB`` measures the per-message overhead alone)."""
    return max(r.bytes for r in run.results) >= BANDWIDTH_BYTES


def calibrate_comm(comm_runs: Sequence[CommRun]) -> dict[int, CommCalibration]:
    """One calibration per worker count measured on the unshaped host network; a run at
    one worker is left out (an all-reduce of one rank crosses no link: no steps), and so
    is one whose messages were too small to measure bandwidth, and, where others were
    not, one with more workers than the host's cores (it measured them waiting for a
    core, not the link: 3 workers on 2 cores put 0.6 MB/s in the model)."""
    candidates = [
        run
        for run in comm_runs
        if run.status == "success"
        and _network_of(run) == (None, 0.0)
        and run.nodes == 1  # not an emulated cluster
        and run.results
        and run.workers > 1
    ]
    if not candidates:
        raise DmlbenchError(
            "no unshaped all-reduce benchmark at 2 or more workers in the store to "
            "calibrate from; run `dmlbench bench allreduce --workers 2` (same --store) first"
        )
    measured = [run for run in candidates if _measures_bandwidth(run)]
    if not measured:
        raise DmlbenchError(
            "the all-reduce benchmarks in the store stop at messages too small to measure "
            f"bandwidth (below {BANDWIDTH_BYTES // 1024} KiB: --max-bytes); run `dmlbench "
            "bench allreduce --workers 2` (up to 100MB by default, same --store)"
        )
    undisturbed = [run for run in measured if not run.oversubscribed]
    by_workers: dict[int, list[CommRun]] = {}
    for run in undisturbed or measured:
        by_workers.setdefault(run.workers, []).append(run)
    calibrations = {}
    for workers, runs in by_workers.items():
        steps = 2 * (workers - 1)
        # The fastest repeat, not the median: on loopback, gloo's small messages carry a
        # 1-2 ms scheduling artifact (see BENCHMARKS.md) that real links do not.
        small = [
            r.latency_min_s for run in runs for r in run.results if SMALL[0] <= r.bytes <= SMALL[1]
        ]
        alpha = min(small) / steps if small else 0.0
        largest = [max(run.results, key=lambda r: r.bytes) for run in runs]
        busbw = statistics.median(r.busbw for r in largest)
        calibrations[workers] = CommCalibration(alpha_s=alpha, host_busbw=busbw)
    return calibrations


def comm_for(calibrations: dict[int, CommCalibration], workers: int) -> CommCalibration:
    """The calibration measured at ``workers``, else at the nearest measured count."""
    nearest = min(calibrations, key=lambda n: (abs(n - workers), n))
    return calibrations[nearest]


@dataclass
class TaskCalibration:
    task: str
    workers: int  # the worker count compute was measured at
    local_batch: int
    compute_step_s: float
    gradient_bytes: float
    train_examples: int
    eval_s_per_epoch: float
    epochs_by_batch: dict[int, float] = field(default_factory=dict)
    runs: int = 0
    compute_runs: list[str] = field(default_factory=list)  # the runs compute came from
    # Runs left out because other processes disturbed them; or, when every candidate was
    # disturbed, the disturbed runs compute came from (``compute_disturbed``).
    disturbed_runs: list[str] = field(default_factory=list)
    compute_disturbed: bool = False
    setup: str = ""  # the exchange, precision and model every run used came from
    device: str = "cpu"  # what the runs compute came from ran on (RunRecord.device)
    other_setups: dict[str, int] = field(default_factory=dict)  # runs left out, by setup

    def epochs_to_target(self, global_batch: int) -> tuple[float, bool]:
        """(epochs, measured?) at ``global_batch``; else the nearest measured batch's."""
        if not self.epochs_by_batch:
            raise DmlbenchError(
                f"no run of {self.task} reached its target, so epochs to the target are "
                "unknown; run it to the target once (same --store), or assume a number "
                "with --epochs"
            )
        if global_batch in self.epochs_by_batch:
            return self.epochs_by_batch[global_batch], True
        nearest = min(self.epochs_by_batch, key=lambda b: abs(b - global_batch))
        return self.epochs_by_batch[nearest], False


# Compute per step of two runs at one worker count that differ by more than this factor
# did not measure the same thing (one shared the machine, say): refused, not averaged.
DISAGREEMENT = 2.0


def _pick(runs: Sequence[RunRecord], wanted: Sequence[str], task: str) -> list[RunRecord]:
    """The runs ``--calibrate-from`` names: an id, or a unique start or end of one."""
    by_id = {r.run_id: r for r in runs}
    picked = []
    for fragment in wanted:
        found = matching_ids(fragment, by_id)
        if len(found) > 1:
            raise DmlbenchError(
                f"--calibrate-from {fragment}: {len(found)} finished, unshaped runs of {task} "
                f"start or end with it ({first_few(found)}): "
                "give more of one's id"
            )
        if not found:
            raise DmlbenchError(
                f"--calibrate-from {fragment}: no finished, unshaped run "
                f"of {task} with that id in the store"
            )
        picked.append(by_id[found[0]])
    return picked


def timed_runs(runs: Sequence[RunRecord], task: str) -> list[RunRecord]:
    """``task``'s finished runs on the unshaped host network with steady-state phases:
    the runs compute can be calibrated from."""
    return [
        r
        for r in runs
        if r.task == task
        and r.finished
        and (r.network or "none") == "none"
        and r.summary.phases_steady
        and r.summary.steady_steps
    ]


def setup_of(run: RunRecord) -> str:
    """What makes two runs' steps comparable: ``exchange · precision · model``."""
    recipe = run.spec.get("recipe") or {}
    model = recipe.get("model") or {}
    options = model.get("options") or {}
    shown = ", ".join(f"{key}={options[key]}" for key in sorted(options))
    name = f"{model.get('name', '?')}" + (f" ({shown})" if shown else "")
    return f"{run.exchange} · {recipe.get('precision', 'fp32')} · {name}"


def _one_setup(
    runs: list[RunRecord], picked: list[RunRecord] | None, setups: dict[str, str]
) -> str:
    """The setup calibration uses: the picked runs' (one only), else the one most runs
    share (a tie: the one with the most at the fewest workers, then by name). ``setups``
    is each run's, by id."""
    if picked:
        named = sorted({setups[r.run_id] for r in picked})
        if len(named) > 1:
            raise DmlbenchError(
                f"--calibrate-from: the runs differ in exchange, precision or model "
                f"({'; '.join(named)}); name runs of one"
            )
        return named[0]
    counts = Counter(setups[r.run_id] for r in runs)
    fewest = min(r.workers for r in runs)
    first = Counter(setups[r.run_id] for r in runs if r.workers == fewest)
    return min(counts, key=lambda s: (-counts[s], -first[s], s))


def compute_step_s(summary: RunSummary) -> float:
    """Mean over ranks of data + forward + backward + optimizer seconds per steady step,
    from a run's summary."""
    per_rank = [
        sum(rank.get(p, 0.0) for p in ("data", "forward", "backward", "optimizer"))
        for rank in summary.phases_steady or []
    ]
    return statistics.mean(per_rank) / (summary.steady_steps or 1)


def calibrate_task(
    runs: Sequence[RunRecord], task: str, *, calibrate_from: Sequence[str] = ()
) -> TaskCalibration:
    """From ``task``'s finished, unshaped runs of one setup (exchange, precision and
    model: :func:`setup_of`; the one most runs share, or the one of the runs
    ``calibrate_from`` names); compute from the fewest workers measured, or from the
    named runs. Undisturbed runs are preferred: disturbed ones
    (:mod:`dmlbench.results.contention`) are used only when no other was measured. Runs
    whose compute per step disagrees by more than :data:`DISAGREEMENT` are refused in
    one line that names them."""
    timed = timed_runs(runs, task)
    if not timed:
        raise DmlbenchError(
            f"no finished run of {task} in the store to calibrate compute from; run "
            f"`dmlbench run {task}` with the same --store first"
        )
    picked = _pick(timed, calibrate_from, task) if calibrate_from else None
    setups = {r.run_id: setup_of(r) for r in timed}
    setup = _one_setup(timed, picked, setups)
    mine = [r for r in timed if setups[r.run_id] == setup]
    others = Counter(other for other in setups.values() if other != setup)
    if picked:
        base = picked
        if len({r.workers for r in base}) > 1:
            raise DmlbenchError("--calibrate-from: name runs of one worker count")
        fewest = base[0].workers
    else:
        quiet = [r for r in mine if not r.disturbed]
        fewest = min(r.workers for r in quiet or mine)
        base = [r for r in quiet or mine if r.workers == fewest]
        # Runs at several local batches measure different computes: the most measured
        # batch is the one calibrated (`dmlbench advise` fits the rest).
        counts = Counter(r.local_batch for r in base)
        batch = min(counts, key=lambda b: (-counts[b], b))
        base = [r for r in base if r.local_batch == batch]
    used = {r.run_id for r in base}
    left_out = [r.run_id for r in mine if r.disturbed and r.run_id not in used]
    steps = sorted((compute_step_s(r.summary), r.run_id) for r in base)
    (low, low_id), (high, high_id) = steps[0], steps[-1]
    if high > DISAGREEMENT * low:
        raise DmlbenchError(
            f"the runs of {task} at {fewest} worker{'s' * (fewest != 1)} disagree on compute: "
            f"{low * 1e3:.2f} ms/step ({low_id}) against {high * 1e3:.2f} ms/step ({high_id}), "
            "as when one shared the machine; name the one to trust with --calibrate-from RUN_ID"
        )
    compute = [seconds for seconds, _ in steps]
    grads = [r.summary.gradient_bytes for r in base if r.summary.gradient_bytes]
    if not grads:
        raise DmlbenchError(f"the runs of {task} predate gradient-size recording; run it again")
    eval_total = []
    for run in base:
        seconds = [p.seconds for p in run.phases if p.phase == "eval"]
        if seconds and run.evals:
            eval_total.append(statistics.mean(seconds) / len(run.evals))
    epochs: dict[int, list[float]] = {}
    for run in mine:
        if run.status != "success" or run.target is None:
            continue
        goal = run.goal
        first = next(
            (e.epoch for e in run.evals if goal_reached(goal, run.target, e.metric, e.loss)), None
        )
        if first is not None:
            epochs.setdefault(run.global_batch, []).append(first)
    return TaskCalibration(
        task=task,
        workers=fewest,
        local_batch=base[0].local_batch,
        compute_step_s=statistics.median(compute),
        gradient_bytes=statistics.median(grads),
        train_examples=base[0].summary.train_examples or 0,
        eval_s_per_epoch=statistics.median(eval_total) if eval_total else 0.0,
        epochs_by_batch={b: statistics.mean(v) for b, v in epochs.items()},
        runs=len(mine),
        compute_runs=[run_id for _, run_id in steps],
        disturbed_runs=left_out or [r.run_id for r in base if r.disturbed],
        compute_disturbed=any(r.disturbed for r in base),
        setup=setup,
        other_setups=dict(sorted(others.items())),
        device=base[0].device,
    )
