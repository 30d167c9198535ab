"""The command one node of a multi-node job runs, the same on every node.

An emulated cluster (:mod:`dmlbench.launch.cluster`), a Slurm job and a Kubernetes job
all start exactly this on each host: ``dmlbench run`` with torchrun's rendezvous flags
and the resolved spec in a file, so every node trains the very spec the user resolved.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dmlbench.spec import RunSpec

NODE_SPEC_FILE = "node-spec.json"  # the spec every node of a job runs, in its folder


def node_args(spec: RunSpec, spec_file: str, endpoint: str, run_id: str, store: str) -> list[str]:
    """``dmlbench``'s arguments (after the program) for one node of ``spec``'s job."""
    return [
        "run",
        spec.task,
        "--config",
        spec_file,
        "--nnodes",
        str(spec.nodes),
        "--nproc-per-node",
        str(spec.per_node),
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        run_id,
        "--rdzv-timeout",
        str(rendezvous_timeout_s(spec)),
        "--store",
        store,
        "--quiet",
        "--json",
    ]


def rendezvous_timeout_s(spec: RunSpec) -> int:
    """How long a node waits for the others: as long as a stalled worker is given."""
    return int(max(60, spec.stall_timeout_s * 2))


def job_spec(spec: RunSpec) -> dict[str, Any]:
    """The spec every node of a job on real hosts reads: no emulated network (the hosts'
    own network is the one measured)."""
    data = spec.to_json_dict()
    data.pop("network")
    return data


def node_error(nodes: Iterable[tuple[str, Path]]) -> str | None:
    """The error that names the cause, of those the nodes reported in their outcome
    files, named as given: ``nodes`` is (name, that node's folder of the run).

    A fault on one node shows on the others too: a worker stopped on node 1 is "no
    heartbeat" there, while node 0's workers wait on it ("no progress") or lose it
    ("lost node 1"). The frozen one is the cause, then a stuck one, then any failure
    but a lost peer; of equals, the first node's."""
    from dmlbench.results.rundir import OUTCOME_FILE, read_json

    reported = []
    for order, (name, folder) in enumerate(nodes):
        outcome = read_json(folder / OUTCOME_FILE) or {}
        error = outcome.get("error") if isinstance(outcome, dict) else None
        if isinstance(error, str) and error:
            reported.append((_as_cause(error), order, f"{name}: {error}"))
    return min(reported)[2] if reported else None


def _as_cause(error: str) -> int:
    """How surely ``error`` names the cause of a multi-node failure (lower: surer)."""
    if "no heartbeat" in error:
        return 0
    if "stalled" in error:
        return 1
    if error.startswith("lost node") or "peer" in error.lower():
        return 3
    return 2
