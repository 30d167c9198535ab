"""RunSpec: one benchmark run, fully resolved before any process starts."""

from __future__ import annotations

import os
import reprlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from dmlbench.errors import SpecError
from dmlbench.netem.profiles import NetworkSpec
from dmlbench.spec.overrides import apply_overrides, deep_merge, flatten
from dmlbench.spec.recipe import Recipe
from dmlbench.strict import (
    MAX_COUNT,
    MAX_SEED,
    MAX_THREADS,
    StrictModel,
    WorkersSpec,
    in_registry,
)

DEFAULT_DATA_DIR = Path(os.environ.get("DMLBENCH_DATA", Path.home() / ".cache" / "dmlbench"))


# Exchanges that take channels-last parameters and gradients as they are (the others view
# parameters as one flat vector, which needs them contiguous).
CHANNELS_LAST_EXCHANGES = ("allreduce", "ddp")

Exchange = Annotated[str, in_registry("exchange", "dmlbench.comm.exchange", "EXCHANGES")]


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
    exchange: Exchange = Field(
        "allreduce",
        description="a name in comm.exchange.EXCHANGES. allreduce: one flat all-reduce "
        "after backward (comm measured alone); ddp: DistributedDataParallel's bucketed "
        "all-reduce overlapped with backward; open division: fp16, bf16, powersgd, signsgd, "
        "ef-signsgd, topk, local-sgd, gossip, ps-sync, ssp, ps-async",
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
    device: Literal["auto", "cpu", "cuda"] = "auto"
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
    compile: bool = Field(
        False,
        description="torch.compile the model before the clock starts (compile time is "
        "reported apart); the same maths, fused kernels",
    )
    cpu_allocator: Literal["tuned", "default"] = Field(
        "tuned",
        description="tuned: the worker's C library (glibc) keeps the memory a step frees "
        "for the next step instead of returning it to the kernel and faulting it in again, "
        "whatever the process did before; the same maths. default: glibc's own, whose "
        "thresholds depend on the largest block the process has freed so far",
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
    data_dir: Path = Field(DEFAULT_DATA_DIR, description="where datasets are found or downloaded")
    download: bool = Field(True, description="download a missing dataset (checksum verified)")
    partial_data: bool = Field(
        False,
        description="accept data whose example counts differ from the official dataset's "
        "(a subset for quick checks); the run is open division",
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
        default_factory=list, description="modules imported first; they may register tasks"
    )
    network: NetworkSpec = Field(
        default_factory=NetworkSpec,
        description="emulated network: each worker in its own namespace, shaped with tc",
    )

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
    def _check_noise_scale(self) -> RunSpec:
        if self.noise_scale is not True:
            return self
        from dmlbench.comm.exchange import EXCHANGES

        if not getattr(EXCHANGES[self.exchange], "exact", False):  # a class, or a factory
            raise ValueError(
                f"noise_scale=true needs an exchange whose update is the workers' mean "
                f"gradient (allreduce, ddp), not {self.exchange}; use noise_scale=auto"
            )
        if self.workers == 1 and self.recipe.local_batch < 2:
            raise ValueError("noise_scale=true on one worker splits its batch: local_batch ≥ 2")
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


def one_line(error: ValidationError) -> str:
    """Every problem of a validation error on one line (values shortened, at most
    ``MAX_PROBLEMS`` problems listed)."""
    parts = []
    problems = error.errors()
    for item in problems[:MAX_PROBLEMS]:
        where = ".".join(str(p) for p in item["loc"] if not str(p).startswith("function-after"))
        msg = item["msg"].removeprefix("Value error, ")
        got = f" (got {_SHORT.repr(item['input'])})" if item["type"] != "value_error" else ""
        if isinstance(item.get("input"), dict):
            got = ""
        parts.append(f"{where}: {msg}{got}" if where else f"{msg}{got}")
    if len(problems) > MAX_PROBLEMS:
        parts.append(f"and {len(problems) - MAX_PROBLEMS} more")
    return "; ".join(parts)


def validate_spec(data: Mapping[str, Any]) -> RunSpec:
    """Validate a spec dictionary; every problem becomes one readable line."""
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as error:
        raise SpecError(f"invalid run spec: {one_line(error)}") from None
    from dmlbench.models import validate_model_spec
    from dmlbench.tasks import get_task

    task = get_task(spec.task)
    validate_model_spec(spec.recipe.model)
    from dmlbench.comm.exchange import check_options

    try:
        check_options(spec.exchange, spec.exchange_options)
    except ValidationError as error:
        raise SpecError(f"exchange_options for {spec.exchange}: {one_line(error)}") from None
    if spec.network.enabled:
        spec.network.resolve()  # unknown profiles and units are refused here
    if task.train_examples is not None and spec.effective_global_batch > task.train_examples:
        raise SpecError(
            f"global batch {spec.effective_global_batch} ({spec.workers} workers × "
            f"{spec.local_batch}) is larger than the {task.train_examples:,} training examples "
            f"of {task.name}; use fewer workers or a smaller local_batch"
        )
    return spec


def spec_tree(
    task: str,
    *,
    config: Mapping[str, Any] | None = None,
    overrides: Iterable[str] = (),
    plugins: Iterable[str] = (),
    **fields: Any,
) -> dict[str, Any]:
    """The unvalidated spec dictionary: the task's reference recipe, then ``config``, then
    ``fields`` (explicit top-level values; ``None`` is ignored so CLI defaults do not mask a
    config file), then ``overrides``. Sweeps edit this tree before validating it.
    """
    from dmlbench.tasks import get_task, import_plugins

    plugin_list = [*(config or {}).get("plugins", []), *plugins]
    import_plugins(plugin_list)
    definition = get_task(task)
    tree: dict[str, Any] = {"task": definition.name, "recipe": definition.recipe.model_dump()}
    for name, info in RunSpec.model_fields.items():
        if not info.is_required():
            default = info.get_default(call_default_factory=True)
            if isinstance(default, StrictModel):  # nested specs become keys too
                default = default.model_dump()
            tree[name] = str(default) if isinstance(default, Path) else default
    tree["plugins"] = plugin_list
    if config:
        deep_merge(tree, {k: v for k, v in config.items() if k != "plugins"})
    deep_merge(tree, {k: v for k, v in fields.items() if v is not None})
    apply_overrides(tree, overrides)
    return tree


def resolve_spec(
    task: str,
    *,
    config: Mapping[str, Any] | None = None,
    overrides: Iterable[str] = (),
    plugins: Iterable[str] = (),
    **fields: Any,
) -> RunSpec:
    """Build a validated RunSpec; see :func:`spec_tree` for the order values apply in."""
    tree = spec_tree(task, config=config, overrides=overrides, plugins=plugins, **fields)
    return validate_spec(tree)


def deviations(spec: RunSpec) -> dict[str, dict[str, Any]]:
    """Recipe fields that differ from the task's reference recipe (open division).

    A field a task lists in ``free_choices`` (e.g. ResNet variant m1/m2) is not a
    deviation while its value is one of the allowed ones.
    """
    from dmlbench.tasks import get_task

    definition = get_task(spec.task)
    reference = flatten(definition.recipe.model_dump(mode="json"))
    actual = flatten(spec.recipe.model_dump(mode="json"))
    differ = {}
    for key in sorted(set(reference) | set(actual)):
        ref, got = reference.get(key), actual.get(key)
        allowed = definition.free_choices.get(f"recipe.{key}")
        if ref != got and not (allowed and got in allowed):
            differ[f"recipe.{key}"] = {"reference": ref, "actual": got}
    if spec.partial_data:  # not the official data: not the reference experiment
        differ["partial_data"] = {"reference": False, "actual": True}
    if spec.validation_split:  # a tuning run: evaluated on held-out training examples
        differ["validation_split"] = {"reference": 0.0, "actual": spec.validation_split}
    from dmlbench.comm.exchange import is_exact

    if not is_exact(spec.exchange):  # another algorithm than synchronous SGD
        differ["exchange"] = {"reference": "allreduce", "actual": spec.exchange}
        for key, value in sorted(spec.exchange_options.items()):
            differ[f"exchange_options.{key}"] = {"reference": None, "actual": value}
    return differ


def derived(spec: RunSpec) -> dict[str, Any]:
    """What follows from a spec, as ``dmlbench run --dry-run`` shows it."""
    from dmlbench.optim import learning_rate

    schedule = spec.recipe.schedule
    rate = {"local_batch": spec.local_batch, "world_size": spec.workers}
    warmup = getattr(schedule, "warmup_epochs", 0.0)
    return {
        "global_batch": spec.effective_global_batch,
        "threads_per_worker": spec.threads(),
        "division": "open" if deviations(spec) else "closed",
        "lr_first_step": learning_rate(schedule, step=0, epoch=0.0, **rate),
        "lr_after_warmup": learning_rate(schedule, step=0, epoch=warmup, **rate),
    }


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or TOML run spec file."""
    from dmlbench.files import load_mapping_file

    return load_mapping_file(path, "config file", "spec keys")
