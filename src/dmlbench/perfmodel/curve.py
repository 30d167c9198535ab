"""One device's step time against its local batch: the measured curve that gives
``simulate-cluster`` and ``advise-cluster`` the compute at any local batch (at scale
the per-device batch shrinks, and a step's fixed part does not).

``dmlbench bench curve TASK`` measures one: a one-worker run on synthetic data (DLBS's
throughput mode) at each local batch, each stored, then a curve file that says where
it was measured::

    {"format": "dmlbench step curve", "version": 1, "task": "imagenet-resnet50",
     "device": "NVIDIA H200", "precision": "bf16", "runs": ["…", …],
     "points": [[8, 0.0254], [16, 0.0261], …]}      # [local batch, seconds a step]

and, where a batch's run failed (out of memory, say), ``"missing": [256]``; where the
model was compiled, torch.compile's mode (``"compiled": "reduce-overhead"``: CUDA graphs);
and what the device is, ``"kind": "gpu"`` or ``"cpu"`` (files written before lack it).

A bare ``[[local batch, seconds a step], ...]`` list still reads; it says nothing of
where it was measured.

:meth:`Curve.step_at` reads the curve as measured, made non-decreasing (a fall in step
time as the batch grows is noise, pooled away): between two measured batches it
interpolates; past either end it follows the end segment, bounded so that a step never
takes less time at a larger batch, nor more time a sample.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from dmlbench.errors import SpecError

FORMAT = "dmlbench step curve"
VERSION = 1
MAX_POINTS = 1000
MAX_BYTES = 1 << 20
Kind = Literal["gpu", "cpu"]  # what a curve's device is, and an accelerator profile's
KINDS: tuple[str, ...] = get_args(Kind)


@dataclass(frozen=True)
class Curve:
    """Measured ``(local batch, seconds a step)`` points, one a batch in batch order,
    and where they were measured (``None`` where a bare list does not say)."""

    points: tuple[tuple[float, float], ...]
    task: str | None = None
    device: str | None = None
    precision: str | None = None
    runs: tuple[str, ...] = ()
    missing: tuple[int, ...] = ()  # local batches asked for that no run measured
    compiled: str | None = None  # torch.compile's mode ("default", "reduce-overhead"), if any
    kind: Kind | None = None  # the device's

    def __post_init__(self) -> None:
        if not self.points or any(not (b > 0 and s > 0) for b, s in self.points):
            raise SpecError("a measured curve holds [local batch, seconds a step] pairs above 0")

    @classmethod
    def of(cls, points: Sequence[Sequence[float]], **where: Any) -> Curve:
        """The curve through ``points``; several at one batch count as their median."""
        by_batch: dict[float, list[float]] = {}
        for batch, seconds in points:
            by_batch.setdefault(float(batch), []).append(float(seconds))
        merged = tuple((b, statistics.median(s)) for b, s in sorted(by_batch.items()))
        return cls(merged, **where)

    def measured_on(self) -> str:
        """`` on DEVICE (PRECISION, compiled: MODE)``, as far as the curve says."""
        device = f" on {self.device}" if self.device else ""
        compiled = f"compiled: {self.compiled}" if self.compiled else None
        how = [said for said in (self.precision, compiled) if said]
        return device + (f" ({', '.join(how)})" if how else "")

    def monotone(self) -> tuple[tuple[float, float], ...]:
        """The points with step times made non-decreasing in the batch, the least change
        that does it (pool-adjacent-violators: a run of points that falls is replaced by
        its mean). More work a step does not take less time; where a measured curve
        falls, it is noise (two leases of one H200 differed by up to 40% at 8 images)."""
        blocks: list[list[float]] = []  # [sum of step times, points pooled]
        for _, seconds in self.points:
            blocks.append([seconds, 1])
            while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
                total, count = blocks.pop()
                blocks[-1][0] += total
                blocks[-1][1] += count
        pooled = [total / count for total, count in blocks for _ in range(int(count))]
        return tuple((b, s) for (b, _), s in zip(self.points, pooled, strict=True))

    def step_at(self, batch: float, *, monotone: bool = True) -> tuple[float, str]:
        """Seconds a step at local ``batch``, and how it was read off the curve (its
        :meth:`monotone` points; with ``monotone=False`` the points as they are)."""
        points = self.monotone() if monotone else self.points
        where = self.measured_on()
        if len(points) == 1:
            b1, s1 = points[0]
            return s1 * batch / b1, (
                f"measured{where}: {s1 * 1e3:.1f} ms a step at {b1:g}, in proportion"
            )
        span = f"measured at local batch {points[0][0]:g}–{points[-1][0]:g}{where}"
        if points[0][0] <= batch <= points[-1][0]:
            right = next(i for i, (b, _) in enumerate(points) if b >= batch)
            (b0, s0), (b1, s1) = points[max(right - 1, 0)], points[right]
            seconds = s1 if b1 == batch else s0 + (s1 - s0) * (batch - b0) / (b1 - b0)
            return seconds, f"{span}: {seconds * 1e3:.1f} ms a step at {batch:g}"
        if batch < points[0][0]:
            (b0, s0), (b1, s1) = points[0], points[1]
            slope = max(0.0, (s1 - s0) / (b1 - b0))
            seconds = max(s0 - slope * (b0 - batch), s0 * batch / b0)
            side = f"below {b0:g}"
        else:
            (b0, s0), (b1, s1) = points[-2], points[-1]
            slope = max(0.0, (s1 - s0) / (b1 - b0))
            seconds = min(s1 + slope * (batch - b1), s1 * batch / b1)
            side = f"beyond {b1:g}"
        return seconds, (
            f"{span}: {seconds * 1e3:.1f} ms a step at {batch:g}, extrapolated {side} "
            "along the end segment"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "task": self.task,
            "device": self.device,
            "precision": self.precision,
            **({"compiled": self.compiled} if self.compiled else {}),
            **({"kind": self.kind} if self.kind else {}),
            "runs": list(self.runs),
            "points": [[_number(b), s] for b, s in self.points],
            **({"missing": list(self.missing)} if self.missing else {}),
        }


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def read_curve(path: Path, option: str = "--curve") -> Curve:
    """A curve file (:meth:`Curve.to_json`'s, or a bare list of pairs), bounded in size
    and checked; one line on anything else, naming the file as ``option PATH`` (a
    positional argument's reader passes ``option=""``)."""
    from dmlbench.files import read_bounded

    named = f"{option} {path}" if option else str(path)
    try:
        data = json.loads(read_bounded(path, MAX_BYTES, f"{option or 'curve'} file", SpecError))
    except ValueError:
        raise SpecError(f"{named} is not JSON: give [[local batch, seconds], ...]") from None
    where: dict[str, Any] = {}
    if isinstance(data, dict):
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise SpecError(
                f"{named}: not a {FORMAT} file of version {VERSION} "
                "(`dmlbench bench curve` writes one)"
            )
        for key in ("task", "device", "precision", "compiled"):
            value = data.get(key)
            if value is not None and not (isinstance(value, str) and 0 < len(value) <= 200):
                raise SpecError(f"{named}: its {key} is not a short text")
            where[key] = value
        kind = data.get("kind")
        if kind is not None and kind not in KINDS:
            raise SpecError(
                f"{named}: its kind is {str(kind)[:20]!r}, not one of {', '.join(KINDS)}"
            )
        where["kind"] = kind
        runs = data.get("runs") or []
        if not (isinstance(runs, list) and len(runs) <= MAX_POINTS * 100):
            raise SpecError(f"{named}: its runs are not a list of run ids")
        where["runs"] = tuple(str(run)[:200] for run in runs)
        missing = data.get("missing") or []
        if not (
            isinstance(missing, list)
            and len(missing) <= MAX_POINTS
            and all(type(b) is int and b > 0 for b in missing)
        ):
            raise SpecError(f"{named}: its missing batches are not a list of counts")
        where["missing"] = tuple(missing)
        data = data.get("points")
    ok = isinstance(data, list) and 0 < len(data) <= MAX_POINTS
    ok = ok and all(
        isinstance(p, list)
        and len(p) == 2
        and all(type(v) in (int, float) and math.isfinite(v) and 0 < v <= 1e9 for v in p)
        for p in data
    )
    if not ok:
        raise SpecError(
            f"{named}: give 1 to {MAX_POINTS:,} [local batch, seconds a step] pairs above 0"
        )
    return Curve.of(data, **where)


def step_line(curve: Curve | Sequence[Sequence[float]]) -> tuple[float, float]:
    """(fixed seconds, seconds a sample) of the least-squares line through a measured
    curve at two or more batches; the intercept, a step's fixed part (launches, the
    host), is at least 0. ``benchmarks/replay_mlperf.py`` takes its fixed part so."""
    points = curve.points if isinstance(curve, Curve) else [(float(b), float(s)) for b, s in curve]
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_s = sum(s for _, s in points) / n
    slope = sum((b - mean_b) * (s - mean_s) for b, s in points) / sum(
        (b - mean_b) ** 2 for b, _ in points
    )
    return max(0.0, mean_s - slope * mean_b), slope


def curve_sweep(task: str, device: str, precision: str, steps: int, warmup: int) -> str:
    """The sweep name a curve's runs are stored under: one per task, device model,
    precision and step counts, so machines that share a store each measure their own
    batches (``device``: the GPU's name or the CPU's model, as runs record it)."""
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")[:48] or "device"
    return f"curve-{task}-{slug}-{precision}-{steps}x{warmup}"


def compiled_mode(run: Any) -> str | None:
    """How a stored run's model was compiled: torch.compile's mode, or None (eager)."""
    compiled = (run.spec or {}).get("compile")
    return "default" if compiled is True else str(compiled) if compiled else None


def device_name(run: Any) -> str:
    """The device a stored run stepped on: its GPU's name, else the host's CPU."""
    if device_kind(run) == "gpu" and run.gpus:
        return str(run.gpus[0])
    return str(run.cpu_model or "cpu")


def device_kind(run: Any) -> str:
    """What a stored run stepped on: ``"gpu"`` (CUDA) or ``"cpu"``."""
    return "gpu" if str(run.summary.device or "").startswith("cuda") else "cpu"


def curve_from_runs(runs: Sequence[Any], precision: str | None = None) -> tuple[Curve, int]:
    """The curve of one-worker runs that ended as planned, at each local batch the median
    of their steady step times, on the device the newest of them ran on and compiled as
    it was (eager, or torch.compile's mode); and how many such runs ran on another
    device or were compiled otherwise, left out. A run disturbed by other processes on
    its cores counts only at a batch no undisturbed run measured."""
    found = [
        run
        for run in runs
        if run.finished
        and run.workers == 1
        and run.summary.step_time_s
        and (precision is None or run.precision == precision)
    ]
    if not found:
        raise SpecError(
            "no finished one-worker run with a step time to draw a curve from "
            "(`dmlbench results` says why the runs did not finish)"
        )
    newest = max(found, key=lambda run: run.created_at)
    device, compiled = device_name(newest), compiled_mode(newest)
    mine = [run for run in found if (device_name(run), compiled_mode(run)) == (device, compiled)]
    elsewhere = len(found) - len(mine)
    quiet = {run.local_batch for run in mine if run.disturbed is not True}
    mine = [run for run in mine if run.disturbed is not True or run.local_batch not in quiet]
    curve = Curve.of(
        [(run.local_batch, float(run.summary.step_time_s)) for run in mine],
        task=newest.task,
        device=device,
        precision=newest.precision,
        runs=tuple(run.run_id for run in mine),
        compiled=compiled,
        kind=device_kind(newest),
    )
    return curve, elsewhere
