"""The `dmlbench` command as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DMLBENCH = [sys.executable, "-m", "dmlbench"]


EXAMPLES = Path(__file__).parent.parent / "examples"


def cli(*args: str, check: bool = True, pythonpath: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "160"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join((pythonpath, env.get("PYTHONPATH", "")))
    done = subprocess.run([*DMLBENCH, *args], capture_output=True, text=True, timeout=120, env=env)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_tasks_lists_every_reference_task(dmlbench) -> None:
    names = {t["name"] for t in json.loads(dmlbench("tasks", "--json")[1])}
    expected = {"digits-mlp", "epsilon-logreg"} | {f"cifar10-resnet{d}" for d in (20, 32, 44, 56)}
    assert expected <= names
    table = dmlbench("tasks")[1]
    assert "cifar10-resnet56" in table and "α/√t" in table


def test_dry_run_resolves_and_starts_nothing(dmlbench, tmp_path: Path) -> None:
    code, out, _ = dmlbench(
        "run",
        "cifar10-resnet20",
        "--workers",
        "4",
        "--dry-run",
        "--json",
        "--store",
        str(tmp_path / "s"),
    )
    plan = json.loads(out)
    assert code == 0 and plan["spec"]["workers"] == 4 and plan["derived"]["global_batch"] == 128
    assert plan["derived"]["lr_first_step"] == pytest.approx(0.1 / 256 * 32)
    assert plan["derived"]["lr_after_warmup"] == pytest.approx(0.1 / 256 * 128)
    assert plan["derived"]["division"] == "closed" and plan["deviations"] == {}
    assert not (tmp_path / "s").exists()


def test_global_batch_flag_fixes_the_global_batch(dmlbench) -> None:
    """One run: local = global / workers; a list of counts: strong scaling at that batch,
    also when given with --set (an inline strong sweep once ignored it)."""
    code, out, _ = dmlbench(
        "run", "digits-mlp", "-w", "2", "--global-batch", "128", "--dry-run", "--json"
    )
    one = json.loads(out)
    assert code == 0 and one["spec"]["recipe"]["local_batch"] == 64
    for args in (["--global-batch", "128"], ["--scaling", "strong", "--set", "global_batch=128"]):
        code, out, _ = dmlbench("run", "digits-mlp", "-w", "1,2", *args, "--dry-run", "--json")
        plan = json.loads(out)
        assert code == 0 and plan["sweep"]["scaling"] == "strong"
        assert [
            (r["spec"]["recipe"]["local_batch"], r["spec"]["global_batch"]) for r in plan["runs"]
        ] == [(128, 128), (64, 128)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "no-such-task"], "unknown task 'no-such-task'"),
        (["run", "digits-mlp", "--workers", "0", "--dry-run"], "must be at least 1"),
        (["run", "digits-mlp", "--set", "workers=0", "--dry-run"], "workers: Input should be"),
        (["run", "digits-mlp", "--set", "global_batch=33", "--workers", "2"], "not divisible"),
        (
            ["run", "cifar10-resnet20", "--data-dir", "/nonexistent", "--set", "download=false"],
            "CIFAR-10 not found under /nonexistent",
        ),
        (["results", "--store", "/nonexistent/store"], "no results store"),
        (["report", "--store", "/nonexistent/store"], "no results store"),
        (["compare", "--store", "/nonexistent/store"], "no results store"),
        (["sweep", "/nonexistent/sweep.yaml"], "does not exist"),
        (["run", "--workers", "1,0"], "worker counts must be at least 1"),
        (
            ["run", "--workers", "1,3", "--scaling", "strong", "--dry-run"],
            "global batch 32 does not divide among 3 workers",
        ),
        (
            ["run", "--workers", "1,3", "--global-batch", "128", "--dry-run"],
            "global batch 128 does not divide among 3 workers",
        ),
        (
            ["run", "--workers", "1,2", "--scaling", "weak", "--global-batch", "64", "--dry-run"],
            "global_batch belongs to strong scaling",
        ),
        (["run", "--workers", "1,2", "--scaling", "sideways", "--dry-run"], "scaling: Input"),
        (["run", "--workers", "1,2", "--rerun", "sometimes", "--dry-run"], "--rerun 'sometimes'"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(dmlbench, args: list[str], message: str) -> None:
    code, _, err = dmlbench(*args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_one_line_error_is_the_same_from_the_console_script() -> None:
    done = cli("run", "no-such-task", check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "unknown task 'no-such-task'" in done.stderr


def wait_for_evaluation(
    proc: subprocess.Popen, store: Path, run: int = 1, timeout: float = 60
) -> None:
    """Wait until the ``run``-th run in ``store`` has logged an evaluation (or fail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = sorted(store.glob("runs/*/events.jsonl"))
        if len(logs) >= run and '"eval_accuracy"' in logs[run - 1].read_text():
            return
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"run {run} never logged an evaluation")


@pytest.mark.multiprocess
def test_run_then_results(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    run = json.loads(cli("run", "digits-mlp", "--workers", "2", "--json", "--store", store).stdout)
    assert run["status"] == "success"
    stored = json.loads(cli("results", "--json", "--store", store).stdout)
    assert [r["run_id"] for r in stored] == [run["run_id"]]
    assert stored[0]["evals"] == run["evals"]
    table = cli("results", "--store", store).stdout
    assert "digits-mlp" in table
    summary = cli("results", run["run_id"][-6:], "--store", store).stdout  # unique end of id
    assert "time to 97.0%" in summary and "phases" in summary and run["run_id"] in summary
    missing = cli("results", "no-such-run", "--store", store, check=False)
    assert missing.returncode == 2 and "no single run matches 'no-such-run'" in missing.stderr


@pytest.mark.multiprocess
def test_ctrl_c_stores_the_run_as_interrupted(tmp_path: Path) -> None:
    """Ctrl-C signals the terminal's whole group, workers included: one line, no
    traceback per rank (issue 40), and the launcher's signal handlers put back."""
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
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stdout + stderr and "KeyboardInterrupt" not in stdout + stderr
    row = json.loads(cli("results", "--json", "--store", str(store)).stdout)[0]
    assert row["status"] == "interrupted"
    assert len(row["evals"]) >= 1  # what was reached is kept


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


def test_user_and_engine_text_is_printed_literally(dmlbench, tmp_path: Path) -> None:
    from dmlbench.results import ResultsStore

    store = str(tmp_path / "store")
    ResultsStore(Path(store))
    code, _, err = dmlbench("results", "abc[/x]", "--store", store)
    assert code == 2 and "no single run matches 'abc[/x]'" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = dmlbench("run", "digits-mlp", "--set", "max_epochs=[red]x", "--dry-run")
    assert code == 2 and "(got '[red]x')" in err


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
    assert not (tmp_path / "IMPORTED").exists()


def test_help_lists_the_commands(dmlbench) -> None:
    help_text = dmlbench("--help")[1]
    assert all(command in help_text for command in ("tasks", "run", "results"))


def test_docs_task_page_is_generated_from_the_registry() -> None:
    page = Path(__file__).parent.parent / "docs" / "tasks.md"
    # A process of its own: tests before this one may have registered plugin tasks here.
    assert page.read_text() == cli("tasks", "--markdown").stdout, (
        "docs/tasks.md is stale: run `dmlbench tasks --markdown > docs/tasks.md`"
    )


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


@pytest.mark.parametrize(
    ("name", "task"),
    [("digits.yaml", "digits-mlp"), ("cifar10-resnet20.toml", "cifar10-resnet20")],
)
def test_example_spec_files_resolve(dmlbench, name: str, task: str) -> None:
    code, out, err = dmlbench("run", "--config", str(EXAMPLES / name), "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["spec"]["task"] == task


@pytest.mark.slow
def test_imports_stay_light() -> None:
    """The CLI loads no heavy library before a command needs it, and a worker only what
    its task needs: nothing of scikit-learn, SciPy, pandas or matplotlib at start."""
    heavy = ("torch", "sklearn", "scipy", "pandas", "matplotlib", "dask", "pyarrow")
    probe = "import sys, {m}; print(' '.join(n for n in {heavy!r} if n in sys.modules))"
    cases = (
        ("dmlbench.cli.app", set()),
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


def test_help_shows_no_value_beside_a_flag(dmlbench) -> None:
    code, out, _ = dmlbench("results", "--help")
    assert code == 0 and "--json" in out and "--help" in out
    assert "<bool>" not in out  # typer's default: as if a flag took a value


def test_version_comes_from_the_package_metadata(dmlbench) -> None:
    from importlib.metadata import version

    code, out, _ = dmlbench("--version")
    assert code == 0 and out.strip() == f"dmlbench {version('dmlbench')}"
