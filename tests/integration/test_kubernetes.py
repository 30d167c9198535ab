"""`dmlbench k8s`: manifests checked against the Kubernetes API's schema (the official
client's models, generated from the API's OpenAPI document) and their node command run
for real on this host, as kubelet would run it in two pods (multi-process tier)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import free_port

from dmlbench.launch.kubernetes import manifests
from dmlbench.resolve import resolve_spec


@pytest.mark.multiprocess
def test_the_pods_command_trains_on_two_nodes(tmp_path: Path) -> None:
    """Each pod's command, run as kubelet would run it: the ConfigMap's spec in a file,
    $(NODE_RANK) filled in, node 0's DNS name standing for 127.0.0.1 (this host)."""
    spec = resolve_spec(
        "synthetic-mlp",
        nodes=2,
        nproc_per_node=1,
        overrides=["max_steps=20", "stop_at_target=false"],
    )
    config, _, job = manifests(spec, image="i", name="pair")
    shipped = json.loads(config["data"]["spec.json"])
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({**shipped, "data_dir": str(tmp_path / "data")}))
    port = free_port()
    pod = job["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]

    def as_kubelet(rank: int) -> list[str]:
        filled = [a.replace("$(NODE_RANK)", str(rank)) for a in args]
        filled[filled.index("--config") + 1] = str(spec_file)
        filled[filled.index("--rdzv-endpoint") + 1] = f"127.0.0.1:{port}"
        store = filled.index("--store") + 1
        filled[store] = str(tmp_path / filled[store].lstrip("/"))
        return [sys.executable, "-m", "dmlbench", *filled]

    nodes = [
        subprocess.Popen(as_kubelet(r), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(2)
    ]
    outputs = [n.communicate(timeout=180) for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], [e[-2000:] for _, e in outputs]
    recorded = [json.loads(out) for out, _ in outputs if out.strip().startswith("{")]
    run = next(r for r in recorded if r.get("workers") == 2)
    assert run["status"] == "success" and run["run_id"] == "pair"
    assert (tmp_path / "store" / "node-0").is_dir() and (tmp_path / "store" / "node-1").is_dir()
