"""The launcher of a run in the batch script of a Slurm allocation of several nodes: one
srun task per node, each running the node command every multi-node path shares
(:func:`dmlbench.launch.node.node_args`), with the rendezvous on the first node's
address; the run is recorded from the node that held rank 0.

Slurm's ends map to the run's status: a node that fails (srun's non-zero exit) fails
the run, naming the node; ``scancel`` (SIGTERM to the batch step) stores it as
``interrupted``; and the launcher's exit status is the job's. What Slurm says about the
job, and sbatch scripts, are in :mod:`dmlbench.launch.slurm`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlbench.errors import DmlbenchError
from dmlbench.launch.lifecycle import Attempt, Launcher, OpenedRun, prepare_data
from dmlbench.launch.node import NODE_SPEC_FILE, job_spec, node_args, node_error
from dmlbench.launch.slurm import SlurmJob, rendezvous_endpoint
from dmlbench.results.events import EVENTS_FILE
from dmlbench.results.rundir import NODES_DIR, node_run_dirs, write_json

if TYPE_CHECKING:
    from dmlbench.results import ResultsStore
    from dmlbench.spec import RunSpec

STOP_WAIT_S = 15.0  # after SIGTERM to srun (it signals the tasks), before SIGKILL


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
        endpoint = rendezvous_endpoint(self.hosts[0])
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
