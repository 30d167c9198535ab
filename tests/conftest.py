"""Shared fixtures. Every test gets its own results store and data cache."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

# Worker processes are spawned: they find the test plugin module through PYTHONPATH.
sys.path.insert(0, str(TESTS))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DMLBENCH_STORE", str(tmp_path / "store"))


@pytest.fixture
def store(tmp_path: Path):
    from dmlbench.results import ResultsStore

    return ResultsStore(tmp_path / "store")
