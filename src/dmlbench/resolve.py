"""The resolve step: a run spec from a task's reference recipe, a config file, flags and
overrides, checked against the registries (tasks, models, exchanges, optimizers).

It sits above :mod:`dmlbench.spec` (typed fields and their bounds, importing no registry)
and the packages that hold the registries, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dmlbench.comm.exchange import EXCHANGES, check_options, is_exact, is_sharded
from dmlbench.errors import DmlbenchError, SpecError, StoreError, unknown
from dmlbench.models import check_model_inputs, validate_model_spec
from dmlbench.optim import learning_rate
from dmlbench.optim.build import OPTIMIZERS
from dmlbench.spec.overrides import (
    apply_overrides,
    assign,
    deep_merge,
    flatten,
    refuse_set_twice,
    resolve_key,
    written,
)
from dmlbench.spec.run import RunSpec, one_line
from dmlbench.strict import StrictModel
from dmlbench.tasks import env_plugins, get_task, import_plugins


def check_names(spec: RunSpec) -> None:
    """The spec's exchange and optimizer are registered, and noise_scale=true has what it
    needs; refused as one line, as the spec's own checks are."""
    problems = [
        f"{where}: {unknown(kind, name, list(registry))}"
        for where, kind, name, registry in (
            ("exchange", "exchange", spec.exchange, EXCHANGES),
            ("recipe.optimizer.name", "optimizer", spec.recipe.optimizer.name, OPTIMIZERS),
        )
        if name not in registry
    ]
    if problems:
        raise SpecError(f"invalid run spec: {'; '.join(problems)}")
    if is_sharded(spec.exchange) and spec.recipe.l2:
        raise SpecError(
            f"invalid run spec: recipe.l2 adds the parameters' squared norm to the loss, and "
            f"{spec.exchange} never holds them whole: use "
            f"recipe.optimizer.weight_decay={spec.recipe.l2:g} (for SGD, the same decay)"
        )
    if spec.noise_scale is not True:
        return
    if is_sharded(spec.exchange):
        raise SpecError(
            f"invalid run spec: noise_scale=true needs each worker's whole gradient, and "
            f"{spec.exchange} keeps only a shard of it; use ddp or zero1, or noise_scale=auto"
        )
    if not getattr(EXCHANGES[spec.exchange], "exact", False):  # a class, or a factory
        raise SpecError(
            f"invalid run spec: noise_scale=true needs an exchange whose update is the "
            f"workers' mean gradient (allreduce, ddp), not {spec.exchange}; use "
            "noise_scale=auto"
        )
    if spec.workers == 1 and spec.recipe.local_batch < 2:
        raise SpecError(
            "invalid run spec: noise_scale=true on one worker splits its batch: local_batch ≥ 2"
        )


def validate_spec(data: Mapping[str, Any]) -> RunSpec:
    """Validate a spec dictionary; every problem becomes one readable line."""
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as error:
        raise SpecError(f"invalid run spec: {one_line(error, RunSpec)}") from None
    check_names(spec)
    task = get_task(spec.task)
    validate_model_spec(spec.recipe.model)
    check_model_inputs(spec.recipe.model.name, task)
    try:
        check_options(spec.exchange, spec.exchange_options)
    except ValidationError as error:
        said = one_line(error, EXCHANGES[spec.exchange].Options)
        raise SpecError(f"exchange_options for {spec.exchange}: {said}") from None
    if spec.synthetic_data and spec.noise_scale is True:
        raise SpecError(
            "synthetic_data=true trains on one fixed random batch: there is no gradient "
            "noise of the data to measure; leave noise_scale at auto"
        )
    if spec.synthetic_data and task.input_shape is None:
        raise SpecError(
            f"synthetic_data=true: {task.name} declares no input shape (an image or "
            "language-model task does, e.g. imagenet-resnet50, cifar10-resnet20 or kjv-gpt)"
        )
    if spec.network.enabled:
        spec.network.resolve()  # unknown profiles and units are refused here
    if task.train_examples is not None and spec.effective_global_batch > task.train_examples:
        raise SpecError(
            f"global batch {spec.effective_global_batch} ({spec.workers} × local batch "
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
    later: Iterable[tuple[str, Iterable[Any] | None, str]] = (),
    **fields: Any,
) -> dict[str, Any]:
    """The unvalidated spec dictionary: the task's reference recipe, then ``config``, then
    ``fields`` (explicit top-level values, the command's options; ``None`` is ignored so
    CLI defaults do not mask a config file), then ``overrides``. Sweeps edit this tree
    before validating it, setting what they list in ``later`` (a key, the values it
    takes or None where each run computes its own, and what to call that): an override
    of what an option or ``later`` sets is refused.
    """
    # DMLBENCH_PLUGINS' too: the spec carries them to nodes whose environment lacks it
    named = [*env_plugins(), *(config or {}).get("plugins", []), *plugins]
    plugin_list = list(dict.fromkeys(named))
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
    if config:  # nested keys, or as --set and a sweep's set: take them: a path or suffix
        deep_merge(tree, {k: v for k, v in config.items() if k in tree and k != "plugins"})
        for key, value in config.items():
            if key not in tree and key != "plugins":
                assign(tree, key, value)
    given = {k: v for k, v in fields.items() if v is not None}
    deep_merge(tree, given)
    touched = apply_overrides(tree, overrides)
    set_later = {
        leaf: what
        for key, values, what in later
        for leaf in (
            written(tree, resolve_key(tree, key), values)
            if values is not None
            else [resolve_key(tree, key)]
        )
    }
    refuse_set_twice(touched, given, set_later)
    if tree.get("global_batch") is not None and "recipe.local_batch" in touched:
        raise SpecError(  # the spec's check sets it to global_batch / workers
            "--set recipe.local_batch and global_batch both set the local batch "
            "(global_batch / workers): give one of them"
        )
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
    definition = get_task(spec.task)
    reference = flatten(definition.recipe.model_dump(mode="json"))
    actual = flatten(spec.recipe.model_dump(mode="json"))
    differ = {}
    renamed = reference["model.name"] != actual["model.name"]
    for key in sorted(set(reference) | set(actual)):
        ref, got = reference.get(key), actual.get(key)
        if renamed and key.startswith("model.options") and got in (None, {}):
            continue  # the recipe's model's options, gone with it: the name says so
        allowed = definition.free_choices.get(f"recipe.{key}")
        if ref != got and not (allowed and got in allowed):
            differ[f"recipe.{key}"] = {"reference": ref, "actual": got}
    if spec.partial_data:  # not the official data: not the reference experiment
        differ["partial_data"] = {"reference": False, "actual": True}
    if spec.synthetic_data:  # a throughput measurement: no data, no accuracy
        differ["synthetic_data"] = {"reference": False, "actual": True}
    if spec.validation_split:  # a tuning run: evaluated on held-out training examples
        differ["validation_split"] = {"reference": 0.0, "actual": spec.validation_split}
    if not is_exact(spec.exchange):  # another algorithm than synchronous SGD
        differ["exchange"] = {"reference": "allreduce", "actual": spec.exchange}
        for key, value in sorted(spec.exchange_options.items()):
            differ[f"exchange_options.{key}"] = {"reference": None, "actual": value}
    return differ


def derived(spec: RunSpec) -> dict[str, Any]:
    """What follows from a spec, as ``dmlbench run --dry-run`` shows it."""
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


def recorded_deviations(spec: dict[str, Any]) -> dict[str, Any]:
    """The deviations of a stored run's spec from its recipe, as its launcher would have
    recorded them; refused in one line (a ``StoreError``) where the spec does not
    validate."""
    try:
        import_plugins(spec.get("plugins", []))
        validated = RunSpec.model_validate(spec)
        check_names(validated)
        return deviations(validated)
    except (DmlbenchError, ValueError) as error:
        raise StoreError(f"cannot tell the run's division: {error}") from None
