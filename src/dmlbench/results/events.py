"""Per-run event log in MLPerf's MLLOG line format, which mlcommons' `mlperf-logging`
tools read: ``:::MLLOG {"namespace": "", "time_ms": ..., "event_type": ..., "key": ...,
"value": ..., "metadata": {...}}``, one line per event.

Keys written: ``cache_clear``, ``init_start``, the submission's keys MLPerf's checker
asks for (:mod:`dmlbench.results.compliance`), ``init_stop``, ``run_start``,
``epoch_start``, ``train_progress`` (rank 0's word: see :mod:`dmlbench.train.progress`),
``epoch_stop`` (per-rank phase seconds), ``eval_start``, ``eval_stop``,
``eval_accuracy`` (with ``epoch_num``, ``samples_count``...), ``run_stop`` (status and
totals). ``time_ms`` keeps microseconds
(a fraction of a millisecond). Each line is flushed when written, so a crash loses at
most the line being written, and readers skip a torn last line.

Run folders from before MLLOG hold ``events.jsonl``: the same events as bare JSON lines.
The readers take both.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal, NotRequired, TypedDict

EVENTS_FILE = "events.log"
LEGACY_EVENTS_FILE = "events.jsonl"  # run folders written before the MLLOG format
MLLOG_PREFIX = ":::MLLOG "
NAMESPACE = ""  # mllog's default namespace

# A run's log grows by a progress line every 2 s and a few lines an epoch: about 13 MB a
# day of training. A log past this is not one dmlbench wrote.
MAX_EVENTS_BYTES = 256 << 20
# What a float that is not finite is written as: strict JSON has no NaN or Infinity
# (Python's json writes them bare, and strict readers, jq and browsers among them,
# refuse the line). The readers here turn these strings back into floats.
NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}

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
    try:
        return MLLOG_PREFIX + json.dumps(record, allow_nan=False)
    except ValueError:  # a diverged run's NaN loss: strict JSON, a string in its place
        return MLLOG_PREFIX + json.dumps(_finite(record), allow_nan=False)


def map_leaves(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` with ``leaf`` applied to everything in it that is not a dict, list or
    tuple (tuples come back as lists, as JSON has them)."""
    if isinstance(value, dict):
        return {key: map_leaves(item, leaf) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [map_leaves(item, leaf) for item in value]
    return leaf(value)


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite written as its name (``NON_FINITE``)."""
    return map_leaves(value, _named)


def _named(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    return value


def _floats(value: Any) -> Any:
    """The inverse of :func:`_finite`, on a parsed line."""
    return map_leaves(
        value, lambda leaf: NON_FINITE.get(leaf, leaf) if isinstance(leaf, str) else leaf
    )


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
    if not isinstance(event["metadata"], dict):
        return None
    if '"NaN"' in text or 'Infinity"' in text:
        event["value"], event["metadata"] = _floats(event["value"]), _floats(event["metadata"])
    return event  # type: ignore[return-value]


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
    A log is read as data from outside the process: nothing in it can raise. The file
    itself is bounded: one that is no regular file (a link to ``/dev/zero``, a named
    pipe) or is over ``MAX_EVENTS_BYTES`` is refused in one line (:class:`StoreError`)."""
    from dmlbench.errors import StoreError
    from dmlbench.files import read_bounded

    if not path.exists() and not path.is_symlink():
        return [], 0
    try:
        data = read_bounded(path, MAX_EVENTS_BYTES, "event log", StoreError)
    except StoreError:
        raise
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
