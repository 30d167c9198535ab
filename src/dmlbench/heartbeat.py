"""Worker heartbeats: how the launcher tells a stalled worker from a slow one.

Each worker process runs a daemon thread that rewrites ``DIR/rank-N.json`` every
``interval`` seconds with the wall-clock time, the worker's pid, and where its training
loop last got to (step, phase, and when). Two kinds of stall follow from it:

- **frozen**: the file stops being rewritten. The whole process is stopped (SIGSTOP, a
  paused container, swapped out) or holds the interpreter lock forever;
- **stuck**: the file is fresh but the loop has not moved. The worker hangs (a
  deadlock, an endless wait), or waits in a collective for a peer that hangs.

The training loop reports progress with :func:`beat`, a few attribute writes, cheap
enough for every phase of every step. Phases are ordered within a step, so of several
stuck workers the one that is behind (the cause, not its waiting peers) can be named.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Where in a step a worker can be, in order; "eval" counts as after the step.
PHASE_ORDER = ("data", "forward", "backward", "comm", "optimizer", "eval")


@dataclass
class Progress:
    step: int = -1  # -1: the training loop has not started (data loading, set-up)
    phase: str = "start"
    at: float = 0.0  # time.time() of the latest beat


_progress = Progress()


def beat(step: int, phase: str) -> None:
    """The training loop reached ``phase`` of ``step`` (see :data:`PHASE_ORDER`)."""
    _progress.step, _progress.phase, _progress.at = step, phase, time.time()


def heartbeat_file(folder: Path, rank: int) -> Path:
    return folder / f"rank-{rank}.json"


class HeartbeatWriter(threading.Thread):
    """Rewrites this worker's heartbeat file every ``interval`` seconds until the
    process ends (a daemon thread: nothing to stop)."""

    def __init__(self, folder: Path, rank: int, interval: float) -> None:
        super().__init__(daemon=True, name="dmlbench-heartbeat")
        self.path = heartbeat_file(folder, rank)
        self.rank, self.interval = rank, interval

    def snapshot(self) -> dict[str, Any]:
        progress = _progress
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "time": time.time(),
            "step": progress.step,
            "phase": progress.phase,
            "progress_at": progress.at or None,
        }

    def write(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        try:
            temporary.write_text(json.dumps(self.snapshot()))
            temporary.replace(self.path)  # readers never see half a file
        except OSError:
            pass  # a full disk must not kill training; the launcher sees a stale file

    def run(self) -> None:
        while True:
            self.write()
            time.sleep(self.interval)


def start_heartbeat(folder: Path, rank: int, interval: float) -> HeartbeatWriter:
    folder.mkdir(parents=True, exist_ok=True)
    writer = HeartbeatWriter(folder, rank, interval)
    writer.write()
    writer.start()
    return writer


AGENT_FILE = "agent-heartbeat.json"  # in a node's own store: its agent's heartbeat


def start_agent_heartbeat(store: Path, node: int, interval: float) -> HeartbeatWriter:
    """The heartbeat of one node's agent (its ``dmlbench run``), by which the launcher
    of an emulated cluster tells a frozen node from a slow one."""
    store.mkdir(parents=True, exist_ok=True)
    writer = HeartbeatWriter(store, node, interval)
    writer.path = store / AGENT_FILE
    writer.write()
    writer.start()
    return writer


def read_heartbeat(path: Path) -> dict[str, Any] | None:
    """One heartbeat file, or None when it is missing or being replaced."""
    try:
        beat = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return beat if isinstance(beat, dict) else None


def read_heartbeats(folder: Path) -> list[dict[str, Any]]:
    """Every worker's latest heartbeat (files being replaced are skipped this time)."""
    beats = []
    for path in sorted(folder.glob("rank-*.json")):
        try:
            beats.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return beats
