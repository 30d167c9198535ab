"""A task's step on a cluster it does not have: compute from the model's FLOPs and the
device's peak, communication from the cluster's links, overlapped as DDP overlaps it.

- :func:`task_cost`: one worker's FLOPs per step and the gradient bytes, counted on the
  meta device (the flop counter the runs use; no data, no memory).
- :func:`ddp_buckets` and :func:`ddp_step`: PyTorch DDP's overlap of backward and
  all-reduce (Li et al., VLDB 2020, section 3.2.3): gradients fill buckets in the order
  backward produces them (a small first bucket, then ``bucket_cap`` bytes each); a
  bucket's all-reduce starts once backward has filled it and the previous bucket's
  all-reduce is done (one communication stream). Only what runs past the end of
  backward adds to the step.
- :func:`scale`: the scaling table over node counts: step, exposed communication,
  throughput, speedup and efficiency against the first layout.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dmlbench.errors import SpecError
from dmlbench.perfmodel.curve import Curve
from dmlbench.perfmodel.hardware import (
    DEFAULT_EFFICIENCY,
    Accelerator,
    Cluster,
    compute_step_s,
    load_hardware,
)
from dmlbench.perfmodel.model import (
    TWO_LEVEL,
    Algorithm,
    Layout,
    algorithms_named,
    cluster_allreduce_time,
)
from dmlbench.spec.recipe import ModelSpec

MIB = 2**20
FIRST_BUCKET_BYTES = 1 * MIB  # torch's _DEFAULT_FIRST_BUCKET_BYTES
BUCKET_CAP_BYTES = 25 * MIB  # DDP's bucket_cap_mb default
BACKWARD_SHARE = 2 / 3  # backward does twice forward's FLOPs


@dataclass(frozen=True)
class TaskCost:
    task: str
    local_batch: int
    flops_per_step: float  # one worker: forward and backward of its batch
    gradient_bytes: float
    train_examples: int | None
    parameter_tensors: int = 0  # tensors with a gradient: DDP copies each one twice a step


# A short kernel launched back to back costs about 3.8 µs with its launch (NVIDIA
# Technical Blog, A. Gray, "Getting Started with CUDA Graphs", 2019).
KERNEL_FLOOR_S = 3.8e-6


def ddp_own_cost_s(cost: TaskCost, accelerator: Accelerator) -> float:
    """What torch's DDP itself adds to a step, communication aside (Li et al., VLDB 2020,
    section 3.2: each gradient is copied into its bucket by its autograd hook, and back
    out of it after the all-reduce): a copy kernel per parameter tensor each way, at the
    per-kernel floor, and the gradient bytes read and written twice at the device's
    memory bandwidth (its data sheet)."""
    kernels = 2 * cost.parameter_tensors * KERNEL_FLOOR_S
    traffic = 4 * cost.gradient_bytes / (accelerator.memory_bandwidth_gbs * 1e9)
    return kernels + traffic


def task_cost(task: str, local_batch: int | None = None) -> TaskCost:
    """A registered task's step cost at ``local_batch`` (the recipe's by default)."""
    from dmlbench.tasks import get_task

    definition = get_task(task)
    shape, outputs = definition.input_shape, definition.num_outputs
    if shape is None or outputs is None:
        raise SpecError(
            f"{task} declares no input shape, so its step cannot be counted without its "
            "data; simulate it from its runs instead (dmlbench simulate)"
        )
    return model_cost(
        task,
        definition.recipe.model,
        shape,
        outputs,
        local_batch or definition.recipe.local_batch,
        loss=definition.loss,
        train_examples=definition.train_examples,
    )


def model_cost(
    name: str,
    model_spec: ModelSpec,
    shape: tuple[int, ...],
    outputs: int,
    local_batch: int,
    *,
    loss: str = "cross_entropy",
    train_examples: int | None = None,
) -> TaskCost:
    """A model's step cost on ``local_batch`` examples of ``shape``: forward and backward
    FLOPs counted on the meta device (no data, no memory) and its gradient bytes."""
    from dmlbench.models import build_model
    from dmlbench.models.flops import step_flops
    from dmlbench.models.losses import LOSSES

    tokens = loss == "next_token"
    meta = torch.device("meta")
    with meta:
        model = build_model(model_spec, shape, outputs)
        if tokens:
            x = torch.zeros(local_batch, *shape, dtype=torch.long)
            y = torch.zeros(local_batch, *shape, dtype=torch.long)
        else:
            x = torch.zeros(local_batch, *shape)
            y = torch.zeros(local_batch, dtype=torch.long)
    loss_fn = LOSSES[loss][0]
    flops = step_flops(model, lambda m: loss_fn(m(x), y).mean(), meta)
    trained = [p for p in model.parameters() if p.requires_grad]
    gradient_bytes = sum(p.numel() * 4 for p in trained)
    return TaskCost(
        name, local_batch, float(flops), float(gradient_bytes), train_examples, len(trained)
    )


def ddp_buckets(
    gradient_bytes: float, first: float = FIRST_BUCKET_BYTES, cap: float = BUCKET_CAP_BYTES
) -> list[float]:
    """The buckets DDP fills, in the order backward fills them."""
    buckets, left = [], gradient_bytes
    size = first
    while left > 0:
        buckets.append(min(size, left))
        left -= buckets[-1]
        size = cap
    return buckets


def ddp_step(
    forward_s: float,
    backward_s: float,
    buckets: Sequence[float],
    allreduce: Callable[[float], float],
    optimizer_s: float = 0.0,
) -> tuple[float, float, float]:
    """(step seconds, all-reduce seconds in all, the part of it past backward's end).
    Backward fills each bucket in its share of the bytes."""
    total = sum(buckets) or 1.0
    ready = done = comm = 0.0
    for size in buckets:
        ready += backward_s * size / total
        took = allreduce(size)
        comm += took
        done = max(done, ready) + took
    exposed = max(0.0, done - backward_s)
    return forward_s + backward_s + exposed + optimizer_s, comm, exposed


def scale(
    cluster: Cluster,
    cost: TaskCost,
    nodes: Sequence[int],
    devices_per_node: int | None = None,
    *,
    dtype: str = "fp32",
    efficiency: float,
    algorithm: Algorithm | None = None,
    compute_s: float | None = None,
    bucket_cap: float = BUCKET_CAP_BYTES,
    ddp_cost: bool = False,
) -> list[dict[str, Any]]:
    """One row per node count: weak scaling (each device keeps ``cost.local_batch``).
    ``compute_s`` replaces the FLOP-based step (a calibration: the compute of one
    device's step measured, e.g. a paper's single-node point); ``bucket_cap`` is DDP's
    ``bucket_cap_mb`` in bytes; ``ddp_cost`` adds torch DDP's own copies
    (:func:`ddp_own_cost_s`) to every step, one device included. ``algorithm``: the
    flat ``ring`` or ``hierarchical``; by default the profile's (its nodes all-reduce
    among them as the profile says)."""
    per_node = devices_per_node or cluster.devices_per_node
    shape = algorithm or cluster.profile.allreduce
    between = cluster.profile.between_nodes
    step_compute = compute_s or compute_step_s(
        cost.flops_per_step, cluster.accelerator, dtype, efficiency
    )
    inter, intra = cluster.links(per_node)
    calibration = cluster.calibration()
    buckets = ddp_buckets(cost.gradient_bytes, cap=bucket_cap)
    rows: list[dict[str, Any]] = []
    for count in nodes:
        workers = count * per_node
        layout = Layout(count, intra)

        def allreduce(size: float, workers: int = workers, layout: Layout = layout) -> float:
            return cluster_allreduce_time(shape, workers, size, inter, layout, calibration, between)

        forward = step_compute * (1 - BACKWARD_SHARE)
        step, comm, exposed = ddp_step(forward, step_compute * BACKWARD_SHARE, buckets, allreduce)
        own = ddp_own_cost_s(cost, cluster.accelerator) if ddp_cost else 0.0
        step += own
        throughput = workers * cost.local_batch / step
        rows.append(
            {
                "nodes": count,
                "workers": workers,
                "global_batch": workers * cost.local_batch,
                "compute_s": step_compute,
                "allreduce_s": comm,
                "exposed_comm_s": exposed,
                "ddp_own_s": own,
                "step_s": step,
                "samples_per_s": throughput,
                "epoch_s": (cost.train_examples / throughput) if cost.train_examples else None,
            }
        )
    base = rows[0]
    for row in rows:
        row["speedup"] = row["samples_per_s"] / base["samples_per_s"]
        row["efficiency"] = row["speedup"] * base["workers"] / row["workers"]
    return rows


def efficiency_from_runs(
    runs: Sequence[Any], accelerator: Accelerator, dtype: str, local_batch: int | None = None
) -> tuple[float, str] | None:
    """The median share of the data sheet's ``dtype`` peak that finished runs on this
    accelerator at that precision (and ``local_batch``, when given: a small batch can be
    bound by kernel launches) achieved, their FLOP/s in the steady steps, communication
    included; and which runs. ``None`` when none ran so."""
    found = []
    for run in runs:
        gpus = run.environment.get("gpus") or []
        on_it = any(accelerator.names(gpu) for gpu in gpus)
        same = run.precision == dtype or (run.precision, dtype) == ("fp32", "tf32")  # TF32
        batch = local_batch is None or run.local_batch == local_batch
        if run.finished and on_it and same and batch and run.summary.flops_per_s:
            found.append((run.summary.flops_per_s / accelerator.peak_flops(dtype), run.run_id))
    if not found:
        return None
    value = statistics.median(share for share, _ in found)
    runs_text = ", ".join(run_id for _, run_id in found[:3])
    at = f" at {local_batch} a device" if local_batch else ""
    runs = f"{len(found)} {dtype} run{'s' * (len(found) != 1)}"
    return value, f"measured: {runs}{at} on {accelerator.name} ({runs_text})"


@dataclass
class ClusterSimulation:
    """`simulate-cluster`'s result: a row per node count (see :func:`scale`; with time to
    train added by :func:`add_time_to_train`) and where each input came from."""

    task: str
    cluster: dict[str, Any]  # the profile, as Cluster.describe() says it
    dtype: str
    peak_flops: float  # one device's, at dtype
    efficiency: float  # the share of that peak a step reaches
    efficiency_source: str  # measured, given, from the task's runs, or assumed
    flops_per_step: float
    gradient_bytes: float
    local_batch: int
    algorithm: str
    rows: list[dict[str, Any]]
    convergence: dict[str, Any] | None = None  # the samples-to-target fit, or why none
    published: list[dict[str, Any]] = field(default_factory=list)  # a replay's points
    notes: list[str] = field(default_factory=list)  # what to know before trusting the table

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def simulate_cluster(
    task: str,
    cluster_key: str,
    nodes: Sequence[int],
    devices_per_node: int | None = None,
    *,
    hardware_file: Path | None = None,
    efficiency: float | None = None,
    dtype: str = "fp32",
    runs: Sequence[Any] = (),
    local_batch: int | None = None,
    samples_per_s: float | None = None,
    curve: Curve | Sequence[Sequence[float]] | None = None,
    algorithm: str | None = None,
) -> ClusterSimulation:
    """`dmlbench simulate-cluster TASK --cluster PROFILE`: the scaling table and where its inputs
    came from. Compute comes, first found, from a measured ``curve`` of the device's
    step against its local batch, a measured ``samples_per_s`` of one device at the
    local batch, ``efficiency`` × the peak, the task's runs on that device, or the
    stated default. ``algorithm``: the flat ``ring`` over every device (gloo's), or
    ``hierarchical`` (inside each node, then among the nodes: NCCL's shape on NVLink
    and InfiniBand); by default the profile's."""
    if not nodes:
        raise SpecError("--nodes: at least one node count, e.g. 1,8,32")
    hardware = load_hardware(hardware_file)
    cluster = hardware.cluster(cluster_key)
    (chosen,) = algorithms_named([algorithm or cluster.profile.allreduce], TWO_LEVEL)
    cost = task_cost(task, local_batch)
    compute: float | None = None  # a measured step; None: the FLOPs over the peak × share
    notes: list[str] = []  # the curve's, where it was measured on another device
    if curve is not None:
        read = curve if isinstance(curve, Curve) else Curve.of(curve)
        if read.task is not None and read.task != task:
            raise SpecError(
                f"--curve: measured on {read.task}'s step, not {task}'s; measure "
                f"{task}'s with `dmlbench bench curve {task}`"
            )
        compute, source, notes = cluster.accelerator.step_from(read, dtype, cost.local_batch)
    elif samples_per_s is not None:
        compute = cost.local_batch / samples_per_s
        source = f"measured: {samples_per_s:,.0f} samples/s a device (given)"
    elif efficiency is not None:
        share, source = efficiency, "given (--efficiency)"
    elif measured := efficiency_from_runs(runs, cluster.accelerator, dtype, cost.local_batch):
        share, source = measured
        if share > 1:
            raise SpecError(
                f"the task's runs on {cluster.accelerator.name} reached {share:.0%} of its "
                f"{dtype} peak: they ran on tensor cores (torch runs float32 convolutions in "
                "TF32 by default); give --dtype tf32"
            )
    else:
        share = DEFAULT_EFFICIENCY
        source = (
            f"assumed: dmlbench's default {DEFAULT_EFFICIENCY:.0%}, not measured; for a "
            "measured one give --curve (`dmlbench bench curve` on the device), "
            "--samples-per-s or --efficiency"
        )
    if compute is not None:
        share = cost.flops_per_step / compute / cluster.accelerator.peak_flops(dtype)
    rows = scale(
        cluster,
        cost,
        nodes,
        devices_per_node,
        dtype=dtype,
        efficiency=share,
        algorithm=chosen,
        compute_s=compute,
    )
    return ClusterSimulation(
        task=task,
        cluster=cluster.describe(),
        dtype=dtype,
        peak_flops=cluster.accelerator.peak_flops(dtype),
        efficiency=share,
        efficiency_source=source,
        flops_per_step=cost.flops_per_step,
        gradient_bytes=cost.gradient_bytes,
        local_batch=cost.local_batch,
        algorithm=cluster.allreduce(chosen),
        rows=rows,
        notes=notes,
    )


def convergence_points(runs: Sequence[Any]) -> list[tuple[float, float]]:
    """(global batch, samples trained) of the runs that reached their target: the points
    samples to converge are fitted through (the store's own runs, or imported ones)."""
    return [
        (float(run.global_batch), float(run.samples))
        for run in runs
        if run.status == "success" and run.samples and run.global_batch
    ]


# Runs of one task whose passes over the data differ by more than this factor count
# other samples, in other units (see :func:`same_count`).
COUNT_SPREAD = 1.25


def same_count(runs: Sequence[Any]) -> tuple[list[Any], dict[int, int]]:
    """The runs whose epoch counts the same samples, and how many converged runs of each
    other count were left out. Where runs of one task count passes over the data more
    than :data:`COUNT_SPREAD` apart (``train_examples``), their batches and samples are
    in other units: v0.7's Transformer under NVIDIA's code counts 4,590,101 sentences an
    epoch and batches in tokens (61,440), under Google's 566,340 packed sequences and
    batches in them (512). The group kept is the largest that spans two batches."""
    groups: list[list[Any]] = []
    for run in sorted(runs, key=lambda r: r.summary.train_examples or 0):
        size = run.summary.train_examples or 0
        first = (groups[-1][0].summary.train_examples or 0) if groups else None
        if first is None or (size > first * COUNT_SPREAD) or (size == 0) != (first == 0):
            groups.append([])
        groups[-1].append(run)
    if len(groups) < 2:
        return list(runs), {}
    points = [convergence_points(group) for group in groups]
    fits = [i for i, found in enumerate(points) if len({b for b, _ in found}) > 1]
    kept = max(fits or range(len(groups)), key=lambda i: len(points[i]))
    left = {
        int(groups[i][0].summary.train_examples or 0): len(found)
        for i, found in enumerate(points)
        if i != kept and found
    }
    return groups[kept], left


def add_time_to_train(
    rows: list[dict[str, Any]], runs: Sequence[Any], source: str
) -> dict[str, Any]:
    """Time to train on each row of a cluster simulation: samples to converge at its
    global batch (McCandlish's form fitted through ``runs``, with its 95% band) over the
    row's throughput, plus evaluation at the runs' median share of training time; a
    gradient noise scale the runs measured (``B_simple``) is the fit's prior. Rows
    are left as they are, and the fit it returns says why, with fewer than two
    batches to fit. Open-division runs (recipes changed from the reference, which
    converge otherwise) are left out where the closed ones alone fit: a whole MLPerf
    round pooled SIAT's open recipes with the closed runs. Runs that count another
    number of samples an epoch are left out (:func:`same_count`)."""
    import statistics

    from dmlbench.perfmodel.convergence import fit

    runs, other_counts = same_count(runs)
    closed = [run for run in runs if getattr(run, "division", "closed") != "open"]
    points = convergence_points(runs)
    kept = convergence_points(closed)
    if len(kept) < len(points) and len({b for b, _ in kept}) > 1:
        runs, open_left_out, points = closed, len(points) - len(kept), kept
    else:
        open_left_out = 0
    batches = sorted({b for b, _ in points})
    if len(batches) < 2:
        return {
            "source": source,
            "note": f"time to train needs runs of {source} that reached the target at two or "
            f"more global batches (the store has {len(batches)}): run or import them "
            "(`results --import-mlperf`), or give --converge-from",
        }
    noise = [
        float(run.summary.noise_scale["b_simple"])
        for run in runs
        if run.finished
        and isinstance(run.summary.noise_scale, dict)
        and (run.summary.noise_scale.get("b_simple") or 0) > 0
    ]
    prior = statistics.median(noise) if noise else None  # McCandlish's B_simple ≈ B_noise
    scaling = fit(points, noise_scale=prior)
    shares = [
        run.summary.eval_s / run.summary.train_s
        for run in runs
        if run.status == "success" and run.summary.eval_s and run.summary.train_s
    ]
    eval_share = statistics.median(shares) if shares else 0.0
    for row in rows:
        batch = row["global_batch"]
        samples = scaling.predict(batch)
        low, high = scaling.band(batch)
        per_sample = (1 + eval_share) / row["samples_per_s"]
        row["samples_to_target"] = samples
        row["time_to_train_s"] = samples * per_sample if samples > 0 else None
        row["time_to_train_band_s"] = [max(low, 0.0) * per_sample, high * per_sample]
        row["extrapolated"] = scaling.extrapolates(batch)
    return {
        "source": source,
        "runs": len(points),
        "open_left_out": open_left_out,
        "epoch": runs[0].summary.train_examples if other_counts else None,
        "other_counts_left_out": other_counts,
        "batches": batches,
        "e_min": scaling.e_min,
        "b_noise": scaling.b_noise,
        "noise_scale_prior": prior,
        "eval_share": eval_share,
    }
