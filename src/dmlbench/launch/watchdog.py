"""The launcher's watchdog: a stalled worker fails the run in ``stall_timeout_s``, named.

Without it a stopped or hung worker holds the run for gloo's collective timeout (10
minutes), and the failure is then reported by a peer that waited on it. The watchdog
reads the workers' heartbeats (:mod:`dmlbench.heartbeat`), judges, and SIGKILLs the
stalled worker; torch's elastic agent then stops the others as for any dead worker,
and the launcher reports the watchdog's verdict instead of the signal.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlbench.heartbeat import PHASE_ORDER, read_heartbeats
from dmlbench.system import parent_pid


@dataclass(frozen=True)
class Stall:
    rank: int
    pid: int
    message: str


def _position(beat: dict[str, Any]) -> tuple[int, int]:
    phase = beat.get("phase", "")
    return beat.get("step", -1), PHASE_ORDER.index(phase) if phase in PHASE_ORDER else -1


# One node of several sees only its own workers: when they all wait, the worker they
# wait on may be on another node, whose own watchdog names it (frozen: no heartbeat)
# within stall_timeout_s. A node judges its workers stuck only this much later.
REMOTE_GRACE_S = 15.0


def judge(
    beats: Sequence[dict[str, Any]], now: float, timeout_s: float, stuck_s: float | None = None
) -> Stall | None:
    """Which worker, if any, has stalled (``now`` and the beats' times: ``time.time()``).

    A frozen worker (its heartbeat is older than ``timeout_s``) comes first. Otherwise,
    once any training loop has not moved for ``stuck_s`` (default ``timeout_s``), the
    worker furthest behind (step, then phase within the step) is the one the others are
    waiting on.
    """
    stuck_s = timeout_s if stuck_s is None else stuck_s
    frozen = [b for b in beats if now - b["time"] > timeout_s]
    if frozen:
        beat = min(frozen, key=lambda b: b["time"])
        return Stall(
            beat["rank"],
            beat["pid"],
            f"worker rank {beat['rank']} stalled: no heartbeat for "
            f"{now - beat['time']:.0f} s (the process is stopped or frozen); "
            f"stall_timeout_s={timeout_s:g}",
        )
    moving = [b for b in beats if b.get("progress_at")]
    stuck = [b for b in moving if now - b["progress_at"] > stuck_s]
    if not stuck:
        return None
    beat = min(beats, key=lambda b: (*_position(b), b.get("progress_at") or 0.0))
    since = now - (beat.get("progress_at") or min(b["progress_at"] for b in stuck))
    where = f"step {beat['step']}, {beat['phase']}" if beat.get("step", -1) >= 0 else "set-up"
    others = "; the other workers waited on it" if len(beats) > 1 else ""
    return Stall(
        beat["rank"],
        beat["pid"],
        f"worker rank {beat['rank']} stalled: no progress for {since:.0f} s (at "
        f"{where}{others}); stall_timeout_s={timeout_s:g}",
    )


def _is_child(pid: int) -> bool:
    """Whether ``pid`` is a worker this launcher started, itself or through its fork
    server (never signal a reused pid)."""
    parent = parent_pid(pid)
    return parent is not None and os.getpid() in (parent, parent_pid(parent))


class Watchdog(threading.Thread):
    """Judges the heartbeats in ``folder`` every ``poll_s`` seconds until stopped."""

    def __init__(
        self, folder: Path, timeout_s: float, poll_s: float = 0.5, stuck_s: float | None = None
    ) -> None:
        super().__init__(daemon=True, name="dmlbench-watchdog")
        self.folder, self.timeout_s, self.poll_s = folder, timeout_s, poll_s
        self.stuck_s = stuck_s
        self.verdict: Stall | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.poll_s):
            stall = judge(read_heartbeats(self.folder), time.time(), self.timeout_s, self.stuck_s)
            if stall is not None and _is_child(stall.pid):
                self.verdict = stall
                os.kill(stall.pid, signal.SIGKILL)  # works on a stopped process too
                return

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join()
