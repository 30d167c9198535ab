"""Published scaling results and dmlbench's predictions of them, cell by cell.

Each replay takes its inputs from the paper (hardware, model, batch, network), fits
nothing to the figures it predicts, and returns :class:`Cell` rows: the published figure,
the prediction and the relative error. ``benchmarks/replay_*.py`` print them;
``dmlbench simulate-cluster --cluster`` draws a replay's points beside its own curve.

- :func:`goyal`: Goyal et al. 2017 (ResNet-50 on Big Basin servers of 8 P100s, 50 Gbit/s
  Ethernet between them, all-reduced as their section 4.1 says). Compute is calibrated
  from their single-server baseline (29 hours for 90 epochs); 256 and 352 GPUs are
  predicted.
- :func:`ddp_benchmark`: the per-iteration latency PyTorch's DDP authors published for
  four ImageNet models on 1 to 16 V100s (DGX-1s, 4×100 Gb/s InfiniBand a machine), at
  25 MB and 1 MB buckets, DDP's own copies included (:func:`ddp_own_cost_s`). It stands
  in for Li et al. 2020 (the DDP paper), whose latencies are in figures no copy of which
  is reachable here; the table is text in torch's own repository. Compute is each
  model's one-GPU step without DDP.
- :func:`mlbench_2a`: mlbench's task 2a (logistic regression on epsilon, one worker per
  n1-standard-4 node, Open MPI). Compute is calibrated from the 2-worker communication
  share (11.7%, read off their figure); 4 to 64 workers are predicted.

The adadamp paper's Table 2 is replayed by ``dmlbench.dask.simulate`` (it is a
simulation of a Dask engine, not of a cluster).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dmlbench.perfmodel.cluster import TaskCost, scale
from dmlbench.perfmodel.hardware import Hardware
from dmlbench.perfmodel.model import Algorithm, CommCalibration, Link, allreduce_time

IMAGENET_TRAIN = 1_281_167


@dataclass(frozen=True)
class Cell:
    paper: str
    figure: str  # what was measured, in words
    workers: int
    published: float
    predicted: float
    unit: str
    comm_free: float | None = None  # the null model: the same prediction, communication free

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1

    @property
    def comm_free_error(self) -> float | None:
        return None if self.comm_free is None else self.comm_free / self.published - 1


def median_abs_error(cells: Sequence[Cell]) -> float:
    return statistics.median(abs(c.error) for c in cells)


# ---------------------------------------------------------------- Goyal et al. 2017

GOYAL = "Goyal et al. 2017, Accurate, Large Minibatch SGD"
GOYAL_CLUSTER = "goyal2017-bigbasin"
GOYAL_TASK = "imagenet-resnet50"
GOYAL_EPOCHS = 90
GOYAL_BASELINE_S = 29 * 3600
"""8 GPUs (one server), minibatch 256, 90 epochs: "29 hours" (the NVIDIA and Facebook
announcements). The paper's own section 5.5 gives no figure of it but a bound, an epoch
"from over 16 minutes" at minibatch 256 (29 hours is 19.3); its 352-GPU epoch (about 30
seconds) and step (12% longer than the baseline's) put the baseline's step at 235.6 ms,
within 2% of these 231.8 ms. Those two are scored below, so the announcement's figure,
which does not depend on them, stays the calibration."""
GOYAL_PUBLISHED: dict[int, tuple[str, float, str]] = {
    256: ("epoch at minibatch 8k (90 epochs in one hour)", 3600 / GOYAL_EPOCHS, "s"),
    352: ("epoch at minibatch 11k (section 5.5: about 30 seconds)", 30.0, "s"),
}
GOYAL_EFFICIENCY_256 = 0.90  # the abstract: ~90% scaling efficiency from 8 to 256 GPUs
GOYAL_STEP_GROWTH_352 = 1.12
"""Section 5.5: "the time per iteration increases only 12% while scaling the minibatch
size by 44×" (8 GPUs at 256 to 352 GPUs at 11k)."""


def goyal(hardware: Hardware, cost: TaskCost) -> tuple[list[Cell], dict[str, Any]]:
    """Goyal et al.'s cells, and the inputs and the calibration used."""
    cluster = hardware.cluster(GOYAL_CLUSTER)
    per_server = cluster.devices_per_node
    epoch_8 = GOYAL_BASELINE_S / GOYAL_EPOCHS
    steps_8 = IMAGENET_TRAIN / (per_server * cost.local_batch)
    measured_step = epoch_8 / steps_8
    # the compute that, with the modelled all-reduce inside one server, gives their step
    compute = measured_step
    for _ in range(5):
        one = scale(cluster, cost, [1], compute_s=compute, efficiency=1.0)[0]
        compute -= one["step_s"] - measured_step
    rows = scale(cluster, cost, [1, 32, 44], compute_s=compute, efficiency=1.0)
    by_workers = {row["workers"]: row for row in rows}
    # the null: communication free, every step the baseline's (so also linear scaling)
    cells = [
        Cell(
            GOYAL,
            words,
            workers,
            published,
            IMAGENET_TRAIN / by_workers[workers]["samples_per_s"],
            unit,
            comm_free=IMAGENET_TRAIN / (workers * cost.local_batch) * measured_step,
        )
        for workers, (words, published, unit) in GOYAL_PUBLISHED.items()
    ]
    cells.append(
        Cell(
            GOYAL,
            "scaling efficiency, 8 to 256 GPUs (abstract: ~90%)",
            256,
            GOYAL_EFFICIENCY_256,
            by_workers[256]["efficiency"],
            "",
            comm_free=1.0,
        )
    )
    cells.append(
        Cell(
            GOYAL,
            "time per iteration, 8 to 352 GPUs (section 5.5: 12% longer)",
            352,
            GOYAL_STEP_GROWTH_352,
            by_workers[352]["step_s"] / by_workers[8]["step_s"],
            "×",
            comm_free=1.0,
        )
    )
    inputs = {
        "cluster": cluster.describe(),
        "task": cost.task,
        "local_batch": cost.local_batch,
        "flops_per_step": cost.flops_per_step,
        "gradient_bytes": cost.gradient_bytes,
        "calibration": (
            f"their 8-GPU baseline: 29 h for 90 epochs = {measured_step * 1e3:.1f} ms a step"
        ),
        "allreduce": cluster.allreduce(),
        "compute_step_s": compute,
        "achieved_tflops": cost.flops_per_step / compute / 1e12,
        "rows": rows,
    }
    return cells, inputs


GOYAL_ASSUMED = {  # the constants no source gives, each over a range held reasonable
    "latency_us": (5.0, 25.0, 100.0),  # one way, kernel TCP in one data centre
    "message_cost_us": (5.0, 15.0, 50.0),  # software per message (α)
    "gbit_per_s": (25.0, 50.0, 50.0),  # 50 Gbit/s nominal; half if one port of two
}


def goyal_sensitivity(hardware: Hardware, cost: TaskCost) -> list[dict[str, Any]]:
    """The errors of Goyal et al.'s cells as each assumed constant of the inter-server
    link moves over its range (the others at their profile values): how much of the
    replay's agreement rests on constants no source gives."""
    rows = []
    base = hardware.interconnects[hardware.clusters[GOYAL_CLUSTER].inter]
    for constant, values in GOYAL_ASSUMED.items():
        for value in sorted(set(values)):
            changed = hardware.model_copy(deep=True)
            link = changed.interconnects[changed.clusters[GOYAL_CLUSTER].inter]
            setattr(link, constant, value)
            cells, _ = goyal(changed, cost)
            rows.append(
                {
                    "constant": constant,
                    "value": value,
                    "profile": getattr(base, constant),
                    "errors": {f"{c.workers} {c.unit or 'eff'}": c.error for c in cells},
                }
            )
    return rows


def published_points(task: str, cluster: str) -> list[dict[str, Any]]:
    """The published (devices, speedup over one node) a replay has for ``task`` on the
    ``cluster`` profile, for `dmlbench simulate-cluster --cluster`'s figure and table."""
    if (task, cluster) == (GOYAL_TASK, GOYAL_CLUSTER):
        epoch_8 = GOYAL_BASELINE_S / GOYAL_EPOCHS
        return [
            {"workers": w, "speedup": epoch_8 / seconds, "source": GOYAL}
            for w, (_, seconds, _) in GOYAL_PUBLISHED.items()
        ]
    if (task, cluster) == (GOYAL_TASK, DDP_CLUSTER):  # ResNet-50 at 32 images a GPU
        step = dict(zip(DDP_GPUS, DDP_BUCKET_25MB_P50_S["resnet50"], strict=True))
        return [
            {"workers": w, "speedup": w / 8 * step[8] / step[w], "source": DDP_BENCHMARK}
            for w in (8, 16)
        ]
    return []


# ---------------------------------------------------------------- mlbench task 2a

MLBENCH = "mlbench task 2a (epsilon logistic regression), published benchmark results"
MLBENCH_SHARE = {2: 0.117, 4: 0.171, 8: 0.234, 16: 0.260, 32: 0.337, 64: 0.360}
"""Communication's share of a step, read off mlbench's figure (mlbench/mlbench-docs,
``images/results/task2a/communication_time_ratio.png``, 575×455 pixels): each stacked
bar's boundary row between its two colours, against the bars' 0 and 100 (348 pixel rows
apart, 3.5 a percentage point), so each reading is within about ±0.3 points: about 12%
at 2 workers and 36% at 64."""
MLBENCH_SOURCE = "mlbench/mlbench-docs images/results/task2a/communication_time_ratio.png"
MLBENCH_FEATURES = 2_000
MLBENCH_LINK = Link(7.5e9 / 8, 50e-6)
"""About 7.5 Gbit/s between n1-standard-4 nodes (mlbench's own measurement); one-way
latency assumed 50 µs, typical of VMs in one Google Cloud zone (half a round trip of
about 0.1 ms)."""
MLBENCH_MESSAGE_COST_S = 11.7e-6
"""Open MPI's TCP, one 8,004-byte message: half a ping-pong's round trip between two
processes on loopback (no wire), measured on its own, before this replay used it
(``benchmarks/mpi_call_cost.py``, ``benchmarks/results/mpi_call_cost.json``: Open MPI
5.0, a 2-core Intel Xeon; launches 10.0–12.3 µs). It was assumed 20 µs before."""
MLBENCH_CALL_COST_S = 55.1e-6
"""What one aggregation costs beyond its message steps, measured the same way: an
MPI_Allreduce at 2 processes less one MPI_Sendrecv (12.1 µs: the call's own work), and
mlbench's host work around the call in torch (43.0 µs: pack the weights into one
tensor, divide, unpack into views, give them back; launches 27.2–43.4 µs). It leaves
out torch's MPI process group handing the call to its worker thread, so it is a floor."""
MLBENCH_ASSUMED_MESSAGE_COST_S = 20e-6
"""The earlier replay's assumption, for the comparison it prints."""
MLBENCH_ALGORITHM: Algorithm = "tree"
"""mlbench's base image builds Open MPI 4.0.5, whose fixed decision rule all-reduces
anything under 10,000 bytes by recursive doubling: ⌈log2 N⌉ rounds. The model's tree has
the same growth (2⌈log2 N⌉ message steps)."""


def mlbench_2a(workers: Sequence[int] = (2, 4, 8, 16, 32, 64)) -> tuple[list[Cell], dict[str, Any]]:
    """The communication share at 4 to 64 workers, compute calibrated at 2: each
    aggregation a fixed cost per call plus the all-reduce's message steps."""
    size = 4 * (MLBENCH_FEATURES + 1)

    def shares(
        message_s: float, call_s: float, link: Link = MLBENCH_LINK
    ) -> dict[int, dict[str, float]]:
        calibration = CommCalibration(
            alpha_s=message_s, host_busbw=float("inf"), link_efficiency=1.0, latencies_per_step=1.0
        )

        def comm(n: int) -> float:
            return call_s + allreduce_time(MLBENCH_ALGORITHM, n, size, link, calibration)

        share_2 = MLBENCH_SHARE[2]
        compute = comm(2) * (1 - share_2) / share_2  # weak scaling: the same local batch
        # the all-reduce comes after the compute: a linear model has no backward to hide it
        return {
            n: {"compute_s": compute, "comm_s": comm(n), "share": comm(n) / (compute + comm(n))}
            for n in workers
        }

    at = shares(MLBENCH_MESSAGE_COST_S, MLBENCH_CALL_COST_S)
    rows = [{"workers": n, **figures} for n, figures in at.items()]
    scored = [n for n in workers if n != 2 and n in MLBENCH_SHARE]
    cells = [
        Cell(MLBENCH, "communication's share of a step", n, MLBENCH_SHARE[n], at[n]["share"], "")
        for n in scored
    ]
    before = shares(MLBENCH_ASSUMED_MESSAGE_COST_S, 0.0)
    # the latency is assumed: the call cost makes the shares depend on it
    latencies = {
        f"{latency * 1e6:g} µs": shares(
            MLBENCH_MESSAGE_COST_S, MLBENCH_CALL_COST_S, Link(MLBENCH_LINK.bandwidth, latency)
        )
        for latency in (25e-6, 100e-6)
    }
    inputs = {
        "gradient_bytes": size,
        "link": {"gbit_per_s": 7.5, "latency_us": MLBENCH_LINK.latency_s * 1e6},
        "message_cost_us": MLBENCH_MESSAGE_COST_S * 1e6,
        "call_cost_us": round(MLBENCH_CALL_COST_S * 1e6, 1),
        "algorithm": MLBENCH_ALGORITHM,
        "published": f"read off their figure ({MLBENCH_SOURCE}) by its pixel rows",
        "calibration": (
            f"their {MLBENCH_SHARE[2]:.1%} at 2 workers: compute "
            f"{at[2]['compute_s'] * 1e6:.0f} µs a step"
        ),
        "errors_without_the_call_cost": {  # the replay before, message cost assumed 20 µs
            n: before[n]["share"] / MLBENCH_SHARE[n] - 1 for n in scored
        },
        "errors_of_the_null_that_comm_does_not_grow": {  # the share stays at 2 workers'
            n: MLBENCH_SHARE[2] / MLBENCH_SHARE[n] - 1 for n in scored
        },
        **{
            f"errors_at_latency_{name}": {
                n: figures[n]["share"] / MLBENCH_SHARE[n] - 1 for n in scored
            }
            for name, figures in latencies.items()
        },
        "rows": rows,
    }
    return cells, inputs


# ---------------------------------------------------------------- PyTorch's DDP benchmark

DDP_BENCHMARK = (
    "PyTorch's DDP benchmark (pytorch/pytorch benchmarks/distributed/ddp/README.md), "
    "by the authors of torch's DDP"
)
DDP_CLUSTER = "dgx1-v100-edr"
"""The README's machines: DGX-1s (its `nvidia-smi topo -m`: 8 V100s in NVLink's hybrid
cube mesh, 4 Mellanox NICs; its text: "4x 100Gb InfiniBand per machine")."""
DDP_LOCAL_BATCH = 32
DDP_GPUS = (1, 2, 4, 8, 16)  # 16 = two machines of 8 ("2M/8G")
DDP_MODELS: dict[str, dict[str, int]] = {
    "resnet50": {"depth": 50},
    "resnet101": {"depth": 101},
    "resnext50_32x4d": {"depth": 50, "groups": 32, "width_per_group": 4},
    "resnext101_32x8d": {"depth": 101, "groups": 32, "width_per_group": 8},
}
DDP_NO_DDP_S = {  # one GPU without DDP, p50: the compute each prediction starts from
    "resnet50": 0.097,
    "resnet101": 0.162,
    "resnext50_32x4d": 0.145,
    "resnext101_32x8d": 0.415,
}
DDP_BUCKET_25MB_P50_S = {  # the example output: DDP's default bucket_cap_mb=25, p50
    "resnet50": (0.100, 0.103, 0.103, 0.104, 0.104),
    "resnet101": (0.171, 0.176, 0.176, 0.179, 0.179),
    "resnext50_32x4d": (0.147, 0.153, 0.153, 0.157, 0.157),
    "resnext101_32x8d": (0.425, 0.438, 0.439, 0.447, 0.450),
}
DDP_BUCKET_1MB_P75_S = {  # "How to diff": the same runs with bucket_cap_mb=1, p75
    "resnet50": (0.101, 0.104, 0.105, 0.107, 0.108),
    "resnet101": (0.172, 0.179, 0.180, 0.184, 0.187),
    "resnext50_32x4d": (0.149, 0.156, 0.156, 0.159, 0.161),
    "resnext101_32x8d": (0.427, 0.444, 0.444, 0.452, 0.455),
}


def ddp_benchmark(hardware: Hardware) -> tuple[list[Cell], dict[str, Any]]:
    """Seconds per iteration of four ImageNet models with DDP on 1 to 16 V100s, at DDP's
    default 25 MB buckets and at 1 MB, each model's compute taken from its own one-GPU
    run without DDP (the README's "no ddp" row) and nothing else from the table."""
    from dmlbench.perfmodel.cluster import MIB, ddp_own_cost_s, model_cost
    from dmlbench.spec.recipe import ModelSpec

    cluster = hardware.cluster(DDP_CLUSTER)
    cells: list[Cell] = []
    rows: list[dict[str, Any]] = []
    costs: dict[str, dict[str, float]] = {}
    for name, options in DDP_MODELS.items():
        spec = ModelSpec(name="imagenet-resnet", options=options)
        cost = model_cost(name, spec, (3, 224, 224), 1000, DDP_LOCAL_BATCH)
        costs[name] = {
            "flops_per_step": cost.flops_per_step,
            "gradient_bytes": cost.gradient_bytes,
            "parameter_tensors": cost.parameter_tensors,
            "ddp_own_s": ddp_own_cost_s(cost, cluster.accelerator),
            "achieved_tflops": cost.flops_per_step / DDP_NO_DDP_S[name] / 1e12,
        }
        for cap_mb, published, quantile in (
            (25, DDP_BUCKET_25MB_P50_S[name], "p50"),
            (1, DDP_BUCKET_1MB_P75_S[name], "p75"),
        ):
            for gpus, seconds in zip(DDP_GPUS, published, strict=True):
                nodes, per_node = (gpus // 8, 8) if gpus > 8 else (1, gpus)
                (row,) = scale(
                    cluster,
                    cost,
                    [nodes],
                    per_node,
                    efficiency=1.0,
                    compute_s=DDP_NO_DDP_S[name],
                    bucket_cap=cap_mb * MIB,
                    ddp_cost=True,
                    algorithm="ring",  # NCCL's ring through both machines' GPUs
                )
                figure = f"{name}, s/iteration ({quantile}), {cap_mb} MB buckets"
                free = row["compute_s"] + row["ddp_own_s"]  # the null: no communication
                cells.append(
                    Cell(DDP_BENCHMARK, figure, gpus, seconds, row["step_s"], "s", comm_free=free)
                )
                rows.append({"model": name, "bucket_mb": cap_mb, **row})
    inputs = {
        "cluster": cluster.describe(),
        "software": "PyTorch 1.4.0a0, CUDA 10.0, NCCL (the README's header)",
        "local_batch": DDP_LOCAL_BATCH,
        "models": costs,
        "calibration": "each model's one-GPU step without DDP (p50) is its compute",
        "ddp_own_cost": (
            "a copy kernel per parameter tensor into its bucket and back (2 × 3.8 µs, NVIDIA's "
            "CUDA Graphs blog) + the gradients read and written twice at the V100's 900 GB/s"
        ),
        "rows": rows,
    }
    return cells, inputs
