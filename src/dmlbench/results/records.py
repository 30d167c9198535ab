"""What the store gives back: typed records of training runs and micro-benchmarks.

One class per stored row, its fields the store's columns (JSON columns decoded), so the
report layer, the CLI and mypy see one shape. ``summary`` is the run's event-log
summary (:func:`dmlbench.results.summary.summarize`), a pydantic model read by
attribute; an unfinished run's has only ``finished`` False.

``as_dict()`` is the JSON form ``dmlbench results --json`` prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

FINISHED = ("success", "target_not_reached", "throughput")  # a run that ended as planned
SINGLE_RUNS = "single runs"  # what tables call the runs of no sweep (``--sweep`` takes it)


def run_title(task: str, model: str | None, deviations: Mapping[str, Any]) -> str:
    """A run's title: its task, with the model it ran where that is not the task's own
    (``imagenet-resnet50 (model vgg16)``), for a stored run and a planned one alike."""
    return f"{task} (model {model})" if "recipe.model.name" in deviations else task


def matching_ids(fragment: str, ids: Iterable[str]) -> list[str]:
    """``[fragment]`` where it is an id, else every id that starts or ends with it."""
    ids = list(ids)
    if fragment in ids:
        return [fragment]
    return [i for i in ids if i.startswith(fragment) or i.endswith(fragment)]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stored:
    """What every stored run has, a training run or a micro-benchmark: who it is, how it
    ended, where it ran and with what; and what it answers: its layout, its JSON form."""

    run_id: str
    status: str  # running | success | target_not_reached | throughput | failed | interrupted
    created_at: str
    workers: int
    spec: dict[str, Any]
    environment: dict[str, Any]
    run_dir: str
    finished_at: str | None = None
    error: str | None = None
    host: str | None = None
    cpu_model: str | None = None
    cores: int | None = None
    torch_version: str | None = None
    git_revision: str | None = None
    launcher_pid: int | None = None

    @property
    def nodes(self) -> int:
        return int(self.spec.get("nodes") or 1)

    @property
    def on_cpu(self) -> bool:
        """Whether its workers ran on CPUs: each kind of record knows from what it keeps."""
        raise NotImplementedError

    @property
    def workers_per_host(self) -> int:
        """The workers that shared a host's cores: all of them (a micro-benchmark's run
        on its host, an emulated cluster's nodes too)."""
        return self.workers

    @property
    def oversubscribed(self) -> bool:
        """More CPU workers on a host than its cores: its times include waiting for one."""
        cores = self.cores or 0
        return self.on_cpu and cores > 0 and self.workers_per_host > cores

    def as_dict(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        summary = getattr(self, "summary", None)
        if summary is not None:  # the keys it was given, as the store keeps them
            fields["summary"] = summary.model_dump(mode="json", exclude_unset=True)
        return fields


class StopDetails(BaseModel):
    """The ``run_stop`` fields only some makers set, declared once for :class:`RunStop`
    (what is logged) and :class:`RunSummary` (what is read back)."""

    # the trainer's (per rank where a list)
    warmup_steps_excluded: int | None = None
    steady_steps: int | None = None
    phases: list[dict[str, float]] | None = None  # per rank, seconds per phase
    phases_steady: list[dict[str, float]] | None = None
    bytes_sent: list[float] | None = None
    bytes_per_step: float | None = None
    peak_memory_bytes: list[float] | None = None
    page_faults_per_step: list[float] | None = None
    noise_scale: dict[str, Any] | None = None
    recompiles_in_clock: int | None = None
    cpu_samples: list[dict[str, Any]] | None = None
    memory_start_bytes: list[float] | None = None  # per rank, when its trainer started
    training_peak_bytes: list[float] | None = None  # per rank: the most in training steps
    # per rank: what it holds (a shard when sharded)
    parameter_bytes_local: list[float] | None = None
    optimizer_state_bytes: list[float] | None = None
    # the Dask fit's
    throughput: float | None = None
    largest_batch: int | None = None  # the batch grows
    most_workers: int | None = None
    # worker-seconds the cluster was scaled to: the whole fit, and up to the target
    worker_s: float | None = None
    worker_s_to_target: float | None = None
    notes: list[str] | None = None


class RunSummary(StopDetails):
    """A run's summary, as :func:`dmlbench.results.summary.summarize` makes it from the
    run's event log (``run_start``, ``init_start`` and ``run_stop``'s metadata, and what
    follows from them), validated there once, and as the launch paths complete it.
    Read as attributes; a field none of the run's events gave is None. Stored as JSON:
    a field the trainer starts to log is one line here, a store's older summaries lack
    newer fields (None), and a key this version does not know is kept as an extra."""

    model_config = ConfigDict(extra="allow")

    finished: bool = False  # run_stop was logged; False: the run crashed or was stopped
    status: str | None = None
    stop_reason: str | None = None  # target_reached, time_budget, max_epochs, max_steps
    # run_start
    world_size: int | None = None
    local_batch: int | None = None
    global_batch: int | None = None
    steps_per_epoch: int | None = None
    step_limit: int | None = None
    target: float | None = None
    goal: str | None = None  # accuracy or loss: see Recipe.goal (absent before: accuracy)
    tokens_per_sample: int | None = None  # a language model's sequence length
    train_examples: int | None = None
    test_examples: int | None = None
    threads_per_worker: int | None = None
    device: str | None = None
    backend: str | None = None
    exchange: str | None = None
    comm_overlapped: bool | None = None
    parameters: int | None = None
    gradient_bytes: int | None = None
    flops_per_step: float | None = None
    peak_flops_per_s: float | None = None
    peak_source: str | None = None
    channels_last: bool | None = None
    compiled: bool | str | None = None  # True, or torch.compile's mode
    compile_s: float | None = None
    cpu_allocator: str | None = None
    engine: str | None = None  # "dask" for a Dask fit
    # init_start: where the ranks ran
    nodes: int | None = None
    nproc_per_node: int | None = None
    hosts: list[str] | None = None
    init_s: float | None = None  # data load + model build, before the clock starts
    # run_stop
    steps: int | None = None
    epochs: float | None = None
    samples: int | None = None
    elapsed_s: float | None = None
    eval_s: float | None = None
    train_s: float | None = None
    time_to_accuracy_s: float | None = None
    time_to_accuracy_compute_s: float | None = None
    best_metric: float | None = None
    memory_account: dict[str, Any] | None = None  # the whole model's: see perfmodel.memory
    # derived from the above
    rank_nodes: list[int] | None = None
    step_time_s: float | None = None
    phase_shares: dict[str, dict[str, float]] | None = None
    samples_per_s_per_worker: float | None = None
    flops_per_s: float | None = None
    utilisation: float | None = None
    contention: dict[str, Any] | None = None
    # the launch paths
    emulated_nodes: bool | None = None
    rank0_node: int | None = None
    slurm_job: str | None = None
    # an imported run (results.mlperf): MLPerf's own scoring of it
    mlperf: dict[str, Any] | None = None


class RunStop(StopDetails):
    """What a run's ``run_stop`` event holds, as the trainer or the Dask fit makes it:
    the one place its fields are named, so a misspelt or unknown one is refused where it
    is made, not found missing in a report. :func:`~dmlbench.results.summary.summarize`
    builds the :class:`RunSummary` from it and the run's other events."""

    model_config = ConfigDict(extra="forbid")

    status: str
    stop_reason: str
    steps: int
    epochs: float
    samples: int
    elapsed_s: float
    eval_s: float
    time_to_accuracy_s: float | None
    time_to_accuracy_compute_s: float | None
    best_metric: float | None
    target: float | None
    memory_account: dict[str, Any] | None = None  # the trainer's: see perfmodel.memory

    def metadata(self) -> dict[str, Any]:
        """The event's metadata: the fields its maker set (None ones included)."""
        return self.model_dump(exclude_unset=True)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One evaluation of a run: where it happened and what it measured."""

    epoch: float
    step: int
    samples: int
    elapsed_s: float  # wall clock since the run started, evaluation included
    compute_elapsed_s: float  # the same without time spent evaluating
    metric: float
    loss: float
    train_metric: float | None = None  # on a fixed subset of the training set, if asked


@dataclass(frozen=True, slots=True)
class PhaseTotal:
    """Seconds one rank spent in one phase: whole run and steady state (after warm-up)."""

    rank: int
    phase: str
    seconds: float
    steady_seconds: float | None


@dataclass(frozen=True, slots=True)
class RunRecord(_Stored):
    """A training run as stored: identity, outcome, where it ran, and its records."""

    task: str
    division: str  # closed: the reference recipe; open: it differs (see deviations)
    local_batch: int
    global_batch: int
    seed: int
    exchange: str
    deviations: dict[str, Any]
    stop_reason: str | None = None
    target: float | None = None
    best_metric: float | None = None
    time_to_accuracy_s: float | None = None
    time_to_accuracy_compute_s: float | None = None
    epochs: float | None = None
    steps: int | None = None
    samples: int | None = None
    elapsed_s: float | None = None
    throughput: float | None = None
    gpus: list[str] = field(default_factory=list)
    summary: RunSummary = field(default_factory=RunSummary)
    sweep: str | None = None  # the sweep it belongs to; None for a single run
    scaling: str | None = None
    repeat: int | None = None
    run_key: str | None = None
    point: dict[str, Any] | None = None  # what the sweep varies, at this run
    network: str | None = None  # the emulated network's label; "none" when unshaped
    # Others took the CPU its workers asked for (results.contention); None: not measured
    disturbed: bool | None = None
    # Where a run that ran elsewhere comes from (an MLPerf log: round, submitter, system,
    # path, commit); None for a run of this store's own
    origin: dict[str, Any] | None = None
    evals: list[Evaluation] = field(default_factory=list)
    phases: list[PhaseTotal] = field(default_factory=list)

    @property
    def external(self) -> bool:
        """Whether it ran elsewhere and was imported (read-only)."""
        return self.origin is not None

    @property
    def finished(self) -> bool:
        """Whether it ended as planned (target reached or its limit hit)."""
        return self.status in FINISHED

    @property
    def elastic(self) -> bool:
        """A Dask fit: on up to ``workers`` workers, its batch grown to the summary's
        ``largest_batch``."""
        return self.summary.engine == "dask"

    @property
    def workers_per_host(self) -> int:
        """All of its workers on one host or on an emulated cluster (its nodes are this
        host's namespaces), a node's on a real one."""
        if self.summary.emulated_nodes or (self.summary.nodes or self.nodes) == 1:
            return self.workers
        return self.summary.nproc_per_node or self.workers

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def sweep_title(self) -> str:
        """Its sweep as tables name it (``single runs``: no sweep's)."""
        return self.sweep or SINGLE_RUNS

    @property
    def device(self) -> str:
        """What a worker ran on: ``cpu``, or its accelerator's name (a CUDA run's is the
        host's first GPU's; an imported run's, its system's)."""
        device = str(self.summary.device or "cpu")
        if device.startswith("cuda"):
            return self.gpus[0] if self.gpus else "cuda"
        return device

    @property
    def goal(self) -> str:
        """What ``target`` is: ``accuracy`` or ``loss`` (see ``Recipe.goal``)."""
        recipe = self.spec.get("recipe") or {}
        return str(self.summary.goal or recipe.get("goal") or "accuracy")

    @property
    def precision(self) -> str:
        """The recipe's precision (``fp32``, ``tf32``, ``bf16``; see ``Recipe.precision``)."""
        return str((self.spec.get("recipe") or {}).get("precision", "fp32"))

    @property
    def model(self) -> str | None:
        """The recipe's model by name (``resnet``); None where the spec names none (an
        imported run's)."""
        name = ((self.spec.get("recipe") or {}).get("model") or {}).get("name")
        return None if name is None else str(name)

    @property
    def title(self) -> str:
        """Its task, with the model it ran where that is not the task's own."""
        return run_title(self.task, self.model, self.deviations)

    @property
    def measured_memory(self) -> int | None:
        """A worker's memory in training steps as measured: its peak less its memory when
        the trainer started, the most of any worker; None where not measured."""
        peaks = self.summary.training_peak_bytes or []
        starts = self.summary.memory_start_bytes or []
        if not peaks or len(peaks) != len(starts):
            return None
        return int(max(peak - start for peak, start in zip(peaks, starts, strict=True)))

    @property
    def best(self) -> float | None:
        """Its best evaluation in its goal's terms: the lowest test loss for a loss goal,
        the highest accuracy otherwise."""
        if self.goal == "loss":
            return min((e.loss for e in self.evals), default=None)
        return self.best_metric

    @property
    def best_eval(self) -> Evaluation | None:
        """The evaluation :attr:`best` names (the first of equals), None before any."""
        if not self.evals:
            return None
        if self.goal == "loss":
            return min(self.evals, key=lambda e: e.loss)
        return max(self.evals, key=lambda e: e.metric)


@dataclass(frozen=True, slots=True)
class CommResult:
    """One message size of a micro-benchmark: latency over repeats and bandwidths."""

    bytes: int
    repeats: int
    iterations: int
    latency_s: float  # median over repeats
    latency_min_s: float
    latency_max_s: float
    latency_std_s: float
    algbw: float  # bytes / latency
    busbw: float  # algbw × the collective's traffic factor (2(n-1)/n for all-reduce)
    scope: str | None = None  # on an emulated cluster: "all", "node" or "hierarchical"


@dataclass(frozen=True, slots=True)
class CommRun(_Stored):
    """A communication micro-benchmark as stored, with its per-size results."""

    op: str
    backend: str
    network: str
    results: list[CommResult] = field(default_factory=list)

    @property
    def on_cpu(self) -> bool:
        return self.spec.get("device") == "cpu" or not self.environment.get("gpus")
