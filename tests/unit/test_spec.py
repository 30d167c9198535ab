"""Run specs: resolution, overrides, deviations and refusal of impossible values."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmlbench.errors import SpecError
from dmlbench.resolve import deviations, resolve_spec
from dmlbench.spec.run import load_config_file


def test_reference_recipe_is_closed_division() -> None:
    spec = resolve_spec("cifar10-resnet20", workers=4)
    assert spec.local_batch == 32 and spec.effective_global_batch == 128
    assert deviations(spec) == {}


def test_free_choice_stays_closed_but_other_changes_open() -> None:
    assert deviations(resolve_spec("cifar10-resnet20", overrides=["variant=m2"])) == {}
    differ = deviations(resolve_spec("cifar10-resnet20", overrides=["momentum=0.5"]))
    assert differ == {"recipe.optimizer.momentum": {"reference": 0.9, "actual": 0.5}}


def test_overrides_accept_full_paths_suffixes_and_yaml_values() -> None:
    spec = resolve_spec(
        "cifar10-resnet20",
        overrides=["recipe.local_batch=64", "milestones=[10, 20]", "nesterov=false", "momentum=0"],
    )
    assert spec.local_batch == 64
    assert spec.recipe.schedule.milestones == [10.0, 20.0]  # type: ignore[union-attr]
    assert spec.recipe.optimizer.nesterov is False


def test_global_batch_derives_local_batch() -> None:
    spec = resolve_spec("cifar10-resnet20", workers=4, overrides=["global_batch=256"])
    assert spec.local_batch == 64


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, "workers: Input should be greater than or equal to 1"),
        ({"workers": 3, "overrides": ["global_batch=100"]}, "not divisible by workers 3"),
        ({"overrides": ["time_budget_s=-5"]}, "time_budget_s: Input should be greater than 0"),
        ({"overrides": ["local_batch=0"]}, "local_batch"),
        ({"overrides": ["mometum=0.1"]}, "did you mean 'recipe.optimizer.momentum'"),
        ({"overrides": ["depth=21"]}, "6n+2"),
        # both failed in every worker as it built the model, the run stored as failed
        (
            {"overrides": ["recipe.model.name=mlp", "recipe.model.options.hidden=[64, -1]"]},
            "option hidden.1: Input",
        ),
        (
            {"overrides": ["recipe.model.name=vit", "recipe.model.options.heads=5"]},
            "(768) must split into 5 heads",
        ),
        ({"overrides": ["momentum=0"]}, "nesterov=true needs momentum > 0"),
        ({"overrides": ["milestones=[109, 82]"]}, "increasing order"),
        ({"overrides": ["exchange=carrier-pigeon"]}, "exchange"),
        ({"overrides": ["exchange=alreduce"]}, "unknown exchange 'alreduce' (did you mean"),
        ({"overrides": ["optimizer.name=adagrad"]}, "unknown optimizer 'adagrad'; registered"),
        ({"overrides": ["recipe.model.name=resent"]}, "unknown model 'resent' (did you mean"),
        ({"overrides": ["nonsense"]}, "is not key=value"),
        ({"workers": 64, "overrides": ["local_batch=1024"]}, "larger than the 50,000 training"),
        ({"overrides": ["lr_per_sample=.inf"]}, "lr_per_sample: Input should be a finite number"),
        ({"overrides": ["momentum=.nan"]}, "momentum: Input should be a finite number"),
        ({"overrides": ["target=2.0"]}, "target 2 is an accuracy, a fraction at most 1"),
        ({"overrides": ["target=0"]}, "target: Input should be greater than 0"),
        ({"overrides": ["stall_timeout_s=0"]}, "stall_timeout_s: Input should be greater than 0"),
        ({"overrides": ["exchange=ps-sync", "channels_last=true"]}, "channels_last=true works"),
        ({"overrides": ["peak_tflops=0"]}, "peak_tflops: Input should be greater than 0"),
        # issue 53: both failed deep inside torch ("mixed torch.Tensor and DTensor")
        ({"overrides": ["exchange=fsdp", "recipe.l2=0.01"]}, "fsdp never holds them whole"),
        ({"overrides": ["exchange=fsdp", "noise_scale=true"]}, "keeps only a shard of it"),
    ],
)
def test_impossible_specs_are_refused_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(SpecError) as error:
        resolve_spec("cifar10-resnet20", **kwargs)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_the_registries_are_the_source_of_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from dmlbench.comm.exchange import EXCHANGES, AllReduceExchange
    from dmlbench.optim.build import OPTIMIZERS

    monkeypatch.setitem(EXCHANGES, "my-exchange", AllReduceExchange)
    monkeypatch.setitem(OPTIMIZERS, "my-sgd", OPTIMIZERS["sgd"])
    spec = resolve_spec(
        "digits-mlp", overrides=["exchange=my-exchange", "recipe.optimizer.name=my-sgd"]
    )
    assert (spec.exchange, spec.recipe.optimizer.name) == ("my-exchange", "my-sgd")


def test_a_data_folder_is_kept_as_where_it_was_when_the_spec_was_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative --data-dir was stored as given, so a stored spec re-run from another
    folder, or a worker started elsewhere, looked for the data somewhere else."""
    monkeypatch.chdir(tmp_path)
    spec = resolve_spec("digits-mlp", data_dir="data/cifar10")
    assert spec.data_dir == tmp_path / "data" / "cifar10"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_spec("digits-mlp", data_dir="~/d").data_dir == tmp_path / "home" / "d"
    stored = spec.to_json_dict()
    monkeypatch.chdir(tmp_path / "..")  # the stored spec means the same folder elsewhere
    assert resolve_spec("digits-mlp", config=stored).data_dir == tmp_path / "data" / "cifar10"


def test_unknown_task_suggests_the_closest() -> None:
    with pytest.raises(SpecError, match=r"unknown task 'cifar10-resnet21'.*did you mean"):
        resolve_spec("cifar10-resnet21")


def test_config_files_yaml_and_toml(tmp_path: Path) -> None:
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("workers: 2\nrecipe:\n  optimizer:\n    momentum: 0.5\n")
    toml_file = tmp_path / "run.toml"
    toml_file.write_text("workers = 2\n[recipe.optimizer]\nmomentum = 0.5\n")
    for path in (yaml_file, toml_file):
        spec = resolve_spec("digits-mlp", config=load_config_file(path), overrides=["seed=3"])
        assert (spec.workers, spec.seed, spec.recipe.optimizer.momentum) == (2, 3, 0.5)
    broken = tmp_path / "broken.yaml"
    broken.write_text("workers: [\n")
    with pytest.raises(SpecError, match=r"is not valid"):
        load_config_file(broken)
    with pytest.raises(SpecError, match=r"does not exist"):
        load_config_file(tmp_path / "missing.yaml")


def test_a_config_file_takes_keys_as_set_does_and_names_a_wrong_one() -> None:
    """`momentum: 0.5` in a file was refused ("Extra inputs are not permitted") where
    --set and a sweep's set: take a path or a unique suffix; a misspelt key, nested or
    not, is named with the closest the spec takes."""
    for key in ("momentum", "recipe.optimizer.momentum"):
        spec = resolve_spec("digits-mlp", config={"workers": 2, key: 0.5})
        assert (spec.workers, spec.recipe.optimizer.momentum) == (2, 0.5)
    with pytest.raises(SpecError, match=r"unknown spec key 'mometum' \(did you mean "):
        resolve_spec("digits-mlp", config={"mometum": 0.5})
    nested = {"recipe": {"optimizer": {"mometum": 0.5}}}
    with pytest.raises(SpecError) as error:
        resolve_spec("digits-mlp", config=nested)
    assert "recipe.optimizer.mometum: unknown key (did you mean 'momentum'?)" in str(error.value)


def test_run_options_added_after_the_first_sweeps_keep_stored_sweep_keys() -> None:
    """A RunSpec field added later must be left out of a run's key at its default
    (sweep.plan._KEY_DEFAULTS), or every stored sweep would run again."""
    from dmlbench.spec import RunSpec
    from dmlbench.sweep.plan import (
        _KEY_DEFAULTS,
        _NOT_IDENTITY,
        _RECIPE_KEY_DEFAULTS,
        key_data,
        run_key,
    )
    from dmlbench.tasks import get_task

    first = {
        "task",
        "workers",
        "nodes",
        "nproc_per_node",
        "seed",
        "recipe",
        "global_batch",
        "exchange",
        "exchange_options",
        "backend",
        "device",
        "threads_per_worker",
        "eval_every_epochs",
        "stop_at_target",
        "max_steps",
        "warmup_steps_excluded",
        "save_model",
        "network",
    }
    later = set(RunSpec.model_fields) - first - set(_NOT_IDENTITY)
    assert later <= set(_KEY_DEFAULTS), sorted(later - set(_KEY_DEFAULTS))
    for name, default in _KEY_DEFAULTS.items():
        assert RunSpec.model_fields[name].get_default(call_default_factory=True) == default
    # so are recipe fields added later: at their defaults they are not in a run's key
    spec = RunSpec.model_validate({"task": "digits-mlp", "recipe": get_task("digits-mlp").recipe})
    for path, default in _RECIPE_KEY_DEFAULTS.items():
        holder, data = spec.recipe, key_data(spec)["recipe"]
        for name in path[:-1]:
            holder, data = getattr(holder, name), data[name]
        assert getattr(holder, path[-1]) == default and path[-1] not in data
        other = spec.model_copy(deep=True)
        target = other.recipe
        for name in path[:-1]:
            target = getattr(target, name)
        setattr(target, path[-1], not default)
        assert run_key(other) != run_key(spec)  # another value is part of the identity


def test_numbers_the_store_cannot_hold_are_refused_in_validation(dmlbench) -> None:
    """A seed above 2^63 - 1 passed validation and failed in SQLite (issue 40)."""
    assert resolve_spec("synthetic-mlp", seed=2**63 - 1).seed == 2**63 - 1
    for fields, message in [
        ({"seed": 2**63}, "seed: Input should be less than or equal to"),
        ({"global_batch": 10**30}, "global_batch"),
        ({"max_steps": 10**30}, "max_steps"),
        ({"threads_per_worker": 600_000}, "threads_per_worker"),
    ]:
        with pytest.raises(SpecError, match=message):
            resolve_spec("synthetic-mlp", **fields)
    code, _, err = dmlbench("run", "synthetic-mlp", "--seed", str(2**64), "--dry-run")
    assert code == 2 and "seed" in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "override",
    ["seed=" + "9" * 120_000, "x" * 120_000 + "=1", "exchange=" + "x" * 120_000, "=" * 120_000],
)
def test_an_error_never_echoes_a_huge_value_in_full(dmlbench, override: str) -> None:
    code, _, err = dmlbench("run", "synthetic-mlp", "--set", override, "--dry-run")
    assert code == 2 and "Traceback" not in err and len(err) < 2500, err[:300]
    assert len(err.strip().splitlines()) == 1


def test_threads_beyond_the_machine_are_refused_before_anything_starts(
    dmlbench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """600 threads per worker made one process of 1,206 threads (issue 40)."""
    import os

    cores = len(os.sched_getaffinity(0))
    store = tmp_path / "s"
    code, _, err = dmlbench(
        "run",
        "synthetic-mlp",
        "--set",
        f"threads_per_worker={cores * 4 + 1}",
        "--store",
        str(store),
    )
    assert code == 2 and f"{cores * 4 + 1} threads on {cores} cores" in err, err
    assert "DMLBENCH_THREADS_PER_CORE" in err and not (store / "runs").exists()
    spec = resolve_spec("synthetic-mlp", threads_per_worker=cores * 4 + 1)
    monkeypatch.setenv("DMLBENCH_THREADS_PER_CORE", "8")
    spec.check_threads()  # the factor is the user's to raise
    resolve_spec("synthetic-mlp", workers=2, threads_per_worker=cores * 2).check_threads(cores)
    with pytest.raises(SpecError, match="at most 8 a core"):
        resolve_spec("synthetic-mlp", workers=2, threads_per_worker=cores * 4 + 1).check_threads(
            cores
        )


def test_run_takes_another_model_by_name(dmlbench) -> None:
    """`run --model` is `--set recipe.model.name=...` before the other --set: the old
    model's options dropped, the new one's set after; a name stays data."""
    import json

    other = ("--model", "vit", "--set", "recipe.model.options.depth=2")
    code, out, err = dmlbench("run", "imagenet-resnet50", *other, "--dry-run", "--json")
    assert code == 0, err
    model = json.loads(out)["spec"]["recipe"]["model"]
    assert model == {"name": "vit", "options": {"depth": 2}}
    code, _, err = dmlbench("run", "imagenet-resnet50", "--model", "x: [1", "--dry-run")
    assert code == 2 and "unknown model 'x: [1'" in err


def test_naming_another_model_drops_the_old_models_options() -> None:
    """Issue 56, item 4: `--set recipe.model.name=vgg16` on a ResNet task was refused
    for the ResNet's `depth` until its options were cleared by hand."""
    from dmlbench.resolve import resolve_spec
    from dmlbench.spec.overrides import deep_merge

    other = resolve_spec("imagenet-resnet50", overrides=["recipe.model.name=vgg16"])
    assert other.recipe.model.name == "vgg16" and other.recipe.model.options == {}
    same = resolve_spec(
        "imagenet-resnet50",
        overrides=["recipe.model.name=imagenet-resnet", "recipe.model.options.depth=18"],
    )
    assert same.recipe.model.options == {"depth": 18, "zero_init_residual": True}
    tree = {"model": {"name": "imagenet-resnet", "options": {"depth": 50}}, "lr": 0.1}
    deep_merge(tree, {"model": {"name": "vit"}})  # a spec file's other model
    assert tree == {"model": {"name": "vit"}, "lr": 0.1}
    deep_merge(tree, {"model": {"name": "vit", "options": {"depth": 2}}})  # the same one
    assert tree["model"] == {"name": "vit", "options": {"depth": 2}}
    optimizer = {"optimizer": {"name": "sgd", "momentum": 0.9}}
    deep_merge(optimizer, {"optimizer": {"name": "lars"}})  # no options: fields are shared
    assert optimizer == {"optimizer": {"name": "lars", "momentum": 0.9}}


def test_a_suffix_names_the_named_models_option_and_its_dropped_ones_are_no_deviation() -> None:
    """`--model vit --set heads=8` was refused as "unknown spec key 'heads' (did you mean
    'recipe.optimizer.betas'?)": a suffix found only the options already in the tree.
    And `--dry-run` listed the ResNet's dropped options as `depth=None, variant=None`."""
    from dmlbench.resolve import deviations, resolve_spec

    spec = resolve_spec(
        "cifar10-resnet20", overrides=["recipe.model.name=vit", "heads=8", "width=256"]
    )
    assert spec.recipe.model.options == {"heads": 8, "width": 256}
    assert set(deviations(spec)) == {
        "recipe.model.name",
        "recipe.model.options.heads",
        "recipe.model.options.width",
    }
    bare = resolve_spec("cifar10-resnet20", overrides=["recipe.model.name=vit"])
    assert set(deviations(bare)) == {"recipe.model.name"}  # not `options={}`
    deeper = resolve_spec("cifar10-resnet20", overrides=["depth=32"])  # the same model's
    assert deviations(deeper) == {"recipe.model.options.depth": {"reference": 20, "actual": 32}}
    with pytest.raises(SpecError, match=r"'heads' \(an option of the model vit or gpt: name"):
        resolve_spec("cifar10-resnet20", overrides=["heads=8"])  # ResNet has none


def test_dmlbench_plugins_names_modules_every_command_imports(
    dmlbench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task of one's own, from `--plugin` on `run`, was unknown to `tasks`, `models`,
    `advise`, `simulate` and `slurm`: none takes `--plugin`."""
    import json

    from dmlbench import models
    from dmlbench.resolve import resolve_spec
    from dmlbench.spec import overrides
    from dmlbench.tasks import registry

    (tmp_path / "env_named_tasks.py").write_text(
        "from dmlbench.models import MLPOptions, ModelEntry, _build_mlp, register_model\n"
        "from dmlbench.tasks import TaskDefinition, get_task, register_task\n"
        "register_model('env-mlp', ModelEntry(MLPOptions, _build_mlp, 'mine'))\n"
        "blobs = get_task('synthetic-mlp')\n"
        "register_task(TaskDefinition(name='env-blobs', summary='mine', dataset='synthetic',\n"
        "    recipe=blobs.recipe, load=blobs.load))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for module, name in ((registry, "TASKS"), (models, "MODELS"), (overrides, "MODEL_OPTIONS")):
        monkeypatch.setattr(module, name, dict(getattr(module, name)))  # undone after
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.setenv("DMLBENCH_PLUGINS", " env_named_tasks ,")
    code, out, err = dmlbench("tasks", "--json")
    assert code == 0, err
    assert "env-blobs" in {task["name"] for task in json.loads(out)}
    code, out, _ = dmlbench("models", "--json")
    assert "env-mlp" in {model["name"] for model in json.loads(out)}
    assert resolve_spec("env-blobs").plugins == ["env_named_tasks"]  # carried to workers
    both = resolve_spec("env-blobs", plugins=["env_named_tasks"])
    assert both.plugins == ["env_named_tasks"]  # named once
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.setenv("DMLBENCH_PLUGINS", "env_named_taks")
    code, _, err = dmlbench("tasks")
    assert code == 2
    assert "plugin module 'env_named_taks' (DMLBENCH_PLUGINS) failed to import" in err
    monkeypatch.delenv("DMLBENCH_PLUGINS")
    with pytest.raises(SpecError, match="or DMLBENCH_PLUGINS=MODULE for every command"):
        resolve_spec("no-such-task")


def test_a_loader_that_returns_no_dataset_is_named_in_one_line(tmp_path: Path) -> None:
    """A plugin's loader that returned a dict failed deep in the trainer: "'dict' object
    has no attribute 'train_x'"."""
    from dataclasses import replace

    from dmlbench.errors import DatasetError
    from dmlbench.tasks import get_task

    digits = get_task("digits-mlp")
    assert digits.read(tmp_path).train_x.shape[1] == 64  # a Dataset passes
    wrong = replace(digits, name="mine", load=lambda folder: {"x": [1]})
    with pytest.raises(DatasetError, match=r"^task mine: its load returned dict, not a dmlbench"):
        wrong.read(tmp_path)


def test_a_model_that_does_not_take_the_tasks_examples_is_refused_before_it_starts(
    dmlbench,
) -> None:
    """`run --model resnet` on digits failed in every worker, inside conv2d ("Expected
    3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [32, 64]"),
    and `kjv-gpt --model mlp` likewise: each model says what it takes, each built-in task
    what its examples are, and a mismatch is one line before anything starts."""
    from dataclasses import replace

    from dmlbench.models import check_model_inputs
    from dmlbench.tasks import get_task

    refused = {
        ("digits-mlp", "resnet"): "model resnet takes images; digits-mlp's examples are flat "
        "features: choose linear, mlp (`dmlbench models`)",
        ("kjv-gpt", "mlp"): "kjv-gpt's examples are token ids: choose gpt",
        ("cifar10-resnet20", "gpt"): "model gpt takes token ids; cifar10-resnet20's",
    }
    for (task, model), said in refused.items():
        code, _, err = dmlbench("run", task, "--model", model, "--dry-run")
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    for task, model in (("cifar10-resnet20", "mlp"), ("epsilon-logreg", "linear")):
        code, _, err = dmlbench("run", task, "--model", model, "--dry-run")
        assert code == 0, err  # an image flattened, features as they are
    from dmlbench.tasks import all_tasks

    built_in = [task for task in all_tasks() if task.load.__module__.startswith("dmlbench.")]
    assert len(built_in) >= 11 and all(task.example_inputs() for task in built_in)
    unsaid = replace(get_task("digits-mlp"), inputs=None)  # a plugin's task that says none
    assert unsaid.example_inputs() is None
    check_model_inputs("resnet", unsaid)  # nothing to check against: not refused
