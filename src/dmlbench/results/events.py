"""Per-run event log in MLPerf's MLLOG line format, which mlcommons' `mlperf-logging`
tools read: ``:::MLLOG {"namespace": "", "time_ms": ..., "event_type": ..., "key": ...,
"value": ..., "metadata": {...}}``, one line per event.

Keys written: ``init_start``, ``init_stop``, ``run_start``, ``train_progress``,
``epoch_stop`` (per-rank phase seconds), ``eval_accuracy`` (with ``epoch_num``,
``samples_count``...), ``run_stop`` (status and totals). ``time_ms`` keeps microseconds
(a fraction of a millisecond). Each line is flushed when written, so a crash loses at
most the line being written, and readers skip a torn last line.

Run folders from before MLLOG hold ``events.jsonl``: the same events as bare JSON lines.
The readers take both.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any, Literal, NotRequired, TypedDict

EVENTS_FILE = "events.log"
LEGACY_EVENTS_FILE = "events.jsonl"  # run folders written before the MLLOG format
MLLOG_PREFIX = ":::MLLOG "
NAMESPACE = ""  # mllog's default namespace

EventType = Literal["INTERVAL_START", "INTERVAL_END", "POINT_IN_TIME"]


class Event(TypedDict):
    """One line of the event log."""

    key: str
    value: Any
    time_ms: float
    metadata: dict[str, Any]
    namespace: NotRequired[str]
    event_type: NotRequired[EventType]


def event_type(key: str) -> EventType:
    """MLPerf's: ``*_start`` opens an interval, ``*_stop`` closes it, the rest are points."""
    if key.endswith("_start"):
        return "INTERVAL_START"
    if key.endswith("_stop"):
        return "INTERVAL_END"
    return "POINT_IN_TIME"


def mllog_line(key: str, value: Any, time_ms: float, metadata: dict[str, Any]) -> str:
    """The event as mlperf-logging's ``mllog`` encodes it (its fields, in its order)."""
    record = {
        "namespace": NAMESPACE,
        "time_ms": time_ms,
        "event_type": event_type(key),
        "key": key,
        "value": value,
        "metadata": metadata,
    }
    return MLLOG_PREFIX + json.dumps(record)


def parse_line(line: str) -> Event | None:
    """An MLLOG line, or a bare JSON line of an older log, as an event; ``None`` for
    anything else (a torn line, text that is not an event)."""
    text = line.strip()
    text = text[len(MLLOG_PREFIX) :] if text.startswith(MLLOG_PREFIX) else text
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict) or not isinstance(event.get("key"), str):
        return None
    event.setdefault("metadata", {})
    return event if isinstance(event["metadata"], dict) else None  # type: ignore[return-value]


def events_file(run_dir: Path) -> Path:
    """A run folder's event log: ``events.log``, or an older folder's ``events.jsonl``."""
    current = run_dir / EVENTS_FILE
    legacy = run_dir / LEGACY_EVENTS_FILE
    return legacy if not current.exists() and legacy.exists() else current


class EventLog:
    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = path.open("a", buffering=1) if path else None

    def log(self, key: str, value: Any = None, **metadata: Any) -> None:
        if self._file is None:
            return
        line = mllog_line(key, value, round(time.time() * 1000, 3), metadata)
        self._file.write(line + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(path: Path) -> list[Event]:
    """All complete events in ``path`` (missing file: none)."""
    return read_events_counted(path)[0]


def read_events_counted(path: Path) -> tuple[list[Event], int]:
    """The events in ``path`` and how many lines were skipped: a line torn by a crash,
    bytes that are not UTF-8, JSON that is not an event (an object with a text ``key``).
    A log is read as data from outside the process: nothing in it can raise."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    except OSError:
        return [], 1
    events: list[Event] = []
    skipped = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            event = parse_line(line.decode("utf-8"))
        except UnicodeDecodeError:
            event = None
        if event is None:
            skipped += 1
        else:
            events.append(event)
    return events, skipped


class EventTail:
    """Reads the events appended to a log since the last call (for progress displays)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def new_events(self) -> list[Event]:
        if not self.path.is_file():
            return []
        with self.path.open() as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        complete, _, _ = chunk.rpartition("\n")  # leave a line being written for next time
        if not complete:
            return []
        self._offset += len(complete.encode()) + 1
        return [event for line in complete.split("\n") if (event := parse_line(line))]
