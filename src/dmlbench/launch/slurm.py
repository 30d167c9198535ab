"""Slurm: sbatch scripts from a run spec or a sweep, and runs inside an allocation.

Three ways in, one path:

- ``dmlbench slurm TASK|SWEEP.yaml [--nodes N] ... [--submit]`` writes an sbatch script
  (:func:`sbatch_script`) whose one command is ``dmlbench run`` (or ``dmlbench sweep``)
  with the resolved spec embedded, and submits it with ``--submit``.
- ``dmlbench run`` in the batch script of an allocation of several nodes (a generated
  script, or one written by hand) is the job's launcher (:class:`SlurmLauncher`): it records
  the run in the store, starts one srun task per node running the node command every
  multi-node path shares (:func:`dmlbench.launch.node.node_args`), with the rendezvous
  on the first node's address, and records the result from the node that held rank 0.
- ``dmlbench run`` under srun across several nodes is one node of such a job: the node
  count, the rendezvous endpoint (the first host of the step's node list) and the id
  come from Slurm's environment (:class:`SlurmJob`), and the node keeps its part in
  ``STORE/nodes/node<SLURM_NODEID>`` (:func:`~dmlbench.launch.node.node_folder`).

Slurm's ends map to the run's status: a node that fails (srun's non-zero exit) fails
the run, naming the node; ``scancel`` (SIGTERM to the batch step) stores it as
``interrupted``; and the launcher's exit status is the job's.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlbench.errors import DmlbenchError
from dmlbench.launch.lifecycle import Attempt, Launcher, OpenedRun, prepare_data
from dmlbench.launch.node import (
    NODE_SPEC_FILE,
    NODES_DIR,
    job_spec,
    node_args,
    node_error,
    node_run_dirs,
)
from dmlbench.launch.rendezvous import DEFAULT_PORT
from dmlbench.results.events import EVENTS_FILE
from dmlbench.results.rundir import write_json

if TYPE_CHECKING:
    from dmlbench.results import ResultsStore
    from dmlbench.spec import RunSpec

STOP_WAIT_S = 15.0  # after SIGTERM to srun (it signals the tasks), before SIGKILL


@dataclass(frozen=True)
class SlurmJob:
    """Where this process runs in Slurm: the allocation, or one task of a job step."""

    job_id: str
    nodes: int  # of the step (under srun) or of the allocation (in the batch script)
    nodelist: str  # Slurm's compressed form: node[0-3]
    node_id: int  # this node's index in the step or allocation
    step_id: str | None  # None in the batch script

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SlurmJob | None:
        env = os.environ if env is None else env
        job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if not job:
            return None
        step = env.get("SLURM_STEP_ID") or None
        kind = "STEP" if step is not None else "JOB"
        nodes = env.get(f"SLURM_{kind}_NUM_NODES") or env.get("SLURM_NNODES") or "1"
        nodelist = env.get(f"SLURM_{kind}_NODELIST") or env.get("SLURM_NODELIST") or ""
        return cls(job, int(nodes), nodelist, int(env.get("SLURM_NODEID") or 0), step)

    @property
    def in_step(self) -> bool:
        return self.step_id is not None

    @property
    def rendezvous_id(self) -> str:
        return f"slurm-{self.job_id}" + (f".{self.step_id}" if self.in_step else "")

    def hosts(self) -> list[str]:
        return hostnames(self.nodelist)

    def endpoint(self) -> str:
        """The first node's address and torch's rendezvous port."""
        return f"{node_address(self.hosts()[0])}:{DEFAULT_PORT}"


def _scontrol(*args: str) -> str:
    if shutil.which("scontrol") is None:
        raise DmlbenchError("Slurm's scontrol is not on PATH here; run inside a Slurm job")
    done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise DmlbenchError(f"scontrol {' '.join(args)}: {done.stderr.strip()[:200]}")
    return done.stdout


def hostnames(nodelist: str) -> list[str]:
    """Slurm's node list expanded (``scontrol show hostnames``), in order."""
    hosts = _scontrol("show", "hostnames", nodelist).split()
    if not hosts:
        raise DmlbenchError(f"Slurm's node list {nodelist!r} names no host")
    return hosts


def node_address(name: str) -> str:
    """The address Slurm reaches node ``name`` at (its NodeAddr), or the name itself."""
    try:
        shown = _scontrol("show", "node", name, "--oneliner")
    except DmlbenchError:
        return name
    for field in shown.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1] or name
    return name


class SlurmLauncher(Launcher):
    """The first ``spec.nodes`` nodes of this allocation, one srun task per node, each
    a node of the job (see the module's docstring)."""

    unfinished = "the nodes exited without finishing the run"
    sigterm_interrupts = True  # scancel, or the job's time limit

    def __init__(self, spec: RunSpec, job: SlurmJob) -> None:
        self.spec, self.job = spec, job
        self.hosts: list[str] = []
        self.step: list[subprocess.Popen[bytes]] = []
        self.run: OpenedRun | None = None

    def prepare(self, store: ResultsStore) -> dict[str, Any]:
        spec = self.spec
        if spec.network.enabled:
            raise DmlbenchError(
                "--network emulates a cluster on one machine; in a Slurm job "
                "the nodes' own network is measured: drop it"
            )
        hosts = self.job.hosts()
        if spec.nodes > len(hosts):
            raise DmlbenchError(
                f"the spec asks for {spec.nodes} nodes but this Slurm job has "
                f"{len(hosts)}: sbatch --nodes {spec.nodes}"
            )
        self.hosts = hosts[: spec.nodes]
        prepare_data(spec)
        return {}

    def folders(self, run: OpenedRun) -> list[Path]:
        """Each node's folder of this run, in SLURM_NODEID order (srun's --nodelist)."""
        return node_run_dirs(run.run_dir, run.run_id, self.spec.nodes)

    def event_logs(self, run: OpenedRun) -> list[Path]:
        return [folder / EVENTS_FILE for folder in self.folders(run)]

    @staticmethod
    def srun_log(run: OpenedRun) -> Path:
        return run.run_dir / NODES_DIR / "srun.log"

    def start(self, run: OpenedRun, held: contextlib.ExitStack) -> None:
        spec, self.run = self.spec, run
        write_json(run.run_dir / NODE_SPEC_FILE, job_spec(spec))
        log = self.srun_log(run)
        log.parent.mkdir(parents=True, exist_ok=True)
        endpoint = f"{node_address(self.hosts[0])}:{DEFAULT_PORT}"
        cpus = os.environ.get("SLURM_CPUS_PER_TASK")
        command = [
            "srun",
            f"--nodes={spec.nodes}",
            f"--ntasks={spec.nodes}",
            "--ntasks-per-node=1",
            f"--nodelist={','.join(self.hosts)}",
            "--kill-on-bad-exit=1",
            *([f"--cpus-per-task={cpus}"] if cpus else []),
            sys.executable,
            "-m",
            "dmlbench",
            *node_args(
                spec, str(run.run_dir / NODE_SPEC_FILE), endpoint, run.run_id, str(run.run_dir)
            ),
        ]
        with log.open("ab") as out:
            self.step.append(
                subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                )
            )

    def wait(self, attempt: Attempt) -> None:
        assert self.run is not None
        code = self.step[0].wait()
        if code == 0:
            attempt.status = ""
            return
        # srun names the task that failed first; the nodes say what they saw
        log = self.srun_log(self.run)
        folders = self.folders(self.run)
        named = [(f"node {i} ({host})", folders[i]) for i, host in enumerate(self.hosts)]
        said = [_srun_says(log), node_error(named)]
        attempt.error = "; ".join(s for s in said if s) or (
            f"srun exited with status {code}; see {log}"
        )

    def stop(self) -> None:
        for process in self.step:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # srun passes it to every task
                try:
                    process.wait(STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    def settled(self, attempt: Attempt, holder: int | None) -> None:
        attempt.summary.slurm_job = self.job.job_id
        if holder is not None:
            attempt.summary.rank0_node = holder


SRUN_ERROR = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.+)")


def _srun_says(log: Path) -> str | None:
    """srun's own line about the first task that failed: its node, task and how."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    found = SRUN_ERROR.search(text)
    if found is None:
        return None
    host, task, how = found.groups()
    return f"node {host} (task {task}): {how.strip()}"


# -- sbatch scripts ---------------------------------------------------------------------


# What sbatch accepts (a directive's value is one word of its line; anything else,
# above all a line break, would end the #SBATCH line and run the rest as shell).
PARTITIONS = re.compile(r"[A-Za-z0-9_.-]{1,64}(,[A-Za-z0-9_.-]{1,64}){0,15}")
ACCOUNT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
JOB_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,128}")
# sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds; or no limit
TIME = re.compile(
    r"\d{1,9}(:\d{1,2}){0,2}|\d{1,5}-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|INFINITE", re.IGNORECASE
)
LOG_PATH = re.compile(r"[^\s\"'\\\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class SbatchOptions:
    """The ``#SBATCH`` directives of a generated script; every value is checked against
    what sbatch accepts, so nothing given here can become shell."""

    nodes: int = 1
    cpus_per_task: int | None = None  # CPUs for each node's task (its workers share them)
    gpus_per_node: int = 0
    partition: str | None = None
    time: str | None = None  # Slurm's forms: minutes, HH:MM:SS, D-HH:MM
    account: str | None = None
    array: int | None = None  # a job array of this many tasks (sweeps)
    job_name: str = "dmlbench"

    def __post_init__(self) -> None:
        from dmlbench.names import shorten

        checks = [
            (
                "--partition",
                self.partition,
                PARTITIONS,
                "letters, digits, '_', '.' and '-' (several partitions: a,b)",
            ),
            (
                "--time",
                self.time,
                TIME,
                "Slurm's forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
            ),
            ("--account", self.account, ACCOUNT, "letters, digits, '_', '.' and '-'"),
            ("the job name", self.job_name, JOB_NAME, "letters, digits, '_', '.', '+' and '-'"),
        ]
        for what, value, pattern, allowed in checks:
            if value is not None and not pattern.fullmatch(value):
                raise DmlbenchError(
                    f"{what} {shorten(value)!r} is not what sbatch accepts: {allowed}"
                )
        for what, count in (
            ("--nodes", self.nodes),
            ("--array", self.array),
            ("--cpus-per-task", self.cpus_per_task),
        ):
            if count is not None and count < 1:
                raise DmlbenchError(f"{what} must be at least 1")

    def directives(self, log_dir: Path) -> list[str]:
        from dmlbench.names import shorten

        if not LOG_PATH.fullmatch(str(log_dir)):
            raise DmlbenchError(
                f"the store path {shorten(str(log_dir))!r} holds a space, a "
                "quote or a control character, which an #SBATCH --output "
                "line cannot carry: choose another --store"
            )
        wanted: list[tuple[str, Any]] = [
            ("job-name", self.job_name),
            ("nodes", self.nodes),
            ("ntasks-per-node", 1),
            ("cpus-per-task", self.cpus_per_task),
            ("gpus-per-node", self.gpus_per_node or None),
            ("partition", self.partition),
            ("time", self.time),
            ("account", self.account),
            ("array", f"0-{self.array - 1}" if self.array else None),
            ("output", str(log_dir / ("%x-%A_%a.out" if self.array else "%x-%j.out"))),
        ]
        return [f"#SBATCH --{key}={value}" for key, value in wanted if value is not None]


SETUP_MAX_BYTES = 64 << 10  # a --setup-file: module loads and exports, not a program


def setup_lines(lines: Sequence[str], file: Path | None) -> list[str]:
    """The shell lines a job runs before dmlbench (``module load``, ``export NCCL_…``, a
    container's activation): ``--setup`` lines, then a ``--setup-file``'s. They are the
    user's own shell, kept as given; each is one line without control characters (a
    tab aside), so none can break out of the script around it."""
    from dmlbench.files import read_bounded
    from dmlbench.names import one_line

    given = list(lines)
    if file is not None:
        data = read_bounded(file, SETUP_MAX_BYTES, "--setup-file")
        try:
            given += data.decode().splitlines()
        except UnicodeDecodeError:
            raise DmlbenchError(f"--setup-file {file} is not UTF-8 text") from None
    for line in given:
        one_line(line.replace("\t", " "), "a --setup line")
        if SCRIPT_MARKER in line:
            raise DmlbenchError(f"a --setup line holds the text {SCRIPT_MARKER}; rename it")
    return given


SCRIPT_MARKER = "DMLBENCH_EOF"  # ends the spec embedded in a script


def sbatch_script(
    command: list[str],
    embedded: str,
    suffix: str,
    options: SbatchOptions,
    log_dir: Path,
    setup: Sequence[str] = (),
) -> str:
    """A batch script that runs the ``setup`` lines (see :func:`setup_lines`), writes
    ``embedded`` (the resolved spec, or the sweep file) to a temporary file, and runs
    ``command`` with ``{file}`` standing for that file.

    The file is in the script, so the script alone is the job: sbatch copies it to the
    node that runs it, and nothing but the store must be on a shared file system."""
    marker = SCRIPT_MARKER
    if marker in embedded:
        raise DmlbenchError(f"the spec holds the text {marker}; rename what holds it")
    words = " ".join('"$spec"' if w == "{file}" else shlex.quote(w) for w in command)
    return "\n".join(
        [
            "#!/bin/bash",
            "# Written by `dmlbench slurm`; submit with sbatch. One task per node: the",
            "# launcher on the first node starts the others with srun (dmlbench.launch.slurm).",
            *options.directives(log_dir),
            # before `set -u`: environment modules' scripts read unset variables
            *(["# --setup: the cluster's own lines, before dmlbench", *setup] if setup else []),
            "set -euo pipefail",
            f'spec="$(mktemp --suffix={suffix})"',
            "trap 'rm -f \"$spec\"' EXIT",
            f"cat > \"$spec\" <<'{marker}'",
            embedded.rstrip("\n"),
            marker,
            # not exec: the trap removes the file; bash passes scancel's SIGTERM on to it
            f"{words} &",
            "child=$!",
            "trap 'kill -TERM $child 2>/dev/null; wait $child' TERM",
            "wait $child",
            "",
        ]
    )


def submit(script: Path) -> str:
    """``sbatch --parsable script``: the job id."""
    if shutil.which("sbatch") is None:
        raise DmlbenchError(
            "sbatch is not on PATH: submit from a Slurm login node, or "
            f"copy {script} there and run: sbatch {script}"
        )
    done = subprocess.run(
        ["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise DmlbenchError(f"sbatch refused {script}: {done.stderr.strip()[:300]}")
    return done.stdout.strip().split(";")[0]
