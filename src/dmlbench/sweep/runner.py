"""Run a planned sweep: one run at a time, each stored as it ends, resumable.

A failed run is stored as failed and the sweep goes on. Ctrl-C stores the current run
as interrupted and stops; everything finished stays. Running the same sweep again
skips what is already done, as ``rerun`` says:

- ``never``: skip every run the store already holds, whatever its status;
- ``failed`` (default): skip finished runs (success or target not reached), run again
  those that failed or were interrupted;
- ``always``: run everything again (new rows; the old ones stay).

The store is asked again as each run starts (a claim, atomic in SQLite), so two
copies of one sweep started together share its points instead of running each twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dmlbench.errors import AlreadyClaimed, DmlbenchError, StoreError
from dmlbench.launch.lifecycle import prepare_data
from dmlbench.launch.run import ProgressFn, RunOutcome, run_benchmark
from dmlbench.launch.slurm import SlurmJob
from dmlbench.results import ResultsStore
from dmlbench.results.store import FINISHED, Rerun
from dmlbench.sweep.plan import PlannedRun, SweepPlan

__all__ = ["FINISHED", "Rerun", "SweepOutcome", "pending", "run_sweep"]


@dataclass
class SweepOutcome:
    finished: list[tuple[PlannedRun, RunOutcome]] = field(default_factory=list)
    skipped: list[PlannedRun] = field(default_factory=list)
    elsewhere: list[PlannedRun] = field(default_factory=list)  # claimed by another launcher
    errors: list[tuple[PlannedRun, str]] = field(default_factory=list)  # never got a run row
    interrupted: bool = False

    @property
    def failed(self) -> int:
        return len(self.errors) + sum(o.status not in FINISHED for _, o in self.finished)


def pending(
    plan: SweepPlan, store: ResultsStore, rerun: Rerun
) -> tuple[list[PlannedRun], list[PlannedRun]]:
    """Split the plan into (runs to start, runs skipped because the store has them)."""
    if rerun == "always":
        return list(plan.runs), []
    stored = store.sweep_status(plan.sweep.name)
    to_run: list[PlannedRun] = []
    skipped: list[PlannedRun] = []
    for run in plan.runs:
        status = stored.get(run.key)
        done = status is not None if rerun == "never" else status in FINISHED
        (skipped if done else to_run).append(run)
    return to_run, skipped


def run_sweep(
    plan: SweepPlan,
    store: ResultsStore,
    *,
    rerun: Rerun = Rerun.failed,
    echo: bool = False,
    progress: Callable[[PlannedRun, int, int], ProgressFn | None] | None = None,
    on_done: Callable[[PlannedRun, RunOutcome | None, Exception | None], None] | None = None,
    slurm: SlurmJob | None = None,
) -> SweepOutcome:
    """Run what ``pending`` leaves; ``progress(run, i, n)`` may return a per-run callback."""
    to_run, skipped = pending(plan, store, rerun)
    outcome = SweepOutcome(skipped=skipped)
    reading = {run.spec.task: run.spec for run in reversed(to_run) if not run.spec.synthetic_data}
    for spec in reading.values():  # a missing dataset stops us up front
        prepare_data(spec)
    for index, run in enumerate(to_run):
        tag = {
            "name": plan.sweep.name,
            "scaling": plan.sweep.scaling,
            "repeat": run.repeat,
            "key": run.key,
            "point": run.point,
        }
        callback = progress(run, index, len(to_run)) if progress else None
        try:
            result = run_benchmark(
                run.spec,
                store,
                echo=echo,
                progress=callback,
                sweep=tag,
                claim=rerun,
                slurm=slurm,
            )
        except KeyboardInterrupt:
            outcome.interrupted = True
            break
        except AlreadyClaimed as claimed:
            outcome.elsewhere.append(run)
            if on_done:
                on_done(run, None, claimed)
            continue
        except StoreError:
            raise  # every later run would fail the same way: stop, and say where results are
        except (DmlbenchError, OSError, RuntimeError) as error:
            outcome.errors.append((run, f"{type(error).__name__}: {error}"))
            if on_done:
                on_done(run, None, error)
            continue
        outcome.finished.append((run, result))
        if on_done:
            on_done(run, result, None)
    return outcome
