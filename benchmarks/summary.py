"""What every benchmark's summary JSON starts with: the command that wrote it, the
machine (its CPU model too: the machines of two sessions differ), the revision, the
versions and the date, so that BENCHMARKS.md can say where each figure came from; and
:func:`run_main`, which ends a benchmark on dmlbench's own errors in one line."""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dmlbench
from dmlbench.results.environment import cpu_model, git_revision


def write_summary(path: Path, fields: Mapping[str, Any]) -> None:
    """Write ``fields`` to ``path`` as JSON, after the run's provenance. Torch is
    imported here, for its version: a benchmark whose own process stays light (its
    contenders run in processes of their own) stays so while it measures."""
    import torch

    script = f"benchmarks/{Path(sys.argv[0]).name}"
    provenance = {
        "command": shlex.join(["python", script, *sys.argv[1:]]),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "dmlbench": dmlbench.__version__,
        "revision": git_revision(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**provenance, **fields}, indent=1, default=_plain) + "\n")
    print(f"summary: {path}")


def _plain(value: Any) -> Any:
    """A NumPy or torch value (pandas' records hold them) as the Python numbers it holds;
    anything else JSON lacks (a path, a date) as its text."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def run_main(main: Callable[[], int | None]) -> None:
    """Run a benchmark's ``main`` and exit with its code. dmlbench's own errors (a path
    that holds no dataset, no store or no round, a curve file that is none) end it in
    one line, as they end dmlbench's commands, not in a traceback."""
    from dmlbench.errors import DmlbenchError

    try:
        code = main()
    except DmlbenchError as error:
        sys.exit(f"{Path(sys.argv[0]).name}: {error}")
    sys.exit(code or 0)
