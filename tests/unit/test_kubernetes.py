"""`dmlbench k8s`: manifests checked against the Kubernetes API's schema (the official
client's models, generated from the API's OpenAPI document) and their node command run
for real on this host, as kubelet would run it in two pods (multi-process tier)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from dmlbench.launch.kubernetes import PodResources, manifests, to_yaml
from dmlbench.resolve import resolve_spec

models = pytest.importorskip("kubernetes.client.models", reason="pip install kubernetes")


KINDS = {"ConfigMap": "V1ConfigMap", "Service": "V1Service", "Job": "V1Job"}


SCALARS = {
    "str": str,
    "int": int,
    "bool": bool,
    "float": (int, float),
    "datetime": str,
    "bytes": str,
}


def schema_errors(data: Any, kind: str, where: str = "") -> list[str]:
    """Every field of ``data`` the API's model ``kind`` does not have, or has with another
    type; then the model's own checks (required fields, allowed values)."""
    # the client writes list[X] and dict(str, X), or (newer) List[X] and Dict[str, X]
    if kind.lower().startswith("list["):
        if not isinstance(data, list):
            return [f"{where}: a list expected"]
        inner = kind[5:-1]
        return [
            e for i, item in enumerate(data) for e in schema_errors(item, inner, f"{where}[{i}]")
        ]
    if kind.lower().startswith(("dict(", "dict[")):
        inner = kind[kind.index(",") + 1 : -1].strip()
        if not isinstance(data, dict):
            return [f"{where}: a mapping expected"]
        return [e for k, v in data.items() for e in schema_errors(v, inner, f"{where}.{k}")]
    if kind == "object":
        return []
    if kind in SCALARS:
        fine = isinstance(data, SCALARS[kind]) and not (kind != "bool" and data is True)
        return [] if fine else [f"{where}: {kind} expected, got {data!r}"]
    model = getattr(models, kind)
    if not isinstance(data, dict):
        return [f"{where}: a {kind} mapping expected"]
    fields = {json_name: attr for attr, json_name in model.attribute_map.items()}
    errors = []
    for key, value in data.items():
        if key not in fields:
            errors.append(f"{where}.{key}: not a field of {kind}")
        else:
            errors += schema_errors(value, model.openapi_types[fields[key]], f"{where}.{key}")
    return errors


def check(obj: dict[str, Any], kind: str) -> None:
    errors = schema_errors(obj, kind, obj.get("kind", kind))
    assert errors == [], "\n".join(errors)
    ApiClient()._ApiClient__deserialize(obj, kind)  # required fields, allowed values


def _spec(**extra: Any):
    return resolve_spec("synthetic-mlp", nodes=3, nproc_per_node=2, **extra)


def test_job_service_and_config_map_are_valid_api_objects() -> None:
    objects = manifests(
        _spec(),
        image="registry.example/dmlbench:0.1",
        name="bench",
        namespace="ml",
        resources=PodResources("4", "16Gi", gpus=2),
        store_claim="results",
        data_claim="datasets",
    )
    assert [o["kind"] for o in objects] == ["ConfigMap", "Service", "Job"]
    for obj in objects:
        check(obj, KINDS[obj["kind"]])
        assert obj["metadata"]["namespace"] == "ml"
    config, service, job = objects
    # an Indexed Job: a pod per node, completion index = node rank, no silent retries
    assert job["apiVersion"] == "batch/v1"
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]
    (node,) = pod["spec"]["containers"]
    rank = node["env"][0]
    assert (
        rank["name"] == "NODE_RANK"
        and "job-completion-index" in (rank["valueFrom"]["fieldRef"]["fieldPath"])
    )
    # the headless Service names the pods: node 0's name is the rendezvous endpoint
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    assert pod["spec"]["subdomain"] == service["metadata"]["name"] == "bench"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    args = node["args"]
    assert args[args.index("--rdzv-endpoint") + 1] == "bench-0.bench:29400"
    assert pod["spec"]["initContainers"][0]["command"][-1] == "bench-0.bench"
    layout = (args[args.index("--nnodes") + 1], args[args.index("--nproc-per-node") + 1])
    assert layout == ("3", "2")
    assert args[args.index("--store") + 1] == "/store/node-$(NODE_RANK)"
    limits = node["resources"]["limits"]
    assert limits == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert node["resources"]["requests"] == limits  # a guaranteed pod
    claims = {
        v["name"]: v.get("persistentVolumeClaim", {}).get("claimName")
        for v in pod["spec"]["volumes"]
    }
    assert claims["store"] == "results" and claims["data"] == "datasets"
    # every pod trains exactly the spec resolved here, its datasets on the volume
    shipped = json.loads(config["data"]["spec.json"])
    assert shipped["data_dir"] == "/data" and "network" not in shipped
    again = resolve_spec("synthetic-mlp", config=shipped)
    assert again.to_json_dict() == {
        **_spec().to_json_dict(),
        "data_dir": "/data",
        "network": again.to_json_dict()["network"],
    }


def test_the_schema_check_finds_what_the_api_would_refuse() -> None:
    """The checker is what the tests above trust: a misspelt field, a wrong type and a
    missing required field are all caught."""
    job = manifests(_spec(), image="i", name="bench")[2]
    misspelt = json.loads(json.dumps(job))
    misspelt["spec"]["completionmode"] = misspelt["spec"].pop("completionMode")
    assert any(
        "completionmode: not a field of V1JobSpec" in e for e in schema_errors(misspelt, "V1Job")
    )
    typed = json.loads(json.dumps(job))
    typed["spec"]["completions"] = "3"
    assert any("completions: int expected" in e for e in schema_errors(typed, "V1Job"))
    nameless = json.loads(json.dumps(job))
    del nameless["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        check(nameless, "V1Job")


def test_a_pytorchjob_has_a_master_and_workers_with_valid_pods() -> None:
    _, job = manifests(_spec(), image="i", name="bench", pytorchjob=True)
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    for role in replicas.values():
        assert role["restartPolicy"] == "Never"
        check(role["template"], "V1PodTemplateSpec")
        args = role["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--rdzv-endpoint") + 1] == "bench-master-0:29400"
        assert args[args.index("--store") + 1] == "/store/$(POD_NAME)"
    one = manifests(resolve_spec("synthetic-mlp", nodes=1), image="i", name="b", pytorchjob=True)
    assert "Worker" not in one[1]["spec"]["pytorchReplicaSpecs"]


def test_k8s_writes_parseable_yaml_and_refuses_bad_input(dmlbench, tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    asked = ["--image", "dmlbench:0.1", "--nodes", "2", "--cpus", "3500m", "--set", "max_steps=5"]
    code, said, err = dmlbench("k8s", "synthetic-mlp", *asked, "--out", str(out))
    assert code == 0, err
    assert "kubectl apply -f" in said
    assert "emptyDir, lost with the pod; --store-claim" in " ".join(err.split())
    code, printed, err = dmlbench("k8s", "synthetic-mlp", *asked, "--store-claim", "results")
    assert code == 0 and "claimName: results" in printed and "lost" not in err
    objects = list(yaml.safe_load_all(out.read_text()))
    assert [o["kind"] for o in objects] == ["ConfigMap", "Service", "Job"]
    assert json.loads(objects[0]["data"]["spec.json"])["max_steps"] == 5
    assert objects[2]["metadata"]["name"] == "dmlbench-synthetic-mlp"
    code, printed, _ = dmlbench("k8s", "--image", "i", "--nodes", "2", "--pytorchjob")
    assert code == 0 and "kind: PyTorchJob" in printed and "&id" not in printed
    for bad, message in [
        ((), "give --image"),
        (("--image", "i", "--name", "Bench_1"), "is not a Kubernetes name"),
        (("--image", "i", "--memory", "lots"), "not a Kubernetes quantity"),
        (("--image", "i", "--set", "network.profile=1gbit"), "drop it"),
        (("--image", "i", "--set", "network=250mbit"), "network (custom · 250 Mbit/s) is emu"),
        (("--image", "i", "--out", str(tmp_path / "no" / "such" / "x.yaml")), "cannot write"),
        # a GPU worker takes a GPU of its own: two of four found none on their node
        (("--image", "i", "--gpus", "2", "--nproc-per-node", "4"), "give --nproc-per-node 2"),
    ]:
        code, _, err = dmlbench("k8s", "synthetic-mlp", *bad)
        assert code == 2 and message in err and "Traceback" not in err, err
    cpu = ("--gpus", "2", "--nproc-per-node", "4", "--set", "device=cpu")  # kept on the CPU
    assert dmlbench("k8s", "synthetic-mlp", "--image", "i", *cpu)[0] == 0


def test_hostile_text_stays_data_in_the_manifests(dmlbench, tmp_path: Path) -> None:
    """YAML is data: text with line breaks, YAML syntax and shell reaches the ConfigMap
    exactly as given; names are DNS-1123 labels and refused otherwise (issue 40)."""
    hostile = "/data\n- kind: Pod\n  x: $(touch /tmp/PWNED) ---\n'\"{}[]&*!|>%@`"
    objects = manifests(_spec(), image="i", name="bench")
    shipped = json.loads(objects[0]["data"]["spec.json"])
    objects[0]["data"]["spec.json"] = json.dumps({**shipped, "data_dir": hostile}, indent=1)
    objects[2]["metadata"]["labels"]["note"] = hostile  # a plain scalar, not a JSON text
    loaded = list(yaml.safe_load_all(to_yaml(objects)))
    assert [o["kind"] for o in loaded] == ["ConfigMap", "Service", "Job"]
    assert loaded == json.loads(json.dumps(objects))
    assert json.loads(loaded[0]["data"]["spec.json"])["data_dir"] == hostile
    for bad, message in [
        (("--namespace", "ml\nkind: Secret"), "is not a Kubernetes name"),
        (("--store-claim", "Claim_1"), "is not a Kubernetes name"),
        (("--name", "x" * 300), "is not a Kubernetes name"),
        (("--image", "img\nkind: Secret"), "is not an image reference"),
    ]:
        code, _, err = dmlbench("k8s", "synthetic-mlp", "--image", "i", *bad)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert len(err) < 400  # a long value is cut in the message
