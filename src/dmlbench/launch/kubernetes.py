"""Kubernetes manifests for one multi-node run: ``dmlbench k8s TASK --image IMAGE``.

Four objects, applied together (``kubectl apply -f``):

- a **ConfigMap** holding the resolved spec, so every pod trains exactly what was
  resolved here (the file ``--config`` reads);
- a headless **Service** (``clusterIP: None``) that gives each pod of the job a DNS name;
  node 0's, ``<name>-0.<name>``, is the rendezvous endpoint, and it publishes addresses
  before the pods are ready, as a rendezvous needs;
- an **Indexed Job** (``batch/v1``, ``completionMode: Indexed``): one pod per node, its
  completion index the node's rank, each running :func:`dmlbench.launch.node.node_args`,
  the very command a node of an emulated or Slurm job runs. ``backoffLimit: 0``: a failed
  node fails the job, as a failed worker fails the run, and nothing is retried behind
  the user's back. An init container waits until node 0's name resolves.
- or, with ``--pytorchjob``, a Kubeflow **PyTorchJob** instead of the Job and Service
  (the training operator makes its own), for clusters that run the operator.

Results: each pod keeps its store in ``<store>/node-<rank>`` (``<store>/<pod name>``
under a PyTorchJob) on the volume: a PersistentVolumeClaim given by ``--store-claim``,
or the pod's own ``emptyDir``, lost with the pod. The store of the pod that held rank 0
holds the run; the others hold their part of it. These manifests are generated and
checked against the Kubernetes API schema; dmlbench's tests do not run them on a cluster.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dmlbench.errors import DmlbenchError
from dmlbench.launch.node import job_spec, node_args
from dmlbench.listeners import RENDEZVOUS_PORT
from dmlbench.names import shorten

if TYPE_CHECKING:
    from dmlbench.spec import RunSpec

SPEC_DIR = "/etc/dmlbench"
SPEC_FILE = "spec.json"
STORE_DIR = "/store"
DATA_DIR = "/data"
# a DNS label, short enough that "<name>-<index>" (the pods' host names) stays one
NAME = re.compile(r"[a-z]([-a-z0-9]{0,45}[a-z0-9])?")
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # DNS-1123: namespaces, claims
IMAGE = re.compile(r"[^\s\x00-\x1f\x7f]{1,512}")
QUANTITY = re.compile(r"\d+(\.\d+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?")
WAIT_FOR_NAME = (
    "import socket, sys, time\n"
    "for _ in range({tries}):\n"
    "    try:\n"
    "        socket.getaddrinfo(sys.argv[1], None)\n"
    "        sys.exit(0)\n"
    "    except OSError:\n"
    "        time.sleep(2)\n"
    "sys.exit('rendezvous host ' + sys.argv[1] + ' did not resolve')\n"
)


@dataclass(frozen=True)
class PodResources:
    """What each pod (one node) asks for; requests equal limits (a guaranteed pod, so a
    benchmark is not squeezed by its neighbours)."""

    cpus: str | None = None  # a Kubernetes quantity: "4", "3500m"
    memory: str | None = None  # "16Gi"
    gpus: int = 0

    def __post_init__(self) -> None:
        for what, value in (("--cpus", self.cpus), ("--memory", self.memory)):
            if value is not None and not QUANTITY.fullmatch(value):
                raise DmlbenchError(
                    f"{what} {shorten(value)!r} is not a Kubernetes quantity (e.g. 4, 3500m, 16Gi)"
                )
        if self.gpus < 0:
            raise DmlbenchError("--gpus must be 0 or more")

    def to_manifest(self) -> dict[str, Any]:
        wanted: dict[str, Any] = {}
        if self.cpus:
            wanted["cpu"] = self.cpus
        if self.memory:
            wanted["memory"] = self.memory
        if self.gpus:
            wanted["nvidia.com/gpu"] = str(self.gpus)
        return {"requests": dict(wanted), "limits": dict(wanted)} if wanted else {}


# the annotation that holds an Indexed Job's pod's index (its node rank)
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise DmlbenchError(
            f"job name {shorten(name)!r} is not a Kubernetes name: lower-case letters, digits and "
            "'-', starting with a letter, at most 47 characters (give --name)"
        )
    return name


def default_name(task: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", f"dmlbench-{task}".lower())[:47].strip("-")


def manifests(
    spec: RunSpec,
    *,
    image: str,
    name: str,
    namespace: str | None = None,
    resources: PodResources | None = None,
    store_claim: str | None = None,
    data_claim: str | None = None,
    pytorchjob: bool = False,
) -> list[dict[str, Any]]:
    """The objects to apply, in order, for ``spec`` on ``spec.nodes`` pods."""
    check_name(name)
    for what, claim in (
        ("--store-claim", store_claim),
        ("--data-claim", data_claim),
        ("--namespace", namespace),
    ):
        if claim is not None and not LABEL.fullmatch(claim):
            raise DmlbenchError(
                f"{what} {shorten(claim)!r} is not a Kubernetes name: "
                "lower-case letters, digits and '-' (a DNS-1123 label)"
            )
    if not IMAGE.fullmatch(image):
        raise DmlbenchError(
            f"--image {shorten(image)!r} is not an image reference: no spaces or control characters"
        )
    if spec.network.enabled:
        raise DmlbenchError(
            "--network emulates a cluster on one machine; on Kubernetes the "
            "pods' own network is measured: drop it"
        )
    resources = resources or PodResources()
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    labels = {"app.kubernetes.io/name": "dmlbench", "dmlbench/run": name}
    data = {**job_spec(spec), "data_dir": DATA_DIR}  # the claim, or downloaded there
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**meta, "labels": labels},
        "data": {SPEC_FILE: json.dumps(data, indent=1, sort_keys=True) + "\n"},
    }
    endpoint_host = f"{name}-0.{name}"
    args = node_args(
        spec,
        f"{SPEC_DIR}/{SPEC_FILE}",
        f"{endpoint_host}:{RENDEZVOUS_PORT}",
        name,
        f"{STORE_DIR}/node-$(NODE_RANK)",
    )
    container: dict[str, Any] = {
        "name": "node",
        "image": image,
        "command": ["dmlbench"],
        "args": args,
        "env": [
            {
                "name": "NODE_RANK",
                "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}
                },
            },
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "ports": [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}],
        "volumeMounts": [
            {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "store", "mountPath": STORE_DIR},
            # torch's workers share tensors through /dev/shm: 64 MiB by default
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    if resources.to_manifest():
        container["resources"] = resources.to_manifest()
    volumes: list[dict[str, Any]] = [
        {"name": "spec", "configMap": {"name": name}},
        {"name": "store", **_claim_or_empty(store_claim, read_only=False)},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
    ]
    # the datasets: a claim that holds them, or an emptyDir each pod downloads into
    container["volumeMounts"].append(
        {"name": "data", "mountPath": DATA_DIR, "readOnly": bool(data_claim)}
    )
    volumes.append({"name": "data", **_claim_or_empty(data_claim, read_only=True)})
    tries = max(1, int(spec.stall_timeout_s * 2) // 2)
    waiting = ["python", "-c", WAIT_FOR_NAME.format(tries=tries), endpoint_host]
    wait = {"name": "wait-for-rendezvous", "image": image, "command": waiting}
    pod: dict[str, Any] = {
        "metadata": {"labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [wait],
            "containers": [container],
            "volumes": volumes,
        },
    }
    if pytorchjob:
        return [config_map, _pytorchjob(meta, labels, pod, spec.nodes)]
    pod["spec"]["subdomain"] = name  # with the Service: <name>-<index>.<name> resolves
    service = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {"dmlbench/run": name},
        "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}],
    }
    job = {
        "completionMode": "Indexed",
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        "backoffLimit": 0,
        "template": pod,
    }
    return [
        config_map,
        _labelled("v1", "Service", meta, labels, service),
        _labelled("batch/v1", "Job", meta, labels, job),
    ]


def _labelled(
    api: str, kind: str, meta: dict[str, Any], labels: dict[str, str], spec: dict[str, Any]
) -> dict[str, Any]:
    """An object of the run: its metadata carries the run's labels."""
    return {"apiVersion": api, "kind": kind, "metadata": {**meta, "labels": labels}, "spec": spec}


def _claim_or_empty(claim: str | None, *, read_only: bool) -> dict[str, Any]:
    """A volume from a persistent volume claim, or an empty folder the pod fills."""
    if claim is None:
        return {"emptyDir": {}}
    return {
        "persistentVolumeClaim": {"claimName": claim, **({"readOnly": True} if read_only else {})}
    }


def _pytorchjob(
    meta: dict[str, Any], labels: dict[str, str], pod: dict[str, Any], nodes: int
) -> dict[str, Any]:
    """Kubeflow's PyTorchJob: a Master (node 0) and ``nodes - 1`` Workers. The training
    operator makes a Service per pod, so the master's pod name, ``<name>-master-0``, is
    the rendezvous endpoint; each pod keeps its store under its own (fixed) pod name."""
    master_host = f"{meta['name']}-master-0"
    container = pod["spec"]["containers"][0]
    args = container["args"]
    args[args.index("--rdzv-endpoint") + 1] = f"{master_host}:{RENDEZVOUS_PORT}"
    args[args.index("--store") + 1] = f"{STORE_DIR}/$(POD_NAME)"
    container["env"][0] = {
        "name": "POD_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
    }
    pod["spec"]["initContainers"][0]["command"][-1] = master_host
    replicas: dict[str, Any] = {
        "Master": {"replicas": 1, "restartPolicy": "Never", "template": pod}
    }
    if nodes > 1:
        replicas["Worker"] = {"replicas": nodes - 1, "restartPolicy": "Never", "template": pod}
    job = {"runPolicy": {"backoffLimit": 0}, "pytorchReplicaSpecs": replicas}
    return _labelled("kubeflow.org/v1", "PyTorchJob", meta, labels, job)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """The objects as one YAML stream: no anchors, multi-line text as literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return "".join(
        "---\n" + yaml.dump(o, Dumper=Dumper, sort_keys=False, width=100) for o in objects
    )
