"""An emulated cluster on one machine: one network namespace and one agent per node.

``dmlbench run TASK --nodes 2 --nproc-per-node 2 --network 1gbit`` builds the
namespaces (:class:`~dmlbench.netem.topology.Topology`, one per node, shaped links to
a bridge) and starts in each the very command a user runs on a real machine::

    dmlbench run --config node-spec.json --nnodes 2 --nproc-per-node 2 \\
        --rdzv-endpoint <node 0's address>:29400 --rdzv-id <run id> --store <node's own>

Each node agent is torch's elastic agent behind dmlbench's multi-node path, with its
own results store (``nodes/node<i>/`` in the run folder, like a machine's own disk);
node 0 hosts the rendezvous. Nothing here is special-cased: the agents meet, agree on
the spec and train exactly as on separate hosts. This process only watches them:

- it records the run in the user's store from the node that held rank 0;
- a node agent that dies (killed, crashed) fails the run naming that node, and the
  others are stopped if they have not stopped on their own within ``NODE_GRACE_S``;
- Ctrl-C, SIGINT or SIGTERM to this process (or a signal that reached the agents
  alone) stops every agent (they stop their workers) and the run is ``interrupted``;
- the agents die with this process (``PR_SET_PDEATHSIG``), the namespaces are removed
  on every exit, and by the next run if this process was killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlbench.heartbeat import AGENT_FILE, read_heartbeat
from dmlbench.launch.lifecycle import Attempt, Launcher, OpenedRun, prepare_data
from dmlbench.launch.node import NODE_SPEC_FILE, job_spec, node_args, node_error
from dmlbench.listeners import RENDEZVOUS_PORT
from dmlbench.netem.host import check_can_emulate, preflight
from dmlbench.netem.profiles import ResolvedNetwork
from dmlbench.netem.topology import Topology
from dmlbench.results import EVENTS_FILE, ResultsStore
from dmlbench.results.rundir import NODES_DIR, node_folder, node_run_dirs, write_json
from dmlbench.spec import RunSpec

# After one node's agent dies, how long the others get to notice (their workers lose a
# peer and fail) and record the run before they are stopped.
NODE_GRACE_S = 20.0
STOP_WAIT_S = 15.0  # after SIGTERM, before SIGKILL
# A node lost: the others' workers may wait on it inside a collective, where SIGTERM
# reaches their agents only once it returns; what the run reached is in its event log.
LOST_STOP_WAIT_S = 5.0
INTERRUPTED = 130  # a node's `dmlbench run` stopped by SIGINT or SIGTERM
UNSHAPED = ResolvedNetwork(name="unshaped", rate_bps=None)


def node_spec(spec: RunSpec) -> dict[str, Any]:
    """What every node runs: the spec without the emulated network (that is outside
    the nodes), with the threads the workers get on this one shared machine."""
    data = job_spec(spec)
    cores = len(os.sched_getaffinity(0))
    data["threads_per_worker"] = spec.threads_per_worker or max(1, cores // spec.workers)
    return data


@dataclass
class NodeAgent:
    """One node's ``dmlbench run`` process, in the node's namespace."""

    index: int
    namespace: str
    address: str
    folder: Path  # the node's own store
    process: subprocess.Popen[bytes] | None = None
    exit_seen: float | None = field(default=None)

    def start(self, command: list[str], log: Path) -> None:
        launcher = os.getpid()
        namespace = self.namespace

        def in_node() -> None:  # runs in the child, before exec
            from dmlbench.netem.namespaces import enter_namespace
            from dmlbench.system import die_with_parent

            die_with_parent(launcher)
            enter_namespace(namespace)

        with log.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=in_node,
            )

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(number)

    def run_dir(self, run_id: str) -> Path:
        return self.folder / "runs" / run_id

    def describe(self) -> str:
        return f"node {self.index} ({self.address})"


def _agent_command(
    spec: RunSpec, spec_file: Path, endpoint: str, run_id: str, folder: Path
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dmlbench",
        *node_args(spec, str(spec_file), endpoint, run_id, str(folder)),
    ]


def _frozen(agent: NodeAgent, now: float, timeout_s: float) -> str | None:
    """Why ``agent`` counts as lost when its heartbeat is older than ``timeout_s``."""
    beat = read_heartbeat(agent.folder / AGENT_FILE)
    if beat is None or agent.returncode is not None:
        return None  # not started yet (imports), or it has exited: the exit says more
    silent = now - float(beat.get("time", now))
    if silent <= timeout_s:
        return None
    return (
        f"lost {agent.describe()}: its agent stalled: no heartbeat for {silent:.0f} s "
        f"(the process is stopped or frozen); stall_timeout_s={timeout_s:g}"
    )


def _watch(agents: list[NodeAgent], stall_timeout_s: float = 60.0) -> str | None:
    """Wait for every agent to exit. Returns the error when a node was lost (its agent
    died by a signal, exited without a result, or its heartbeat stopped for
    ``stall_timeout_s``); once one agent has exited or is lost, the others get
    ``NODE_GRACE_S`` to end on their own before they are stopped."""
    lost: str | None = None
    deadline: float | None = None
    while any(agent.returncode is None for agent in agents):
        if lost is None:
            now = time.time()
            frozen = [(a, why) for a in agents if (why := _frozen(a, now, stall_timeout_s))]
            if frozen:  # a frozen agent never exits (nor heeds SIGTERM): stop every node now
                frozen[0][0].signal(signal.SIGKILL)
                lost = frozen[0][1]
                _stop(agents, LOST_STOP_WAIT_S)
                break
        for agent in agents:
            code = agent.returncode
            if code is None or agent.exit_seen is not None:
                continue
            agent.exit_seen = time.monotonic()
            deadline = deadline or agent.exit_seen + NODE_GRACE_S
            if lost is None and code < 0:
                lost = (
                    f"lost {agent.describe()}: its agent was killed ({signal.Signals(-code).name})"
                )
            elif lost is None and code not in (0, 1, 130):
                lost = f"lost {agent.describe()}: its agent exited with code {code}"
        if deadline is not None and time.monotonic() > deadline:
            _stop([agent for agent in agents if agent.returncode is None], LOST_STOP_WAIT_S)
        time.sleep(0.1)
    return lost


def _stop(agents: list[NodeAgent], wait_s: float = STOP_WAIT_S) -> None:
    """SIGTERM (the agents stop their workers), then SIGKILL what is left after
    ``wait_s``."""
    for agent in agents:
        agent.signal(signal.SIGTERM)
    end = time.monotonic() + wait_s
    for agent in agents:
        if agent.process is None:
            continue
        try:
            agent.process.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            agent.process.kill()
            agent.process.wait()


class ClusterLauncher(Launcher):
    """``spec.nodes`` emulated nodes of ``spec.per_node`` workers (see the module's
    docstring)."""

    unfinished = "the nodes exited without finishing the run"
    sigterm_interrupts = True

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.network = spec.network.resolve() if spec.network.enabled else UNSHAPED
        self.agents: list[NodeAgent] = []
        self.run: OpenedRun | None = None

    def prepare(self, store: ResultsStore) -> dict[str, Any]:
        check_can_emulate()  # namespaces need root, shaped or not
        preflight(self.network)
        prepare_data(self.spec)
        return {}

    def event_logs(self, run: OpenedRun) -> list[Path]:
        folders = node_run_dirs(run.run_dir, run.run_id, self.spec.nodes)
        return [folder / EVENTS_FILE for folder in folders]

    def start(self, run: OpenedRun, held: contextlib.ExitStack) -> None:
        spec, self.run = self.spec, run
        spec_file = run.run_dir / NODE_SPEC_FILE
        write_json(spec_file, node_spec(spec))
        topology = held.enter_context(Topology(spec.nodes, self.network, record_to=run.run_dir))
        held.callback(self.stop)  # inside the namespaces' lifetime: nothing outlives them
        endpoint = f"{topology.address(0)}:{RENDEZVOUS_PORT}"
        for index, namespace in enumerate(topology.namespaces):
            folder = node_folder(run.run_dir, index)
            folder.mkdir(parents=True)
            agent = NodeAgent(index, namespace, topology.address(index), folder)
            agent.start(
                _agent_command(spec, spec_file, endpoint, run.run_id, folder),
                run.run_dir / NODES_DIR / f"node{index}.log",
            )
            self.agents.append(agent)

    def wait(self, attempt: Attempt) -> None:
        assert self.run is not None
        agents, run_id = self.agents, self.run.run_id
        lost = _watch(agents, self.spec.stall_timeout_s)
        if lost:
            attempt.error = f"{lost}; the other nodes were stopped"
        elif all(agent.returncode == 0 for agent in agents):
            attempt.status = ""
        elif all(agent.returncode in (0, INTERRUPTED) for agent in agents):
            # a signal reached the agents alone (none failed: the ones a failed node
            # leaves behind are stopped with SIGTERM too, and that run is failed)
            named = [a.describe() for a in agents if a.returncode == INTERRUPTED]
            attempt.status = "interrupted"
            attempt.error = f"interrupted: {', '.join(named)} stopped on a signal"
        else:
            reported = node_error((a.describe(), a.run_dir(run_id)) for a in agents)
            attempt.error = reported or (
                f"a node failed; see its log in {self.run.run_dir / NODES_DIR}"
            )

    def stop(self) -> None:
        _stop([agent for agent in self.agents if agent.returncode is None])

    def settled(self, attempt: Attempt, holder: int | None) -> None:
        attempt.summary.emulated_nodes = True
        if holder is not None:
            attempt.summary.rank0_node = holder
