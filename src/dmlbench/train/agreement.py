"""Agreement before training: every node of a multi-node job runs the same thing.

Nodes are started by hand or by a scheduler, one command each, so one of them can
hold another spec (an edited config file, a different ``--set``) or another
dmlbench. Each node's first worker publishes what it holds in the job's own store
(JSON, never pickles); every worker compares all nodes with node 0 and the job is
refused before its first step, in one line that says what differs.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import dmlbench
from dmlbench.errors import SpecError
from dmlbench.spec.overrides import flatten

# Where each node finds its data may differ between machines; what runs may not.
LOCAL_KEYS = ("data_dir", "download")
KEY = "dmlbench/agreement/node-{}"
MAX_LISTED = 3


def node_view(spec: dict[str, Any], address: str) -> dict[str, Any]:
    """What a node publishes: version, the spec minus its local keys, its address."""
    agreed = {k: v for k, v in spec.items() if k not in LOCAL_KEYS}
    return {"version": dmlbench.__version__, "spec": agreed, "address": address}


def first_differences(views: list[dict[str, Any]]) -> str | None:
    """How the nodes' views differ from node 0's, in one line; None when they agree."""
    reference = views[0]
    for node, view in enumerate(views[1:], start=1):
        if view["version"] != reference["version"]:
            return (
                f"node {node} runs dmlbench {view['version']}, node 0 runs "
                f"{reference['version']}; install one version on every node"
            )
        mine, theirs = flatten(view["spec"]), flatten(reference["spec"])
        differ = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
        if differ:
            listed = "; ".join(
                f"node {node} has {key}={_show(mine.get(key))}, node 0 has {_show(theirs.get(key))}"
                for key in differ[:MAX_LISTED]
            )
            more = f" (and {len(differ) - MAX_LISTED} more)" if len(differ) > MAX_LISTED else ""
            return f"the nodes hold different specs: {listed}{more}; give every node the same"
    return None


def _show(value: Any) -> str:
    if value is None:
        return "(unset)"
    return json.dumps(value) if isinstance(value, str) else str(value)


def agree(spec: dict[str, Any], store: Any, address: str, timeout_s: float) -> list[dict[str, Any]]:
    """Publish this node's view (its first worker), wait for every node's, and refuse
    (:class:`SpecError`) when they differ. Returns the views, node by node."""
    node = int(os.environ.get("GROUP_RANK", 0))
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", 1))
    if int(os.environ.get("LOCAL_RANK", 0)) == 0:
        store.set(KEY.format(node), json.dumps(node_view(spec, address)))
    keys = [KEY.format(k) for k in range(nodes)]
    store.wait(keys, timedelta(seconds=timeout_s))
    views = [json.loads(store.get(key)) for key in keys]
    problem = first_differences(views)
    if problem:
        raise SpecError(problem)
    return views
