"""Per-run event log: JSON lines with MLPerf-style keys.

Keys written: ``init_start``, ``init_stop``, ``run_start``, ``train_progress``,
``epoch_stop`` (per-rank phase seconds), ``eval_accuracy`` (with ``epoch_num``,
``samples_count``...), ``run_stop`` (status and totals). Each line is flushed when
written, so a crash loses at most the line being written, and readers skip a torn
last line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

EVENTS_FILE = "events.jsonl"


class EventLog:
    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = path.open("a", buffering=1) if path else None

    def log(self, key: str, value: Any = None, **metadata: Any) -> None:
        if self._file is None:
            return
        record = {"key": key, "value": value, "time_ms": round(time.time() * 1000, 3)}
        record["metadata"] = metadata
        self._file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events in ``path`` (missing file: none)."""
    return read_events_counted(path)[0]


def read_events_counted(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The events in ``path`` and how many lines were skipped: a line torn by a crash,
    bytes that are not UTF-8, JSON that is not an event (an object with a text ``key``).
    A log is read as data from outside the process: nothing in it can raise."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    except OSError:
        return [], 1
    events, skipped = [], 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            skipped += 1
            continue
        if isinstance(event, dict) and isinstance(event.get("key"), str):
            event.setdefault("metadata", {})
            if isinstance(event["metadata"], dict):
                events.append(event)
                continue
        skipped += 1
    return events, skipped


class EventTail:
    """Reads the events appended to a log since the last call (for progress displays)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def new_events(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        with self.path.open() as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        complete, _, _ = chunk.rpartition("\n")  # leave a line being written for next time
        if not complete:
            return []
        self._offset += len(complete.encode()) + 1
        events = []
        for line in complete.split("\n"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return events
