"""Predictions of `dmlbench simulate`, kept in the store so the report can draw them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FOLDER = "predictions"


def save_predictions(store: Path, task: str, result: dict[str, Any]) -> Path:
    """Write ``STORE/predictions/TASK.json`` (the latest prediction per task)."""
    folder = store / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', task)}.json"
    stamped = {**result, "created_at": datetime.now(UTC).isoformat(timespec="seconds")}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stamped, indent=1, default=str))
    tmp.replace(path)
    return path


def load_predictions(store: Path) -> list[dict[str, Any]]:
    folder = store / FOLDER
    if not folder.is_dir():
        return []
    results = []
    for path in sorted(folder.glob("*.json")):
        try:
            results.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a half-written or foreign file is not ours to report
    return results
