"""What an evaluation's number measures, and how it is written.

A task of dmlbench's own measures an accuracy, a share written as a percentage
(``97.2%``). A run imported from MLPerf's logs measures its benchmark's quality, which
the logs hold as a fraction whatever it is: BLEU as ``0.2410`` for MLPerf's "24.0
SacreBLEU", AUC as ``0.8025``. Written as a percentage, a BLEU of 24.1 read ``24.1%``
and DLRM's target AUC ``80.2%``; each is written here as MLPerf's rules write it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PERCENT = "%"


@dataclass(frozen=True)
class Quality:
    """A quality's name (for an axis), and its figure: ``scale`` × the logged value,
    with ``decimals`` fixed, or the caller's where None (a percentage's), then ``unit``."""

    name: str
    unit: str = PERCENT
    scale: float = 100.0
    decimals: int | None = None

    @property
    def percent(self) -> bool:
        return self.unit == PERCENT

    def figure(self, value: float, decimals: int = 1) -> str:
        """``24.1`` for a BLEU logged as 0.241: the number without its unit."""
        places = decimals if self.decimals is None else self.decimals
        return f"{self.scale * value:.{places}f}"

    def text(self, value: float, decimals: int = 1) -> str:
        """``97.2%``, ``24.1 BLEU``, ``0.8025 AUC``."""
        figure = self.figure(value, decimals)
        return f"{figure}%" if self.percent else f"{figure} {self.unit}"


ACCURACY = Quality("accuracy")
IMPORTED = "mlperf"  # the task name's prefix of an imported run: mlperf/gnmt
# What each MLPerf benchmark's eval_accuracy measures (the rules' "quality"), written
# as the rules write its target: 75.90% top-1, 24.0 SacreBLEU, 0.8025 AUC, 0.377 box AP.
MLPERF_QUALITIES = {
    "resnet": Quality("top-1 accuracy"),
    "bert": Quality("masked-LM accuracy"),
    "ssd": Quality("mAP"),
    "maskrcnn": Quality("box AP", "AP", scale=1.0, decimals=3),
    "gnmt": Quality("SacreBLEU", "BLEU"),
    "transformer": Quality("BLEU", "BLEU"),
    "dlrm": Quality("AUC", "AUC", scale=1.0, decimals=4),
}


def imported_task(benchmark: str) -> str:
    """The task name an imported benchmark's runs are stored under: ``mlperf/gnmt``."""
    return f"{IMPORTED}/{benchmark}"


def imported_benchmark(task: str) -> str | None:
    """The MLPerf benchmark a task name of imported runs names (``gnmt`` for
    ``mlperf/gnmt``), else None."""
    source, slash, benchmark = task.partition("/")
    return benchmark if slash and source == IMPORTED else None


def quality_of(task: str) -> Quality:
    """What a task's evaluations measure: an imported benchmark's quality (BLEU for
    ``mlperf/transformer``), else an accuracy."""
    return MLPERF_QUALITIES.get(imported_benchmark(task) or "", ACCURACY)


def shared_quality(tasks: Iterable[str]) -> Quality:
    """What runs of ``tasks`` all measure: one imported benchmark's quality, else an
    accuracy (several tasks' runs, or none)."""
    unique = set(tasks)
    return quality_of(unique.pop()) if len(unique) == 1 else ACCURACY
