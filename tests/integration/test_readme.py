"""The commands of the README and of every docs page, run as printed, so the docs cannot
drift from the tool.

Every ``dmlbench`` line of their bash blocks and their Python analysis snippets run in
order (the README, then the pages in the site's navigation), in a fresh folder, against
one store. Only the length of a run is
cut (``--set max_steps=...``, smaller messages), which the rules in :func:`shortened`
spell out; the options, tasks, files and order are the README's. Commands that need
root (namespaces and tc) run when the tests run as root. The files they leave in the
folder must be ones git ignores.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from helpers import REPO, write_cifar_binary

README = REPO / "README.md"


def pages() -> list[Path]:
    """The README, then every page of the docs site in its navigation's order."""

    def walk(items: list) -> list[str]:
        found = []
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            found += walk(value) if isinstance(value, list) else [value]
        return found

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    return [README, *(REPO / "docs" / name for name in walk(nav))]


ROOT_OPTIONS = ("--network", "--nodes")  # namespaces and tc need root


MULTI_HOST = "--rdzv-endpoint"  # a job across real hosts: planned, not started, here


SHIPPED = ("examples", "benchmarks")  # folders of the repository the README's lines name


CLUSTER_VERBS = ("slurm", "k8s")  # job files for a scheduler: written, not submitted, here


def in_process(command: str) -> bool:
    """Whether the command runs in this process, through the console script's own entry
    point (as the `dmlbench` fixture calls it): every command but those that need an
    environment of their own (``VAR=value dmlbench ...``), which run in a shell, as
    printed. Runs started in this process fork their workers from its fork server."""
    return shlex.split(command)[0] == "dmlbench"


def readme_commands() -> list[tuple[str, str]]:
    """(page:line, command) for each ``dmlbench`` command of the pages' bash blocks, with
    ``\\`` continuations joined, comments dropped and ``&&`` chains split."""
    return [found for page in pages() for found in page_commands(page)]


def page_commands(page: Path) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    inside, pending, start = False, "", 0
    where = page.relative_to(REPO)
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            inside = line.strip() == "```bash"
            continue
        if not inside or line.lstrip().startswith("#"):
            continue
        text = re.sub(r"\s#\s.*$", "", line).rstrip()
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        for part in (pending + text).split("&&"):
            command = " ".join(part.split())
            if re.match(r"^(\w+=\S+ )*dmlbench ", command):
                found.append((f"{where}:{start}", command))
        pending = ""
    return found


def readme_python() -> list[tuple[str, str]]:
    """The pages' Python snippets but the Dask one (tests/integration/test_dask.py runs
    that)."""
    snippets = []
    for page in pages():
        text = page.read_text()
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
            if "dmlbench.dask" not in match.group(1):
                line = text[: match.start()].count("\n") + 1
                snippets.append((f"{page.relative_to(REPO)}:{line}", match.group(1)))
    return snippets


def shortened(command: str, tasks_run: set[str]) -> str:
    """The command as the test runs it. Training runs for real once per task (the store
    then holds what `results`, `report`, `compare` and `simulate` read), cut to a few
    steps; later `run` lines are resolved and planned (``--dry-run``), as are jobs across
    real hosts. Sweeps run for real, one repeat each; benchmarks with small messages.
    Slurm scripts and Kubernetes manifests are generated to stdout, not submitted."""
    words = shlex.split(command)
    verb = words[words.index("dmlbench") + 1]
    if verb == "bench" and words[words.index("bench") + 1] == "curve":  # the last one counts
        return command + " --local-batch 2,4 --steps 1 --warmup 0"
    if verb == "bench":
        return command + " --max-bytes 256KiB --repeats 3"  # enough to measure bandwidth
    if verb == "sweep" and "--plan" not in words:
        return command + " --repeats 1 --set max_steps=30"
    if verb in CLUSTER_VERBS:  # generated, printed: no cluster to submit to here
        if "--out" in words:
            del words[words.index("--out") : words.index("--out") + 2]
        return shlex.join(w for w in words if w != "--submit")
    if verb != "run" or "--dry-run" in words:
        return command
    after = words[words.index("run") + 1 :]
    task = after[0] if after and not after[0].startswith("-") else None  # else the default
    if task is None or task in tasks_run or MULTI_HOST in words or "," in command:
        return command + " --dry-run"  # a path a real run above already took
    tasks_run.add(task)
    if task == "cifar10-resnet20":  # a tiny CIFAR-10 in the official layout
        if "--data-dir" not in words:  # else the official download
            command += " --data-dir ../shared/data/cifar10"
        return command + " --set partial_data=true --set max_steps=2"
    if task.startswith("imagenet-"):  # a ResNet-50 step at batch 32 takes seconds here
        return (
            command + " --set recipe.local_batch=2 --set max_steps=2 --set warmup_steps_excluded=1"
        )
    if "max_steps=" in command:  # the page already runs it short
        return command
    return command + " --set max_steps=30"


# A guard against a hang, not a speed limit: the tuning page's sweep of 18 runs took
# over 300 s beside a 2-core CPU hog.
COMMAND_TIMEOUT_S = 1500


def _run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        shell=True,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


def test_the_readme_lists_the_commands_this_test_runs() -> None:
    assert len(pages()) == len(list((REPO / "docs").glob("*.md"))) + 1  # every page
    commands = [c for _, c in readme_commands()]
    assert "dmlbench tasks" in commands and len(commands) >= 25
    assert any(c.startswith("PYTHONPATH=examples dmlbench run") for c in commands)
    assert all("#" not in c and "\\" not in c for c in commands)
    assert readme_python(), "the analysis snippet"


def test_every_readme_command_runs_as_printed(
    tmp_path: Path, dmlbench, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"  # the README's folder: examples/ and benchmarks/ here,
    work.mkdir()  # ../shared/data beside
    for shipped in SHIPPED:
        (work / shipped).symlink_to(REPO / shipped)
    write_cifar_binary(tmp_path / "shared" / "data" / "cifar10", per_batch=8)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "COLUMNS": "120",
    }
    env.pop("DMLBENCH_STORE", None)
    root = os.geteuid() == 0
    failures, skipped, no_gpu, took, done_before, tasks_run = [], [], [], [], set(), set()
    for line, printed in readme_commands():
        if printed in done_before:
            continue  # the README repeats a command: once is enough
        done_before.add(printed)
        command = shortened(printed, tasks_run)
        words = command.split()
        real = "--dry-run" not in words and "--plan" not in words
        needs_root = any(o in words for o in ROOT_OPTIONS) or "network." in command
        if needs_root and real and not root:
            skipped.append(line)
            continue
        on_gpu = "--device cuda" in command or "device=cuda" in command
        if on_gpu and not torch.cuda.is_available():
            no_gpu.append(line)
            continue
        here = env
        if "RUN_ID" in command:
            ids = sorted(p.name for p in (work / "dmlbench-results" / "runs").iterdir())
            command = command.replace("RUN_ID", ids[0])
            if "--import" in words:  # a run the store missed: one another store lacks
                here = {**env, "DMLBENCH_STORE": str(tmp_path / "another-store")}
        started = time.monotonic()
        if in_process(command):
            with monkeypatch.context() as inside:
                inside.chdir(work)
                inside.delenv("DMLBENCH_STORE", raising=False)
                if "DMLBENCH_STORE" in here:
                    inside.setenv("DMLBENCH_STORE", here["DMLBENCH_STORE"])
                code, out, err = dmlbench(*shlex.split(command)[1:])
            done = subprocess.CompletedProcess(command, code, out, err)
        else:
            done = _run(command, work, here)
        took.append((time.monotonic() - started, line))
        if done.returncode != 0 or "Traceback" in done.stderr:
            failures.append(f"{line}: {command}\n{(done.stderr or done.stdout)[-600:]}")
    for line, snippet in readme_python():
        done = subprocess.run(
            [sys.executable, "-c", snippet],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if done.returncode != 0:
            failures.append(f"{line}: python snippet\n{done.stderr[-600:]}")
    print("slowest:", ", ".join(f"{line} {s:.0f} s" for s, line in sorted(took)[-6:]))
    assert not failures, "\n\n".join(failures)
    written = sorted(p.name + "/" * p.is_dir() for p in work.iterdir() if p.name not in SHIPPED)
    assert {"dmlbench-results/", "report.html", "figures/", "tables/"} <= set(written)
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *written], cwd=REPO, capture_output=True, text=True
    ).stdout.split()
    assert sorted(ignored) == written, "the README's commands write files git does not ignore"
    if skipped:
        print(f"not root: {skipped} (namespaces and tc) were not run")
    if no_gpu:
        print(f"no GPU: {no_gpu} were not run")
