"""`dmlbench slurm` and `dmlbench k8s`: job files for schedulers, with the resolved spec
inside, so that mistakes are refused here rather than on the cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from dmlbench.cli.options import (
    DEFAULT_TASK,
    STORE,
    ConfigOption,
    NprocPerNodeOption,
    SetOption,
    StoreOption,
    TaskArgument,
    console,
    flag,
    output_option,
    spec_from,
)
from dmlbench.errors import DmlbenchError, SpecError


def _cluster_spec(
    task: str | None,
    config: Path | None,
    overrides: list[str] | None,
    nodes: int,
    per_node: int,
    engine: str,
    data_dir: Path | None = None,
    gpus: int = 0,
) -> Any:
    """The spec a scheduler's job runs: resolved here, so mistakes are refused before
    anything is submitted; the hosts' own network, never an emulated one; no more
    workers a node than the ``gpus`` it asks for, where it asks for some and the spec
    does not keep its workers on the CPU (each GPU worker takes one of its own)."""
    where = {"data_dir": str(data_dir)} if data_dir else {}
    spec = spec_from(task, config, overrides, nodes=nodes, nproc_per_node=per_node, **where)
    if gpus and per_node > gpus and spec.device != "cpu":
        raise DmlbenchError(
            f"--nproc-per-node {per_node} is more than the {gpus} GPUs a node asks for, and "
            f"each GPU worker takes one of its own: give --nproc-per-node {gpus} or fewer "
            "(or device=cpu)"
        )
    if spec.network.enabled:
        raise DmlbenchError(
            f"the spec's network ({spec.network.label()}) is emulated on one machine; on "
            f"{engine} the hosts' own network is measured: drop it from --set or the spec file"
        )
    return spec


def slurm(
    target: Annotated[
        str | None, typer.Argument(help=f"task name, or a sweep file (default {DEFAULT_TASK})")
    ] = None,
    nodes: Annotated[int, typer.Option(min=1, help="nodes, one task each")] = 1,
    nproc_per_node: NprocPerNodeOption = None,
    cpus_per_task: Annotated[
        int | None, typer.Option(min=1, help="CPUs each node's task gets (its workers share them)")
    ] = None,
    gpus_per_node: Annotated[int, typer.Option(min=0, help="GPUs per node")] = 0,
    partition: Annotated[str | None, typer.Option(help="Slurm partition")] = None,
    time: Annotated[str | None, typer.Option(help="time limit, e.g. 30 or 2:00:00")] = None,
    account: Annotated[str | None, typer.Option(help="account to charge")] = None,
    array: Annotated[
        int | None,
        typer.Option(min=1, help="sweep: a job array of this many tasks sharing the points"),
    ] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
    store: StoreOption = STORE,
    out: Annotated[
        Path | None,
        output_option("write the script here, not stdout", "batch script"),
    ] = None,
    submit: Annotated[bool, flag("--submit", help="submit it with sbatch")] = False,
    python: Annotated[
        str | None,
        typer.Option(help="the Python on the nodes that has dmlbench (default: this one's path)"),
    ] = None,
    setup: Annotated[
        list[str] | None,
        typer.Option(
            help="a shell line the job runs before dmlbench, e.g. 'module load cuda' or "
            "'export NCCL_SOCKET_IFNAME=ib0' (repeatable)"
        ),
    ] = None,
    setup_file: Annotated[
        Path | None, typer.Option(help="a file of such lines, run after --setup's")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="where the nodes find the datasets (default: the spec's data_dir)"),
    ] = None,
) -> None:
    """Write an sbatch script that runs a task (or a sweep) on Slurm nodes.

    The script holds the resolved spec; the store must be on a file system every node
    shares. In the job, `dmlbench run` on the first node starts one srun task per node
    and records the run in the store; scancel stores it as interrupted.
    """
    from dmlbench.files import write_file
    from dmlbench.launch.slurm import SbatchOptions, sbatch_script, setup_lines
    from dmlbench.launch.slurm import submit as submit_script
    from dmlbench.names import file_stem, one_line

    root = store.expanduser().resolve()
    one_line(str(root), "--store")
    program = [one_line(python, "--python") if python else sys.executable, "-m", "dmlbench"]
    lines = setup_lines(setup or [], setup_file)
    given = Path(target) if target else None
    if given is not None and given.suffix in (".yaml", ".yml", ".toml"):
        from dmlbench.spec.sweep import load_sweep_file

        if config or overrides:
            raise DmlbenchError("--config and --set apply to a task; put them in the sweep file")
        sweep_spec = load_sweep_file(given)  # refused here, not on the cluster
        from dmlbench.files import MAX_FILE_BYTES, read_bounded

        embedded = read_bounded(given, MAX_FILE_BYTES, "sweep file", SpecError).decode()
        suffix, name = given.suffix, sweep_spec.name
        command = [*program, "sweep", "{file}", "--store", str(root)]
    else:
        if array:
            raise DmlbenchError("--array shares a sweep's points among tasks; give a sweep file")
        from dmlbench.launch.node import job_spec

        per_node = nproc_per_node or max(1, gpus_per_node)
        spec = _cluster_spec(
            target, config, overrides, nodes, per_node, "Slurm", data_dir, gpus_per_node
        )
        from dmlbench.spec.run import DEFAULT_DATA_DIR

        data = job_spec(spec)
        if spec.data_dir == DEFAULT_DATA_DIR:  # the nodes' own default, not this host's
            data.pop("data_dir")
        embedded = json.dumps(data, indent=1) + "\n"
        suffix, name = ".json", spec.task
        command = [*program, "run", "--config", "{file}", "--store", str(root), "--quiet"]
    options = SbatchOptions(
        nodes=nodes,
        cpus_per_task=cpus_per_task,
        gpus_per_node=gpus_per_node,
        partition=partition,
        time=time,
        account=account,
        array=array,
        job_name=file_stem(f"dmlbench-{name}"),
    )
    logs = root / "slurm"
    text = sbatch_script(command, embedded, suffix, options, logs, lines)
    if out is None and not submit:
        sys.stdout.write(text)
        return
    script = out or logs / f"{options.job_name}.sbatch"
    try:
        logs.mkdir(parents=True, exist_ok=True)  # sbatch writes the job's output there
    except OSError as error:
        raise DmlbenchError(f"cannot make {logs}: {error.strerror}") from None
    write_file(script, text, "batch script")
    if not submit:
        console.print(f"wrote {script}; submit with: sbatch {script}", markup=False, soft_wrap=True)
        return
    job_id = submit_script(script)
    console.print(
        f"submitted job {job_id} ({script}); its output: {logs}; its runs: "
        f"dmlbench results --store {root}",
        markup=False,
        soft_wrap=True,
    )


def k8s(
    task: TaskArgument = None,
    image: Annotated[
        str, typer.Option(help="container image with dmlbench installed (see Dockerfile)")
    ] = "",
    nodes: Annotated[int, typer.Option(min=1, help="pods, one node each")] = 2,
    nproc_per_node: NprocPerNodeOption = None,
    cpus: Annotated[str | None, typer.Option(help="CPU per pod, e.g. 4 or 3500m")] = None,
    memory: Annotated[str | None, typer.Option(help="memory per pod, e.g. 16Gi")] = None,
    gpus: Annotated[int, typer.Option(min=0, help="NVIDIA GPUs per pod")] = 0,
    name: Annotated[str | None, typer.Option(help="job name (default dmlbench-TASK)")] = None,
    namespace: Annotated[str | None, typer.Option(help="Kubernetes namespace")] = None,
    store_claim: Annotated[
        str | None,
        typer.Option(help="PersistentVolumeClaim for the results (default: emptyDir, lost)"),
    ] = None,
    data_claim: Annotated[
        str | None, typer.Option(help="PersistentVolumeClaim holding the datasets")
    ] = None,
    pytorchjob: Annotated[
        bool, flag("--pytorchjob", help="a Kubeflow PyTorchJob instead of Job + Service")
    ] = False,
    config: ConfigOption = None,
    overrides: SetOption = None,
    out: Annotated[
        Path | None,
        output_option("write the manifests here, not stdout", "manifest file"),
    ] = None,
) -> None:
    """Write Kubernetes manifests that run one task on several pods.

    An Indexed Job (completion index = node rank) and a headless Service whose first
    pod is the rendezvous endpoint, with the resolved spec in a ConfigMap; apply them
    with `kubectl apply -f`. Generated and schema-checked, not run on a cluster here.
    """
    from dmlbench.launch.kubernetes import PodResources, default_name, manifests, to_yaml

    if not image:
        raise DmlbenchError(
            "give --image: a container image with dmlbench installed "
            "(build one from the repository's Dockerfile)"
        )
    per_node = nproc_per_node or max(1, gpus)
    spec = _cluster_spec(task, config, overrides, nodes, per_node, "Kubernetes", gpus=gpus)
    objects = manifests(
        spec,
        image=image,
        name=name or default_name(spec.task),
        namespace=namespace,
        resources=PodResources(cpus, memory, gpus),
        store_claim=store_claim,
        data_claim=data_claim,
        pytorchjob=pytorchjob,
    )
    text = to_yaml(objects)
    if store_claim is None:  # on stderr: the manifests on stdout stay whole
        typer.echo(
            "note: each pod stores its runs in an emptyDir, lost with the pod; --store-claim "
            "CLAIM keeps them (each node's summary stays in its log: kubectl logs)",
            err=True,
        )
    if out is None:
        sys.stdout.write(text)
        return
    from dmlbench.files import write_file

    write_file(out, text, "manifest file", make_folder=False)
    kinds = ", ".join(o["kind"] for o in objects)
    console.print(
        f"wrote {kinds} to {out}; apply with: kubectl apply -f {out}", markup=False, soft_wrap=True
    )
