"""What an MLPerf result log's clock says (:mod:`dmlbench.results.mlperf`): when the run
began, and how long it evaluated while nothing trained.

A log's events are the MLLOG lines as parsed; ``time`` reads an event's time in seconds
(refusing the log where it holds no number).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Event = dict[str, Any]
Span = tuple[float, float]  # seconds: an interval's start and end

# An evaluation that starts and ends within this many seconds of a block spans it: the
# log does not time evaluation apart from training (Google's DLRM on TPUs).
BESIDE_S = 0.5
FIRST_ROUND_MS = 1_543_622_400_000  # 2018-12-01: MLPerf Training v0.5's results


def started_at(events: list[Event]) -> str | None:
    """When the run began (ISO 8601, UTC), from its first event whose ``time_ms`` reads
    as a date since MLPerf's first round: HugeCTR's logs give some events' times in
    seconds, which read as January 1970."""
    for event in events:
        stamp = event.get("time_ms")
        if isinstance(stamp, int | float) and FIRST_ROUND_MS <= stamp < 2**53:
            return datetime.fromtimestamp(stamp / 1000, UTC).isoformat(timespec="seconds")
    return None


def evaluation_alone_s(events: list[Event], time: Callable[[Event], float]) -> float:
    """The time the log evaluates while nothing trains: its evaluations' spans less the
    training (epochs where the log has them, else blocks) that began during one. Mask
    R-CNN's next epoch starts while the last one's evaluation runs. An evaluation that
    spans its whole block (a TPU's DLRM logs each block's training as evaluated) is not
    timed apart from training, and is not taken out."""
    evaluations = _union(_spans(events, "eval_start", "eval_stop", time))
    training = sorted(_spans(events, "epoch_start", "epoch_stop", time)) or sorted(
        _spans(events, "block_start", "block_stop", time)
    )
    begins = [begin for begin, _ in training]
    alone = 0.0
    for start, end in evaluations:
        at = bisect.bisect_left(begins, start)
        before = training[at - 1] if at > 0 else None
        if before and start - before[0] <= BESIDE_S and abs(end - before[1]) <= BESIDE_S:
            continue  # the block's span: its training and evaluation not told apart
        busy = 0.0
        while at < len(training) and training[at][0] < end:
            busy += min(end, training[at][1]) - training[at][0]
            at += 1
        alone += max(0.0, end - start - busy)
    return alone


def _spans(
    events: list[Event], start: str, stop: str, time: Callable[[Event], float]
) -> list[Span]:
    spans, opened = [], None
    for event in events:
        if event["key"] == start:
            opened = time(event)
        elif event["key"] == stop and opened is not None:
            spans.append((opened, max(opened, time(event))))
            opened = None
    return spans


def _union(spans: list[Span]) -> list[Span]:
    """Spans merged where they overlap, in order: none overlapping, so that a hostile
    log's nested evaluations cost one pass."""
    merged: list[Span] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
