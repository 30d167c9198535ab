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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that starts worker processes belongs to the slow tier."""
    for item in items:
        if item.get_closest_marker("multiprocess") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DMLBENCH_STORE", str(tmp_path / "store"))


@pytest.fixture
def store(tmp_path: Path):
    from dmlbench.results import ResultsStore

    return ResultsStore(tmp_path / "store")


@pytest.fixture
def dmlbench(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Call the `dmlbench` command in this process: ``dmlbench(*args) -> (code, out, err)``.

    The same entry point as the console script (one-line errors included), in
    milliseconds instead of a subprocess's seconds of imports.
    """
    from dmlbench.cli.app import main

    def call(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["dmlbench", *args])
        monkeypatch.setenv("COLUMNS", "160")
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as leaving:
            code = leaving.code if isinstance(leaving.code, int) else int(leaving.code is not None)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call
