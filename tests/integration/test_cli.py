"""The `dmlbench` command as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DMLBENCH, EXAMPLES, cli, inside, wait_for_evaluation


@pytest.mark.slow
def test_a_one_line_error_is_the_same_from_the_console_script() -> None:
    done = cli("run", "no-such-task", check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "unknown task 'no-such-task'" in done.stderr


@pytest.mark.multiprocess
def test_run_then_results(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    run = json.loads(cli("run", "digits-mlp", "--workers", "2", "--json", "--store", store).stdout)
    assert run["status"] == "success"
    stored = json.loads(inside("results", "--json", "--store", store).stdout)
    assert [r["run_id"] for r in stored] == [run["run_id"]]
    assert stored[0]["evals"] == run["evals"]
    table = inside("results", "--store", store).stdout
    assert "digits-mlp" in table
    summary = inside("results", run["run_id"][-6:], "--store", store).stdout  # unique end of id
    assert "time to 97.0%" in summary and "phases" in summary and run["run_id"] in summary
    missing = inside("results", "no-such-run", "--store", store, check=False)
    assert missing.returncode == 2 and "no run matches 'no-such-run'" in missing.stderr


@pytest.mark.multiprocess
@pytest.mark.parametrize("how", ["ctrl-c", "kill -TERM"])
def test_ctrl_c_stores_the_run_as_interrupted(tmp_path: Path, how: str) -> None:
    """Ctrl-C signals the terminal's whole group, workers included: one line, no
    traceback per rank (issue 40), and the launcher's signal handlers put back. A
    SIGTERM (kill, a time limit) is stored as such: it read "interrupted by the user"."""
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [
            *DMLBENCH,
            "run",
            "synthetic-mlp",
            "--workers",
            "2",
            "--store",
            str(store),
            "--set",
            "max_epochs=100000",
            "--set",
            "stop_at_target=false",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for_evaluation(proc, store)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stdout + stderr and "KeyboardInterrupt" not in stdout + stderr
    row = json.loads(inside("results", "--json", "--store", str(store)).stdout)[0]
    assert row["status"] == "interrupted"
    said = "interrupted by the user" if how == "ctrl-c" else "stopped by SIGTERM"
    assert row["error"] == said
    assert len(row["evals"]) >= 1  # what was reached is kept
    shown = inside("compare", "--store", str(store)).stdout  # its point reads 0/1 and dashes
    assert "1 run was interrupted; it counts as not reached (k/n)" in " ".join(shown.split())


@pytest.mark.multiprocess
def test_a_launch_puts_the_signal_handlers_back(tmp_path: Path) -> None:
    """torch's launcher left its own SIGINT/SIGTERM handlers set: a signal between two
    runs of a sweep raised its SignalException, a traceback and exit 1 (issue 40)."""
    from dmlbench.launch import run_benchmark
    from dmlbench.resolve import resolve_spec
    from dmlbench.results import ResultsStore

    names = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    before = {n: signal.getsignal(getattr(signal, n)) for n in names}
    spec = resolve_spec("synthetic-mlp", max_steps=3)
    outcome = run_benchmark(spec, ResultsStore(tmp_path / "s"), echo=False)
    assert outcome.status in ("success", "target_not_reached"), outcome.error
    assert {n: signal.getsignal(getattr(signal, n)) for n in names} == before


@pytest.mark.slow
def test_plugins_are_not_imported_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "planted.py").write_text("open('IMPORTED', 'w').close()\n")
    sweep = tmp_path / "s.yaml"
    sweep.write_text("task: synthetic-mlp\nplugins: [planted]\naxes: {workers: [1]}\n")
    done = subprocess.run(
        [*DMLBENCH, "sweep", str(sweep), "--plan"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "plugin module 'planted' failed to import" in done.stderr
    assert "never imported from the current folder" in done.stderr  # why, and what to do
    assert not (tmp_path / "IMPORTED").exists()


@pytest.mark.multiprocess
def test_example_plugin_task_runs(tmp_path: Path) -> None:
    done = cli(
        "run",
        "breast-cancer-logreg",
        "--plugin",
        "my_tasks",
        "--workers",
        "2",
        "--json",
        "--store",
        str(tmp_path / "s"),
        pythonpath=str(EXAMPLES),
    )
    run = json.loads(done.stdout)
    assert run["status"] == "success" and run["best_metric"] >= 0.95


@pytest.mark.slow
def test_imports_stay_light() -> None:
    """The CLI loads no heavy library before a command needs it, and a worker only what
    its task needs: nothing of scikit-learn, SciPy, pandas or matplotlib at start."""
    heavy = ("torch", "sklearn", "scipy", "pandas", "matplotlib", "dask", "pyarrow")
    probe = "import sys, {m}; print(' '.join(n for n in {heavy!r} if n in sys.modules))"
    cases = (
        ("dmlbench.cli.app", set()),
        # what `run` decides and starts before it resolves the spec: the fork server's
        # imports overlap the resolution's (torch) only if these need none
        (
            "dmlbench.launch.request, dmlbench.launch.slurm, dmlbench.launch.forkserver, "
            "dmlbench.spec.overrides, dmlbench.spec.run, dmlbench.train.allocator",
            set(),
        ),
        ("dmlbench.train.worker", {"torch"}),
        # every built-in task registers, recipe validated, without torch (`tasks`)
        ("dmlbench.tasks; dmlbench.tasks.all_tasks()", set()),
    )
    for module, allowed in cases:
        done = subprocess.run(
            [sys.executable, "-c", probe.format(m=module, heavy=heavy)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert set(done.stdout.split()) == allowed, (module, done.stdout)
    # a missing store is said before the report layer (pandas, matplotlib) is imported
    command = (
        "import sys\nfrom dmlbench.cli.app import main\n"
        "sys.argv = ['dmlbench', 'results', '--store', '/nonexistent/store']\n"
        "try:\n    main()\nexcept SystemExit:\n"
        f"    print(' '.join(n for n in {heavy!r} if n in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", command], capture_output=True, text=True, timeout=120
    )
    assert "no results store" in done.stderr and done.stdout.split() == [], done.stdout
