"""Shared fixtures. Every test gets its own results store and data cache (which starts
with the session's measured peaks)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmlbench.train.hardware import CACHE_FILE  # the peak FLOP/s cache

TESTS = Path(__file__).parent

# Worker processes are spawned: they find the test plugin module through PYTHONPATH.
sys.path.insert(0, str(TESTS))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p
)

# Each test process's emulated networks get names of their own (issue 53): another
# checkout's run on this machine is neither counted as this session's leftover nor
# removed by its clean-up, and the two xdist workers keep apart too. Set here, at import,
# so that every launcher, worker and node agent the tests start inherits it.
os.environ["DMLBENCH_NETEM_PREFIX"] = "t" + secrets.token_hex(2)[:3]

# the fixtures more than one test module uses
pytest_plugins = ["helpers"]
DURATIONS: dict[str, float] = {}


def pytest_configure(config: pytest.Config) -> None:
    """The CLI's rich consoles take their width from COLUMNS when first imported, and an
    xdist worker starts with COLUMNS=80: a worker starts as wide as the commands the
    tests run, so that no assertion meets a line break. (Not the main process: its
    terminal prints pytest's own lines.)"""
    from helpers import COLUMNS

    if "PYTEST_XDIST_WORKER" in os.environ:
        os.environ["COLUMNS"] = COLUMNS


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-file",
        metavar="PATH",
        help="write every test's seconds (setup + call + teardown) here as CSV, slowest first",
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    DURATIONS[report.nodeid] = DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = session.config.getoption("--durations-file")
    if not target or not DURATIONS or hasattr(session.config, "workerinput"):
        return  # an xdist worker's share: the controller writes the whole file
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = sorted(DURATIONS.items(), key=lambda item: -item[1])
    total = sum(DURATIONS.values())
    lines = ["seconds,test", f"{total:.2f},TOTAL ({len(rows)} tests)"]
    lines += [f"{seconds:.2f},{test}" for test, seconds in rows]
    path.write_text("\n".join(lines) + "\n")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that starts worker processes belongs to the slow tier."""
    for item in items:
        if item.get_closest_marker("multiprocess") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


# Modules whose tests act on the whole machine: they make network namespaces, bridges and
# veths (emulated networks and hosts, a test Slurm on fixed ports) or assert that none
# are left on it. Under xdist (`make test` runs the integration lane on two workers) they
# run in one worker, one at a time.
MACHINE_WIDE = {
    "test_multinode.py",
    "test_netem.py",
    "test_slurm.py",
    "test_dask_hosts.py",
    "test_readme.py",
}


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, when it is installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole modules to a worker (their module-scoped fixtures, a Dask cluster or a
    trained run, start once), the MACHINE_WIDE ones as one unit; the unit with the most
    tests first. (Not xdist_group marks: pytest 9 ignores the ids xdist 3.8 rewrites.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "machine-wide" if Path(module).name in MACHINE_WIDE else module

    return ByModule(config, log)


@pytest.fixture(scope="session")
def machine_peaks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The peak-FLOP/s cache of the whole session: the machine does not change between
    tests, and probing it anew costs each test's first run about 4 s (the probes
    themselves are tested in test_hardware.py, in caches of their own). The integration
    lane's (tests/integration/conftest.py) starts probed."""
    return tmp_path_factory.mktemp("machine") / CACHE_FILE


@pytest.fixture(autouse=True)
def isolated_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, machine_peaks: Path
) -> Iterator[None]:
    """A results store and a data cache of the test's own; the cache starts with the
    peaks measured so far this session, and gives back any the test measured."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DMLBENCH_CACHE", str(cache))
    monkeypatch.setenv("DMLBENCH_STORE", str(tmp_path / "store"))
    if machine_peaks.exists():
        cache.mkdir()
        shutil.copyfile(machine_peaks, cache / CACHE_FILE)
    yield
    if (cache / CACHE_FILE).is_file():  # whole or not at all: xdist's workers share it
        partial = machine_peaks.with_name(f".{machine_peaks.name}.{os.getpid()}")
        shutil.copyfile(cache / CACHE_FILE, partial)
        partial.replace(machine_peaks)


def _launchers_started_here() -> set[int]:
    """The `dmlbench` commands this test process started that still run."""
    from helpers import alive, command_line

    here = str(os.getpid())
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        line = command_line(int(entry.name)) if parent == here else ""
        if (" -m dmlbench " in line or "/dmlbench " in line) and alive(int(entry.name)):
            found.add(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def no_launcher_outlives_its_test() -> Iterator[None]:
    """A test that fails between starting a long run and stopping it would leave the run
    training for the rest of the session, taking the cores every later test times on:
    what the test started and left running is killed when it ends (its workers and
    network go with it, as with any killed launcher)."""
    before = _launchers_started_here()
    yield
    import signal

    for pid in _launchers_started_here() - before:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


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
    from helpers import COLUMNS

    from dmlbench.cli.app import main

    def call(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["dmlbench", *args])
        monkeypatch.setenv("COLUMNS", COLUMNS)
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as leaving:
            code = leaving.code if isinstance(leaving.code, int) else int(leaving.code is not None)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call
