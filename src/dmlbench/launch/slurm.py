"""Slurm: sbatch scripts from a run spec or a sweep, and runs inside an allocation.

Three ways in, one path:

- ``dmlbench slurm TASK|SWEEP.yaml [--nodes N] ... [--submit]`` writes an sbatch script
  (:func:`sbatch_script`) whose one command is ``dmlbench run`` (or ``dmlbench sweep``)
  with the resolved spec embedded, and submits it with ``--submit``.
- ``dmlbench run`` in the batch script of an allocation of several nodes (a generated
  script, or one written by hand) is the job's launcher
  (:class:`~dmlbench.launch.srun.SlurmLauncher`): it records the run in the store and
  starts one srun task per node.
- ``dmlbench run`` under srun across several nodes is one node of such a job: the node
  count, the rendezvous endpoint (the first host of the step's node list) and the id
  come from Slurm's environment (:class:`SlurmJob`), and the node keeps its part in
  ``STORE/nodes/node<SLURM_NODEID>`` (:func:`~dmlbench.launch.node.node_folder`).

This module reads Slurm (its environment, ``scontrol``) and writes sbatch scripts; it
imports no torch, so that ``dmlbench run`` decides its launch path, and ``dmlbench
slurm`` writes a script, without it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlbench.errors import DmlbenchError
from dmlbench.listeners import RENDEZVOUS_PORT


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
        return rendezvous_endpoint(self.hosts()[0])


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


def rendezvous_endpoint(host: str) -> str:
    """Where a job's nodes meet when ``host`` hosts the rendezvous: its address (Slurm's
    NodeAddr) and torch's rendezvous port."""
    return f"{node_address(host)}:{RENDEZVOUS_PORT}"


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
