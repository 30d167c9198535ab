"""CSV and Parquet export of runs, evaluations and phases (one file per table)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from dmlbench.report import analysis

Format = Literal["csv", "parquet"]


def tables(runs: Sequence[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    return {
        "runs": analysis.runs_frame(runs),
        "evals": analysis.evals_frame(runs),
        "phases": analysis.phases_frame(runs),
    }


def export(runs: Sequence[dict[str, Any]], folder: Path, formats: Sequence[Format]) -> list[Path]:
    """Write ``runs``, ``evals`` and ``phases`` in each format; return the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in tables(runs).items():
        for fmt in formats:
            path = folder / f"{name}.{fmt}"
            if fmt == "csv":
                frame.to_csv(path, index=False)
            else:
                frame.to_parquet(path, index=False)
            written.append(path)
    return written
