"""How well a measured step-time curve predicts a local batch it did not measure: each
point of each curve left out in turn, read off the rest three ways (issue 54, item 2):

- **monotone segments** (`Curve.step_at`, what `simulate-cluster --curve` does): the
  points made non-decreasing, then the segment between the neighbours, or past an end
  the end segment, bounded;
- **raw segments**: the same on the points as measured;
- **the least-squares line** through the rest (what `simulate-cluster` did before, and
  what the MLPerf replay takes the intercept of);
- **in proportion** to the nearest measured batch (the null: no fixed part at all).

    python benchmarks/curve_reading.py [CURVE.json ...] [--json OUT]

Without files it reads the curves in ``benchmarks/results/gpu`` and ``.../cpu``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from summary import run_main, write_summary

from dmlbench.perfmodel.curve import Curve, read_curve, step_line

RESULTS = Path(__file__).parent / "results"
OUT = RESULTS / "replays" / "curve_reading.json"
METHODS = ("monotone segments", "raw segments", "line", "in proportion")


def predictions(rest: Curve, batch: float) -> dict[str, float]:
    """The step at ``batch`` read off ``rest`` each way."""
    fixed, slope = step_line(rest)
    near_b, near_s = min(rest.points, key=lambda p: abs(p[0] - batch))
    return {
        "monotone segments": rest.step_at(batch)[0],
        "raw segments": rest.step_at(batch, monotone=False)[0],
        "line": fixed + slope * batch,
        "in proportion": near_s * batch / near_b,
    }


def left_out(curve: Curve) -> list[dict[str, Any]]:
    """A row for each point of ``curve`` (three or more), predicted from the others."""
    rows = []
    for index, (batch, seconds) in enumerate(curve.points):
        rest = Curve(curve.points[:index] + curve.points[index + 1 :])
        where = "inside" if 0 < index < len(curve.points) - 1 else "beyond the ends"
        guess = predictions(rest, batch)
        rows.append(
            {
                "batch": batch,
                "measured_s": seconds,
                "where": where,
                **{f"{name} error": guess[name] / seconds - 1 for name in METHODS},
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("curves", nargs="*", type=Path)
    parser.add_argument(
        "--json",
        type=Path,
        help=f"where the results go (default: {OUT.name}, for the curves the repository keeps; "
        "with curves named, only where this says)",
    )
    args = parser.parse_args()
    files = args.curves or sorted(
        [*RESULTS.glob("gpu/*-curve.json"), *RESULTS.glob("cpu/*-curve.json")]
    )
    cells: list[dict[str, Any]] = []
    for path in files:
        curve = read_curve(path, option="")
        if len(curve.points) < 3:
            sys.exit(f"{path}: leaving one out needs three or more batches")
        for row in left_out(curve):
            cells.append({"curve": path.stem, **row})
    print(f"{'curve':38} {'batch':>6} {'ms':>8}  " + "  ".join(f"{m:>17}" for m in METHODS))
    for cell in cells:
        said = "  ".join(f"{cell[f'{m} error']:>+17.1%}" for m in METHODS)
        mark = "" if cell["where"] == "inside" else "  (end)"
        print(
            f"{cell['curve']:38} {cell['batch']:>6g} {1000 * cell['measured_s']:>8.2f}  "
            f"{said}{mark}"
        )
    summary: dict[str, Any] = {"curves": len(files), "cells": len(cells)}
    for where in ("inside", "beyond the ends"):
        chosen = [cell for cell in cells if cell["where"] == where]
        for method in METHODS:
            errors = [abs(cell[f"{method} error"]) for cell in chosen]
            if errors:
                summary[f"{where}: {method}, median |error|"] = statistics.median(errors)
                summary[f"{where}: {method}, largest |error|"] = max(errors)
    for key, value in summary.items():
        shown = f"{value:.1%}" if isinstance(value, float) else value
        print(f"  {key}: {shown}")
    if args.json or not args.curves:  # a curve of one's own never over the kept summary
        write_summary(args.json or OUT, {"cells": cells, "summary": summary})


if __name__ == "__main__":
    run_main(main)
