"""What `dmlbench run` is asked to do, decided from its flags and the environment alone.

Like torchrun's ``config_from_args``: the CLI parses, this module decides (one run or a
sweep; an emulated cluster, one node of a job across hosts, a Slurm job's launcher or
one of its steps; where the node's part is stored), and the launch paths act. It reads
no file and starts nothing, so every rule is tested in-process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from dmlbench.errors import DmlbenchError, chosen
from dmlbench.names import comma_list, shorten

if TYPE_CHECKING:
    from dmlbench.launch.slurm import SlurmJob

DEFAULT_RDZV_ID = "dmlbench"
Scaling = Literal["weak", "strong", "none"]
LaunchPath = Literal["local", "cluster", "slurm", "node"]


MAX_COUNT = 1 << 20  # workers or nodes a count may name: 1,048,576
MAX_VALUES = 1_000  # values in one list
# The options of `dmlbench run` a list turns into a sweep's axis, as --workers
SWEPT_OPTIONS = ("exchange", "network", "model")


def worker_counts(
    text: str | None, option: str = "--workers", noun: str = "worker counts", unique: bool = True
) -> list[int]:
    """``"1,2,4"`` → [1, 2, 4]; refused with one line when it is not a list of counts.
    ``unique``: repeats dropped (a sweep's axis); otherwise kept (values paired by
    position, as --nodes with --nproc-per-node)."""
    if text is None:
        return []
    shown = shorten(text)
    parts = comma_list(text.replace(" ", ""))
    if len(parts) > MAX_VALUES:
        raise DmlbenchError(f"{option} {shown!r}: at most {MAX_VALUES:,} {noun}")
    try:
        counts = [int(part) for part in parts]
    except ValueError:
        raise DmlbenchError(f"{option} {shown!r}: give a count or a list like 1,2,4") from None
    if not counts or min(counts) < 1:
        raise DmlbenchError(f"{option} {shown!r}: {noun} must be at least 1")
    if max(counts) > MAX_COUNT:
        raise DmlbenchError(
            f"{option} {shown!r}: {noun} of at most {MAX_COUNT:,} (past any cluster built)"
        )
    return list(dict.fromkeys(counts)) if unique else counts


def layouts(nodes: str | None, per_node: str | None) -> list[tuple[int, int]]:
    """``--nodes 1,2,4 --nproc-per-node 4,2,1`` → [(1, 4), (2, 2), (4, 1)]; one value of
    either applies to every value of the other."""
    if nodes is None and per_node is None:
        return []
    node_counts = worker_counts(nodes or "1", "--nodes", "node counts", unique=False)
    per_counts = worker_counts(per_node or "1", "--nproc-per-node", "workers per node", False)
    if len(node_counts) > 1 and len(per_counts) > 1 and len(node_counts) != len(per_counts):
        raise DmlbenchError(
            "--nodes and --nproc-per-node: give one value of either, or as many of each"
        )
    if len(node_counts) == 1:
        node_counts = node_counts * len(per_counts)
    if len(per_counts) == 1:
        per_counts = per_counts * len(node_counts)
    return list(zip(node_counts, per_counts, strict=True))


@dataclass(frozen=True)
class RunFlags:
    """`dmlbench run`'s flags as given (``None``: not given)."""

    store: Path
    task: str | None = None
    workers: str | None = None
    scaling: str | None = None
    repeats: int | None = None
    global_batch: int | None = None
    name: str | None = None
    rerun: str | None = None
    nodes: int | None = None
    nproc_per_node: int | None = None
    nnodes: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str = DEFAULT_RDZV_ID
    exchange: str | None = None  # one name, or a list: a sweep's axis (SWEPT_OPTIONS)
    network: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class SweepRequest:
    """A sweep of worker counts (or repeats, or of a list of exchanges, networks or
    models) the flags asked for."""

    name: str
    scaling: Scaling
    workers: list[int]  # none given: the spec's count, as one run takes it
    repeats: int
    axes: dict[str, list[str]] = field(default_factory=dict)  # SWEPT_OPTIONS given as lists


@dataclass(frozen=True)
class RunRequest:
    """What to run, where, and where this process stores it."""

    task: str
    store: Path
    workers: int | None  # one run's count, None: the spec's
    nodes: int | None
    nproc_per_node: int | None
    rdzv_endpoint: str | None = None  # one node of a job across hosts
    rdzv_id: str = DEFAULT_RDZV_ID
    sweep: SweepRequest | None = None
    slurm: SlurmJob | None = None  # the Slurm job this runs in, read once from the environment
    chosen: dict[str, str] = field(default_factory=dict)  # SWEPT_OPTIONS given one value

    @property
    def layout(self) -> dict[str, int | None]:
        return {"nodes": self.nodes, "nproc_per_node": self.nproc_per_node}

    def sweep_file(
        self, global_batch: int | None, seed: int | None, config: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The sweep file an inline sweep stands for: the worker counts given as an axis,
        and the exchanges, networks or models given as lists; the spec file's keys as the
        values every run sets (its worker count where none was given), its seed as the
        sweep's first where --seed was not given."""
        assert self.sweep is not None
        counts = {"workers": self.sweep.workers} if self.sweep.workers else {}  # else the spec's
        kept = {k: v for k, v in config.items() if k not in ("plugins", "seed")}
        batches: dict[str, int | None] = {"global_batch": global_batch}
        if self.sweep.scaling != "none":  # the spec file's batch is the scaling's own
            kept, found = _without_batches(kept)
            batches = _scaling_batches(self.sweep, global_batch, found, config.get("workers", 1))
        return {
            "name": self.sweep.name,
            "task": self.task,
            "scaling": self.sweep.scaling,
            **batches,
            "repeats": self.sweep.repeats,
            "seed": seed if seed is not None else config.get("seed", 0),
            "set": kept,
            "axes": counts | self.sweep.axes,
            "plugins": config.get("plugins", []),
        }


def _without_batches(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A spec file's keys less its local and global batch (``local_batch``,
    ``recipe.local_batch``, ``recipe: {local_batch: …}``, ``global_batch``), and those."""
    import copy

    kept, found = copy.deepcopy(dict(config)), {}
    for key in list(kept):
        if (name := key.rpartition(".")[2]) in ("local_batch", "global_batch"):
            found[name] = kept.pop(key)
    if isinstance(recipe := kept.get("recipe"), dict) and "local_batch" in recipe:
        found["local_batch"] = recipe.pop("local_batch")
    return kept, found


def _scaling_batches(
    sweep: SweepRequest, global_batch: int | None, found: Mapping[str, Any], workers: Any
) -> dict[str, int | None]:
    """An inline sweep's batch under weak or strong scaling, from the spec file's: weak
    keeps its local batch; strong fixes its global batch (--global-batch first), or its
    local batch at the fewest workers. Its spec file's were refused as a sweep file's
    ``set:`` ("remove local_batch/global_batch from set")."""
    wrong = {k: v for k, v in found.items() if type(v) is not int or v < 1}
    if wrong:
        key, value = next(iter(wrong.items()))
        raise DmlbenchError(f"the spec file's {key} {shorten(repr(value))}: give a whole number")
    if sweep.scaling == "weak":
        for given, where in ((global_batch, "--global-batch"), (found.get("global_batch"), "")):
            if given is not None:
                raise DmlbenchError(
                    "weak scaling keeps each worker's local batch: drop "
                    f"{where or 'global_batch from the spec file'}, or use --scaling strong"
                )
        return {"local_batch": found["local_batch"]} if "local_batch" in found else {}
    if global_batch is None and "global_batch" in found:
        global_batch = found["global_batch"]
    elif global_batch is None and "local_batch" in found:
        fewest = min(sweep.workers or [workers if isinstance(workers, int) else 1])
        global_batch = found["local_batch"] * fewest
    return {"global_batch": global_batch}


def early_allocator(
    request: RunRequest, config: Mapping[str, Any], overrides: list[str]
) -> str | None:
    """The ``cpu_allocator`` of the workers this process will start itself (a run on this
    machine, or this node's part of a job), read from the spec file and the ``--set``
    overrides before the spec is resolved, so that their fork server can start early
    (:func:`dmlbench.launch.forkserver.start_early`); ``None`` where another process
    starts them (an emulated cluster's agents, a Slurm job's steps) or the overrides do
    not read (the resolution says why)."""
    from dmlbench.spec.overrides import parse_assignment
    from dmlbench.spec.run import RunSpec

    values = dict(config)
    try:
        values.update(parse_assignment(text) for text in overrides)
    except DmlbenchError:
        return None
    nodes = request.nodes or values.get("nodes") or 1
    if request.rdzv_endpoint is None and nodes != 1:
        return None
    setting = values.get("cpu_allocator", RunSpec.model_fields["cpu_allocator"].default)
    return setting if isinstance(setting, str) else None


def launch_path(nodes: int, rendezvous: bool, slurm: SlurmJob | None) -> LaunchPath:
    """The one place a run's launch path is decided: one node of a job across hosts
    (a rendezvous), a Slurm job's nodes (this is its batch script), an emulated cluster
    on this machine, or local workers. ``slurm`` is what :func:`plan_run` read from the
    environment; nothing below reads it again."""
    if rendezvous:
        return "node"
    if nodes > 1:
        return "slurm" if slurm is not None and not slurm.in_step else "cluster"
    return "local"


def plan_run(
    flags: RunFlags, config: Mapping[str, Any], env: Mapping[str, str], default_task: str
) -> RunRequest:
    """Decide what `dmlbench run` does. ``config``: the keys of the run spec file (its
    ``task`` included), ``env``: the process's environment (Slurm's variables)."""
    from dmlbench.launch.slurm import SlurmJob
    from dmlbench.results.rundir import node_folder

    task = flags.task or config.get("task") or default_task  # the argument wins
    counts = worker_counts(flags.workers)
    given_values = {key: _option_values(key, getattr(flags, key)) for key in SWEPT_OPTIONS}
    axes = {key: values for key, values in given_values.items() if len(values) > 1}
    repeats = flags.repeats or 1
    is_sweep = len(counts) > 1 or bool(flags.scaling) or repeats > 1 or bool(axes)
    store, nodes, nnodes = flags.store, flags.nodes, flags.nnodes
    endpoint, rdzv_id, per_node = flags.rdzv_endpoint, flags.rdzv_id, flags.nproc_per_node
    slurm = SlurmJob.from_env(env)
    if slurm is not None and slurm.nodes > 1 and nodes is None:
        if slurm.in_step:  # one task of `srun` across nodes: one node of the job
            if endpoint is None:
                nnodes, endpoint = nnodes or slurm.nodes, slurm.endpoint()
                rdzv_id = slurm.rendezvous_id if rdzv_id == DEFAULT_RDZV_ID else rdzv_id
            store = node_folder(store, slurm.node_id)
        elif not is_sweep and nnodes is None and "nodes" not in config:
            nodes = slurm.nodes  # the batch script: the job's launcher, on all its nodes
    if nnodes is not None and endpoint is None:
        raise DmlbenchError(
            "--nnodes needs --rdzv-endpoint HOST:PORT, the same on every "
            "node; for an emulated cluster on this machine use --nodes"
        )
    if nnodes is not None and nodes is not None:
        raise DmlbenchError(
            "give --nnodes (this is one node of a real job) or --nodes (an "
            "emulated cluster), not both"
        )
    if endpoint is not None:
        from dmlbench.names import path_component

        path_component(rdzv_id, "--rdzv-id")  # it names the run's folder on every node
        nodes = nnodes or 1
    given = counts or "workers" in config or "nproc_per_node" in config
    if nodes and per_node is None and not given:
        per_node = 1  # torchrun's default
    sweep = None
    sweeps_only = [f for f, value in (("--name", flags.name), ("--rerun", flags.rerun)) if value]
    if sweeps_only and not is_sweep:
        raise DmlbenchError(
            f"{' and '.join(sweeps_only)} go{'es' if len(sweeps_only) == 1 else ''} with a "
            "sweep (a list of worker counts, exchanges, networks or models, --scaling or "
            "--repeats); one run is stored under an id of its own"
        )
    if is_sweep:
        if endpoint is not None:
            raise DmlbenchError(
                "--rdzv-endpoint runs one job across hosts, not a sweep: start "
                "one job at a time (or sweep an emulated cluster, --nodes)"
            )
        mode: Scaling = "strong" if flags.global_batch is not None else "none"
        if flags.scaling:
            mode = chosen("--scaling", [flags.scaling], get_args(Scaling))[0]
        varied = list(axes)  # and what else varies, as a sweep without them was named
        if mode != "none" or len(counts) > 1 or not axes:
            varied.insert(0, mode if mode != "none" else "workers")
        name = flags.name or "-".join([task, *varied])
        sweep = SweepRequest(name, mode, counts, repeats, axes)
    return RunRequest(
        task=task,
        store=store,
        workers=counts[0] if counts else None,
        nodes=nodes,
        nproc_per_node=per_node,
        rdzv_endpoint=endpoint,
        rdzv_id=rdzv_id,
        sweep=sweep,
        slurm=slurm,
        chosen={key: values[0] for key, values in given_values.items() if len(values) == 1},
    )


def _option_values(key: str, text: str | None) -> list[str]:
    """``--exchange ddp,zero1`` → ["ddp", "zero1"]: one value, a list (a sweep's axis,
    repeats dropped), or none."""
    if text is None:
        return []
    values = list(dict.fromkeys(comma_list(text)))
    if not values and text.strip():
        raise DmlbenchError(f"--{key} {shorten(text)!r}: give a name, or a list like a,b")
    if len(values) > MAX_VALUES:
        raise DmlbenchError(f"--{key} {shorten(text)!r}: at most {MAX_VALUES:,} values")
    return values
