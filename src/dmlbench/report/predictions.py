"""Predictions of `dmlbench simulate`, kept in the store so the report can draw them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FOLDER = "predictions"
MAX_BYTES = 16 << 20  # a prediction is a few KB: a file past this is not one


def save_predictions(store: Path, task: str, result: dict[str, Any]) -> Path:
    """Write ``STORE/predictions/TASK.json`` (the latest prediction per task)."""
    from dmlbench.files import write_file
    from dmlbench.names import file_stem

    path = store / FOLDER / f"{file_stem(task)}.json"
    stamped = {**result, "created_at": datetime.now(UTC).isoformat(timespec="seconds")}
    return write_file(path, json.dumps(stamped, indent=1, default=str), "prediction")


def load_predictions(store: Path) -> list[dict[str, Any]]:
    folder = store / FOLDER
    if not folder.is_dir():
        return []
    from dmlbench.errors import DmlbenchError
    from dmlbench.files import read_bounded

    results = []
    for path in sorted(folder.glob("*.json")):
        try:
            results.append(json.loads(read_bounded(path, MAX_BYTES, "prediction")))
        except (DmlbenchError, ValueError, RecursionError):
            continue  # a half-written or foreign file is not ours to report
    return results
