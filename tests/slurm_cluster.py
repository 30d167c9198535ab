"""A real Slurm for the tests: Debian's munged, slurmctld and two slurmds, each slurmd
in a network namespace of its own with its own host name, so one sbatch job spans two
emulated hosts (root only).

    root namespace: munged (a socket file), slurmctld on the bridge (10.X.255.254)
      ├── namespace n0, host name dmlbench-node0 (10.X.0.1): slurmd
      └── namespace n1, host name dmlbench-node1 (10.X.0.2): slurmd

Every file (configuration, key, state, logs) lives in one temporary folder; nothing in
/etc is touched. ``python tests/slurm_cluster.py`` starts one and waits, to try by hand.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dmlbench.netem.profiles import ResolvedNetwork
from dmlbench.netem.topology import Topology
from dmlbench.system import die_with_parent

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol")
READY_S = 60.0


def _bin(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin")


def missing() -> str | None:
    """Why no test Slurm can start here, or None."""
    if os.geteuid() != 0:
        return "a test Slurm needs root (network namespaces, slurmd)"
    absent = [d for d in DAEMONS if not _bin(d)]
    if absent:
        return f"no {', '.join(absent)}: apt-get install slurm-wlm munge (make test does)"
    return None


@dataclass
class SlurmCluster:
    folder: Path
    conf: Path
    nodes: list[str]  # host names
    addresses: list[str]
    control: str  # the controller's address, on the bridge: reachable from every node
    namespaces: list[str]  # each node's network namespace

    @property
    def env(self) -> dict[str, str]:
        from helpers import COLUMNS  # what the job prints, as wide as every test command

        return {**os.environ, "SLURM_CONF": str(self.conf), "COLUMNS": COLUMNS}

    def command(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        done = subprocess.run(args, capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def job_state(self, job_id: str) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...; gone from the controller's
        memory (MinJobAge) counts as COMPLETED only if its state was last seen so."""
        out = self.command("scontrol", "show", "job", job_id, "-o", check=False)
        for field in out.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return "UNKNOWN"

    def wait(self, job_id: str, timeout: float = 240) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            state = self.job_state(job_id)
            if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "UNKNOWN"):
                return state
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} still {self.job_state(job_id)} after {timeout} s")


def _conf(folder: Path, control: str, nodes: list[str], addresses: list[str], cpus: int) -> str:
    lines = [
        "ClusterName=dmlbench",
        f"SlurmctldHost={socket.gethostname()}({control})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={folder / 'munge.socket'}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}/%n",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder}/slurmd-%n.log",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/builtin",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "MinJobAge=600",
        "KillWait=30",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
    ]
    for name, address in zip(nodes, addresses, strict=True):
        lines.append(f"NodeName={name} NodeAddr={address} CPUs={cpus} State=UNKNOWN")
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def slurm_cluster(folder: Path, nodes: int = 2) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and ``nodes`` slurmds (see the module's docstring);
    everything is stopped and removed on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state").mkdir(exist_ok=True)
    key = folder / "munge.key"
    subprocess.run([str(_bin("mungekey")), "--create", f"--keyfile={key}"], check=True)
    started: list[subprocess.Popen[bytes]] = []
    log = (folder / "daemons.log").open("ab")
    here = os.getpid()

    def orphan_proof() -> None:  # the daemons die with this process, however it ends
        die_with_parent(here)

    try:
        started.append(
            subprocess.Popen(
                [
                    str(_bin("munged")),
                    "--foreground",
                    "--force",
                    f"--key-file={key}",
                    f"--socket={folder / 'munge.socket'}",
                    f"--pid-file={folder / 'munged.pid'}",
                    f"--log-file={folder / 'munged.log'}",
                    f"--seed-file={folder / 'munged.seed'}",
                ],
                stdout=log,
                stderr=log,
                preexec_fn=orphan_proof,
            )
        )
        network = ResolvedNetwork(name="unshaped", rate_bps=None)
        with Topology(nodes, network) as topology:
            names = [f"dmlbench-node{i}" for i in range(nodes)]
            addresses = [topology.address(i) for i in range(nodes)]
            conf = folder / "slurm.conf"
            cpus = max(1, len(os.sched_getaffinity(0)))
            conf.write_text(_conf(folder, topology.hub_address, names, addresses, cpus))
            # slurmd loads a cgroup plugin whatever the task plugins; this machine (as
            # many containers) mounts cgroup v1 under a tmpfs, which autodetection misses
            (folder / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
            env = {**os.environ, "SLURM_CONF": str(conf)}
            controller = [str(_bin("slurmctld")), "-D", "-f", str(conf)]
            started.append(
                subprocess.Popen(
                    controller, env=env, stdout=log, stderr=log, preexec_fn=orphan_proof
                )
            )
            for name, namespace in zip(names, topology.namespaces, strict=True):
                (folder / "spool" / name).mkdir(parents=True, exist_ok=True)
                started.append(
                    subprocess.Popen(
                        [
                            "ip",
                            "netns",
                            "exec",
                            namespace,
                            "unshare",
                            "--uts",
                            "sh",
                            "-c",
                            f"hostname {name} && exec {_bin('slurmd')} -D -f {conf}",
                        ],
                        env=env,
                        stdout=log,
                        stderr=log,
                        preexec_fn=orphan_proof,
                    )
                )
            cluster = SlurmCluster(
                folder, conf, names, addresses, topology.hub_address, list(topology.namespaces)
            )
            _wait_idle(cluster, started)
            try:
                yield cluster
            finally:
                cluster.command("scancel", "--full", "--user=root", check=False)
                for process in reversed(started[1:]):
                    _stop(process)
                del started[1:]
    finally:
        for process in started:
            _stop(process)
        log.close()


def _wait_idle(cluster: SlurmCluster, started: list[subprocess.Popen[bytes]]) -> None:
    end = time.monotonic() + READY_S
    states = ""
    while time.monotonic() < end:
        dead = [p.args for p in started if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a Slurm daemon exited: {dead}; see {cluster.folder}")
        states = cluster.command("sinfo", "--noheader", "--Node", "--format=%N %t", check=False)
        idle = [line for line in states.splitlines() if line.split()[-1:] == ["idle"]]
        if len(idle) == len(cluster.nodes):
            return
        time.sleep(0.5)
    raise RuntimeError(
        f"the Slurm nodes are not idle after {READY_S:.0f} s: {states.strip()}; "
        f"see the logs in {cluster.folder}"
    )


if __name__ == "__main__":
    import signal
    import sys
    import tempfile

    # kill (SIGTERM) stops it as Ctrl-C does: daemons, namespaces and bridge go too
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with slurm_cluster(Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())) as c:
        print(f"export SLURM_CONF={c.conf}  # nodes {c.nodes} at {c.addresses}", flush=True)
        print("Ctrl-C (or kill) stops it and removes what it made", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(3600)
