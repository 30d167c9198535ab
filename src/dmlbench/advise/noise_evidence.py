"""What the store's runs say about the task's gradient noise scale, for `dmlbench
advise`: the median of the runs that measured it over enough steps, or why there is
none to advise on."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dmlbench.names import first_few

if TYPE_CHECKING:
    from dmlbench.results.records import RunRecord


@dataclass(frozen=True)
class NoiseEvidence:
    """The task's noise scale: the median over the runs that measured one."""

    b_simple: float
    runs: list[str]

    @property
    def source(self) -> str:
        runs = f"{len(self.runs)} run{'s' * (len(self.runs) != 1)}"
        return f"median B_simple of {runs}: {first_few(self.runs)}"


def noise_evidence(runs: Sequence[RunRecord], task: str) -> NoiseEvidence | None:
    """The noise scale of ``task``'s finished runs that measured it over enough steps
    (:data:`~dmlbench.noise.MIN_ADVICE_STEPS`)."""
    from dmlbench.noise import advisable_noise_scale

    measured = [
        (scale, r.run_id)
        for r in runs
        if r.task == task and r.finished and (scale := advisable_noise_scale(r.summary.noise_scale))
    ]
    if not measured:
        return None
    return NoiseEvidence(statistics.median(v for v, _ in measured), [i for _, i in measured])


UNMEASURED = "not measured (run with 2+ workers)"


def noise_unmeasured(runs: Sequence[RunRecord], task: str) -> str:
    """Why ``task`` has no noise scale to advise on: no run measured one, or the runs
    that did had too few steps (a digits run's 14 read "not measured")."""
    from dmlbench.noise import MIN_ADVICE_STEPS

    steps = [
        int(r.summary.noise_scale.get("steps") or 0)
        for r in runs
        if r.task == task and r.finished and r.summary.noise_scale
    ]
    if not steps:
        return UNMEASURED
    return (
        f"measured by {len(steps)} run{'s' * (len(steps) != 1)} over at most {max(steps)} "
        f"steps, too few to advise on (it takes {MIN_ADVICE_STEPS}): run longer, e.g. "
        "--set stop_at_target=false"
    )
