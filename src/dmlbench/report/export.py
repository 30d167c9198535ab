"""CSV and Parquet export of runs, evaluations, phases and communication micro-benchmarks
(one file per table). Parquet needs pyarrow, an extra: ``pip install 'dmlbench[parquet]'``."""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pandas as pd

from dmlbench.errors import DmlbenchError, chosen
from dmlbench.files import check_output_file, check_output_folder, write_file
from dmlbench.report import frames
from dmlbench.results.records import CommRun, RunRecord

Format = Literal["csv", "parquet"]
FORMATS: tuple[Format, ...] = ("csv", "parquet")
PARQUET_MISSING = (
    "Parquet export needs pyarrow: pip install 'dmlbench[parquet]' (or use --format csv)"
)


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def default_formats() -> list[Format]:
    """CSV always; Parquet as well where pyarrow is installed."""
    return ["csv", "parquet"] if parquet_available() else ["csv"]


def check_formats(formats: Sequence[str]) -> list[Format]:
    """The formats as the export takes them; refused, in one line, a format that is
    unknown or whose library is missing."""
    named = [part.strip() for text in formats for part in text.split(",")]  # csv,parquet
    checked = list(dict.fromkeys(chosen("--format", named, FORMATS)))
    if "parquet" in checked and not parquet_available():
        raise DmlbenchError(PARQUET_MISSING)
    return checked


def tables(runs: Sequence[RunRecord], comm_runs: Sequence[CommRun] = ()) -> dict[str, pd.DataFrame]:
    """The tables a store exports; ``comm`` only where it holds micro-benchmarks."""
    exported = {
        "runs": frames.runs_frame(runs),
        "evals": frames.evals_frame(runs),
        "phases": frames.phases_frame(runs),
    }
    if comm_runs:
        exported["comm"] = frames.comm_frame(comm_runs)
    return exported


# A spreadsheet reads a cell that starts with one of these as a formula
# (=HYPERLINK(...), @SUM(...)): such text cells get a leading apostrophe, as OWASP's
# advice on CSV injection and the spreadsheets themselves expect.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell that a spreadsheet would run as a formula quoted."""

    def quote(value: object) -> object:
        if isinstance(value, str) and value.startswith(FORMULA_START):
            return "'" + value
        return value

    safe = frame.copy()
    for column in safe.columns:
        if pd.api.types.is_object_dtype(safe[column]) or pd.api.types.is_string_dtype(safe[column]):
            safe[column] = safe[column].map(quote)
    return safe


def to_csv(frame: pd.DataFrame) -> str:
    """``frame`` as CSV text that a spreadsheet opens as data (see FORMULA_START)."""
    return str(spreadsheet_safe(frame).to_csv(index=False))


def export(
    runs: Sequence[RunRecord],
    folder: Path,
    formats: Sequence[Format],
    comm_runs: Sequence[CommRun] = (),
) -> list[Path]:
    """Write each table in each format; return the paths written. Each file is written
    whole and renamed into place, never through a link (see :mod:`dmlbench.files`)."""
    check_formats(formats)
    check_output_folder(folder, "export folder")
    frames = tables(runs, comm_runs)
    for name in frames:  # every file checked before the first is written
        for fmt in formats:
            check_output_file(folder / f"{name}.{fmt}", "export file")
    written = []
    for name, frame in frames.items():
        for fmt in formats:
            path = folder / f"{name}.{fmt}"
            if fmt == "csv":
                data: str | bytes = to_csv(frame)
            else:
                buffer = io.BytesIO()
                frame.to_parquet(buffer, index=False)
                data = buffer.getvalue()
            written.append(write_file(path, data, "export file"))
    return written
