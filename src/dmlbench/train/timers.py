"""Per-step phase timing.

Each ``lap(phase)`` charges the time since the previous lap to ``phase``, so the
phases of a step add up to the step's wall time exactly. On an asynchronous device
the clock first waits for queued work, otherwise a kernel launched in ``forward``
would be charged to whichever phase happens to wait for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from dmlbench.results.schema import ALL_PHASES, EXTRA_PHASES, PHASES

__all__ = ["ALL_PHASES", "EXTRA_PHASES", "PHASES", "PhaseTimer"]


class PhaseTimer:
    def __init__(self, synchronize: Callable[[], None] | None = None) -> None:
        self._sync = synchronize
        self.seconds: dict[str, float] = dict.fromkeys(ALL_PHASES, 0.0)
        self.last = 0.0  # perf_counter() of the latest start or lap

    def start(self) -> None:
        if self._sync:
            self._sync()
        self.last = time.perf_counter()

    def lap(self, phase: str) -> None:
        if self._sync:
            self._sync()
        now = time.perf_counter()
        self.seconds[phase] += now - self.last
        self.last = now

    def move(self, seconds: float, source: str, target: str) -> None:
        """Re-charge ``seconds`` of ``source`` to ``target`` (the sum stays the step time)."""
        self.seconds[source] -= seconds
        self.seconds[target] += seconds

    def vector(self) -> list[float]:
        """Seconds per phase in ``ALL_PHASES`` order (for all-gather)."""
        return [self.seconds[p] for p in ALL_PHASES]
