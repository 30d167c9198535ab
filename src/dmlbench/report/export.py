"""CSV and Parquet export of runs, evaluations, phases and communication micro-benchmarks
(one file per table). Parquet needs pyarrow, an extra: ``pip install 'dmlbench[parquet]'``."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pandas as pd

from dmlbench.errors import DmlbenchError
from dmlbench.report import analysis
from dmlbench.results.records import CommRun, RunRecord

Format = Literal["csv", "parquet"]
PARQUET_MISSING = (
    "Parquet export needs pyarrow: pip install 'dmlbench[parquet]' (or use --format csv)"
)


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def default_formats() -> list[Format]:
    """CSV always; Parquet as well where pyarrow is installed."""
    return ["csv", "parquet"] if parquet_available() else ["csv"]


def check_formats(formats: Sequence[str]) -> None:
    """Refuse, in one line, a format that is unknown or whose library is missing."""
    bad = [f for f in formats if f not in ("csv", "parquet")]
    if bad:
        raise DmlbenchError(f"--format {bad[0]!r}: choose csv or parquet")
    if "parquet" in formats and not parquet_available():
        raise DmlbenchError(PARQUET_MISSING)


def tables(runs: Sequence[RunRecord], comm_runs: Sequence[CommRun] = ()) -> dict[str, pd.DataFrame]:
    """The tables a store exports; ``comm`` only where it holds micro-benchmarks."""
    frames = {
        "runs": analysis.runs_frame(runs),
        "evals": analysis.evals_frame(runs),
        "phases": analysis.phases_frame(runs),
    }
    if comm_runs:
        frames["comm"] = analysis.comm_frame(comm_runs)
    return frames


def export(
    runs: Sequence[RunRecord],
    folder: Path,
    formats: Sequence[Format],
    comm_runs: Sequence[CommRun] = (),
) -> list[Path]:
    """Write each table in each format; return the paths written."""
    check_formats(formats)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in tables(runs, comm_runs).items():
        for fmt in formats:
            path = folder / f"{name}.{fmt}"
            if fmt == "csv":
                frame.to_csv(path, index=False)
            else:
                frame.to_parquet(path, index=False)
            written.append(path)
    return written
