"""RunSpec: one benchmark run, fully resolved before any process starts."""

from __future__ import annotations

import difflib
import os
import reprlib
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from dmlbench.catalogue import OPEN_EXCHANGES
from dmlbench.netem.profiles import NetworkSpec
from dmlbench.spec.recipe import Recipe
from dmlbench.strict import (
    MAX_COUNT,
    MAX_SEED,
    MAX_THREADS,
    WorkersSpec,
)


def absolute_folder(folder: Path) -> Path:
    """``folder`` as where it was named means it, not where a worker, a re-run from the
    stored spec or a Slurm job starts: ``~`` expanded, a relative folder made absolute."""
    return Path(os.path.abspath(folder.expanduser()))


DEFAULT_DATA_DIR = absolute_folder(
    Path(os.environ.get("DMLBENCH_DATA", Path.home() / ".cache" / "dmlbench"))
)


# Exchanges that take channels-last parameters and gradients as they are (the others view
# parameters as one flat vector, which needs them contiguous).
CHANNELS_LAST_EXCHANGES = ("allreduce", "ddp")


class RunSpec(WorkersSpec):
    """What to run and how. ``recipe`` is the closed-division part; the rest is runtime."""

    task: str = Field(description="registered task name, see `dmlbench tasks`")
    workers: int = Field(1, ge=1, le=4096, description="world size: worker processes")
    nodes: int = Field(
        1,
        ge=1,
        le=1024,
        description="hosts the workers are spread over (nodes × nproc_per_node "
        "= workers); more than one on this machine: an emulated cluster (root)",
    )
    nproc_per_node: int | None = Field(
        None, ge=1, le=4096, description="workers per node; default workers / nodes"
    )
    seed: int = Field(0, ge=0, le=MAX_SEED, description="model init, data order and augmentation")
    recipe: Recipe
    global_batch: int | None = Field(
        None,
        gt=0,
        le=MAX_COUNT,
        description="if set, local batch = global_batch / workers (strong scaling)",
    )
    exchange: str = Field(
        "allreduce",
        description="how gradients are exchanged (`dmlbench exchanges` lists them with "
        "their options). allreduce: one flat all-reduce after backward (comm measured "
        "alone); ddp: DistributedDataParallel's bucketed all-reduce overlapped with "
        "backward; zero1 and fsdp: sharded optimizer state, or parameters too; open "
        f"division: {', '.join(OPEN_EXCHANGES)}",
    )
    exchange_options: dict[str, Any] = Field(
        default_factory=dict,
        description="the exchange's own settings, e.g. local-sgd's period (H) and sync_epochs, "
        "powersgd's rank, topk's ratio, gossip's topology, ssp's staleness",
    )
    noise_scale: bool | Literal["auto"] = Field(
        "auto",
        description="measure the gradient noise scale B_simple from each worker's gradient "
        "and their average (synchronous exchanges only). auto: with more than one worker; "
        "true: also on one worker, which then runs each batch as two halves; false: never",
    )
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="auto: the GPUs where the host has CUDA, else the CPU. A GPU worker "
        "takes its local rank's GPU, so a node runs at most as many as it has GPUs",
    )
    threads_per_worker: int | None = Field(
        None,
        ge=1,
        le=MAX_THREADS,
        description="default: cores / workers; at launch at most "
        "DMLBENCH_THREADS_PER_CORE (default 4) × cores among a node's workers",
    )
    channels_last: bool | Literal["auto"] = Field(
        "auto",
        description="convolutional models (and their images) in channels-last memory "
        "layout: the same maths, faster kernels. auto: on for models with 2-D convolutions",
    )
    compile: bool | Literal["reduce-overhead", "max-autotune"] = Field(
        False,
        description="torch.compile the model before the clock starts (compile time is "
        "reported apart); the same maths, fused kernels. true: inductor's default mode; "
        "reduce-overhead: also CUDA graphs on a GPU, so the host launches a step's forward "
        "and backward at once, not kernel by kernel; max-autotune: also tunes kernels",
    )
    cpu_allocator: Literal["jemalloc", "tuned", "default", "returning"] = Field(
        "jemalloc",
        description="jemalloc: the workers run on jemalloc, preloaded and told to keep the "
        "memory a step frees for the next step instead of returning it to the kernel and "
        "faulting it in again (where it is not installed, the run says so and uses tuned); "
        "the same maths. tuned: glibc, its thresholds fixed so it keeps what it frees up "
        "to 32 MiB a block. default: glibc's own, whose thresholds depend on the largest "
        "block the process has freed so far. returning: from the workers' start, glibc maps "
        "every block of 4 KiB or more on its own and gives it back to the kernel when freed, "
        "and MKL keeps no buffers between calls, so resident memory follows the live tensors "
        "(slower; for measuring memory)",
    )
    peak_tflops: float | None = Field(
        None,
        gt=0,
        description="a worker's peak TFLOP/s that utilisation is measured against (an "
        "accelerator's data sheet figure); default: a GEMM probe on this machine",
    )
    eval_every_epochs: int = Field(1, ge=1)
    stop_at_target: bool = Field(True, description="stop when the target is reached")
    max_steps: int | None = Field(
        None, ge=1, le=MAX_COUNT, description="stop after this many updates"
    )
    stall_timeout_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="a worker with no heartbeat or no training progress for this many "
        "seconds is stopped and the run fails, naming it",
    )
    warmup_steps_excluded: int = Field(
        5, ge=0, description="first updates left out of throughput and phase shares"
    )
    data_dir: Path = Field(
        DEFAULT_DATA_DIR,
        description="where datasets are found or downloaded",
        json_schema_extra={"shown_default": "`~/.cache/dmlbench`, env `DMLBENCH_DATA`"},
    )
    download: bool = Field(True, description="download a missing dataset (checksum verified)")
    partial_data: bool = Field(
        False,
        description="accept data whose example counts differ from the official dataset's "
        "(a subset for quick checks); the run is open division",
    )
    synthetic_data: bool = Field(
        False,
        description="DLBS's throughput mode: random images of the task's shape, made once on "
        "the device, instead of its data (nothing is read or decoded, nothing evaluated); "
        "run warmup_steps_excluded + the timed steps with max_steps",
    )
    loader_processes: int | Literal["auto"] = Field(
        "auto",
        description="processes per worker that decode file-backed images (ImageNet) ahead of "
        "the step; 0: in the worker itself; auto: the worker's share of the cores, 1 to 4",
    )
    validation_split: float = Field(
        0.0,
        ge=0.0,
        le=0.5,
        description="hold out this share of the training set (the same examples in every "
        "run) and evaluate on it instead of the test set, which stays untouched: for "
        "tuning (mlbench's protocol holds out 0.2); the run is open division",
    )
    train_metric_examples: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="at each evaluation also measure the metric and loss on this many "
        "training examples (a fixed subset, without augmentation): training accuracy; "
        "0: off",
    )
    save_model: bool = Field(False, description="rank 0 saves final weights as model.pt")
    plugins: list[str] = Field(
        default_factory=list,
        description="modules imported first (--plugin, DMLBENCH_PLUGINS); they may register "
        "tasks and models",
    )
    network: NetworkSpec = Field(
        default_factory=NetworkSpec,
        description="emulated network: each worker in its own namespace, shaped with tc; "
        "a profile or a rate alone (network: 1gbit) sets its link, as --network does",
    )

    @field_validator("data_dir")
    @classmethod
    def _absolute_data_dir(cls, folder: Path) -> Path:
        """Where the spec is resolved (see :func:`absolute_folder`)."""
        return absolute_folder(folder)

    @model_validator(mode="after")
    def _derive_layout(self) -> RunSpec:
        """workers = nodes × nproc_per_node: either may be given, the other follows."""
        if self.nproc_per_node is None:
            if self.workers % self.nodes:
                raise ValueError(
                    f"workers {self.workers} do not divide among {self.nodes} nodes; "
                    "give nproc_per_node (workers per node) instead"
                )
            self.nproc_per_node = self.workers // self.nodes
        elif self.workers not in (1, self.nodes * self.nproc_per_node):
            raise ValueError(
                f"workers {self.workers} is not nodes {self.nodes} × nproc_per_node "
                f"{self.nproc_per_node}; give one of workers and nproc_per_node"
            )
        else:
            self.workers = self.nodes * self.nproc_per_node
            if self.workers > 4096:
                raise ValueError(f"{self.workers} workers: at most 4096")
        return self

    @model_validator(mode="after")
    def _derive_local_batch(self) -> RunSpec:
        if self.global_batch is not None:
            if self.global_batch % self.workers:
                raise ValueError(
                    f"global_batch {self.global_batch} is not divisible by workers "
                    f"{self.workers}; pick a multiple of {self.workers}"
                )
            self.recipe.local_batch = self.global_batch // self.workers
        return self

    @model_validator(mode="after")
    def _check_channels_last(self) -> RunSpec:
        if self.channels_last is True and self.exchange not in CHANNELS_LAST_EXCHANGES:
            raise ValueError(
                f"channels_last=true works with the allreduce and ddp exchanges, not "
                f"{self.exchange} (it sends parameters as one flat vector); use "
                "channels_last=auto"
            )
        return self

    @model_validator(mode="after")
    def _check_synthetic(self) -> RunSpec:
        if self.synthetic_data and self.max_steps is None:
            raise ValueError(
                "synthetic_data=true needs max_steps (DLBS's warm-up plus timed batches): "
                "e.g. --set max_steps=25 with warmup_steps_excluded=5"
            )
        if isinstance(self.loader_processes, int) and not 0 <= self.loader_processes <= 64:
            raise ValueError(f"loader_processes {self.loader_processes}: 0 to 64, or auto")
        return self

    def loader_processes_per_worker(self, cores: int | None = None) -> int:
        """Decoding processes per worker: as set, or its share of this node's cores."""
        if isinstance(self.loader_processes, int):
            return self.loader_processes
        cores = cores or os.cpu_count() or 1
        return max(1, min(4, cores // max(1, self.per_node)))

    @property
    def local_batch(self) -> int:
        return self.recipe.local_batch

    @property
    def effective_global_batch(self) -> int:
        return self.recipe.local_batch * self.workers

    @property
    def per_node(self) -> int:
        """Workers on each node (``nproc_per_node``, resolved)."""
        return self.nproc_per_node or self.workers

    @property
    def layout(self) -> str:
        """``nodes×per_node``, e.g. ``2×2``."""
        return f"{self.nodes}×{self.per_node}"


_SHORT = reprlib.Repr()  # values quoted in errors, shortened (keyword form needs 3.12)
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 2, 4, 4
_SHORT.maxstring = _SHORT.maxother = 60
MAX_PROBLEMS = 5


def one_line(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """Every problem of a validation error on one line (values shortened, at most
    ``MAX_PROBLEMS`` problems listed); a key ``model`` does not take is named as unknown,
    with the closest it takes."""
    parts = []
    problems = error.errors()
    for item in problems[:MAX_PROBLEMS]:
        loc = [p for p in item["loc"] if not str(p).startswith("function-after")]
        where = ".".join(str(p) for p in loc)
        msg = item["msg"].removeprefix("Value error, ")
        got = f" (got {_SHORT.repr(item['input'])})" if item["type"] != "value_error" else ""
        keys = _keys_at(model, loc[:-1]) if model and item["type"] == "extra_forbidden" else None
        if keys is not None:
            close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
            listed = f"it takes {', '.join(keys) or 'none'}" if len(keys) <= 15 else ""
            hint = f"did you mean '{close[0]}'?" if close else listed
            msg, got = "unknown key" + (f" ({hint})" if hint else ""), ""
        if isinstance(item.get("input"), dict):
            got = ""
        parts.append(f"{where}: {msg}{got}" if where else f"{msg}{got}")
    if len(problems) > MAX_PROBLEMS:
        parts.append(f"and {len(problems) - MAX_PROBLEMS} more")
    return "; ".join(parts)


def _keys_at(model: type[BaseModel], loc: list[Any]) -> list[str] | None:
    """The keys the part of ``model`` at ``loc`` takes; None where that is no one model."""
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        kinds = [field.annotation, *get_args(field.annotation)]
        models = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        if len(models) != 1:
            return None
        model = models[0]
    return list(model.model_fields)


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or TOML run spec file."""
    from dmlbench.files import load_mapping_file

    return load_mapping_file(path, "config file", "spec keys")
