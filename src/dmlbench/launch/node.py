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

NODES_DIR = "nodes"  # in a multi-node run's folder: node<i>/, each node's own store


def node_args(spec: RunSpec, spec_file: str, endpoint: str, run_id: str, store: str) -> list[str]:
    """``dmlbench``'s arguments (after the program) for one node of ``spec``'s job."""
    return ["run", spec.task, "--config", spec_file, "--nnodes", str(spec.nodes),
            "--nproc-per-node", str(spec.per_node), "--rdzv-endpoint", endpoint,
            "--rdzv-id", run_id, "--rdzv-timeout", str(rendezvous_timeout_s(spec)),
            "--store", store, "--quiet", "--json"]  # fmt: skip


def rendezvous_timeout_s(spec: RunSpec) -> int:
    """How long a node waits for the others: as long as a stalled worker is given."""
    return int(max(60, spec.stall_timeout_s * 2))


def job_spec(spec: RunSpec) -> dict[str, Any]:
    """The spec every node of a job on real hosts reads: no emulated network (the hosts'
    own network is the one measured)."""
    data = spec.to_json_dict()
    data.pop("network")
    return data


def node_folder(run_dir: Path, index: int) -> Path:
    """Node ``index``'s own store inside a multi-node run's folder (or inside the store
    a node under srun was given)."""
    return run_dir / NODES_DIR / f"node{index}"


def node_error(nodes: Iterable[tuple[str, Path]]) -> str | None:
    """The first error a node reported in its outcome file, named as given:
    ``nodes`` is (name, that node's folder of the run)."""
    from dmlbench.results.rundir import OUTCOME_FILE, read_json

    for name, folder in nodes:
        outcome = read_json(folder / OUTCOME_FILE) or {}
        if outcome.get("error"):
            return f"{name}: {outcome['error']}"
    return None
