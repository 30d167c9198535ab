"""Sweep files: expressions, expansion (products, derived values, rules), scaling modes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers import REPO

from dmlbench.errors import SpecError
from dmlbench.spec.sweep import load_sweep_file, validate_sweep
from dmlbench.sweep import plan_sweep
from dmlbench.sweep.expressions import Expression


def sweep(**fields):
    return validate_sweep({"name": "t", "task": "synthetic-mlp", **fields})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("global_batch // workers", 16),
        ("recipe.local_batch * workers", 64),
        ("0.1 if workers < 4 else 0.05", 0.1),
        ("workers >= 2 and exchange == 'ddp'", True),
        ("exchange in ['allreduce', 'ddp'] and not workers == 3", True),
        ("max(8, sqrt(workers) * 4)", 8),
        ("1 < workers <= 2", True),
        ("1 < workers < 2", False),
    ],
)
def test_expressions_evaluate_over_spec_keys(text: str, expected: object) -> None:
    values = {"workers": 2, "global_batch": 32, "recipe.local_batch": 32, "exchange": "ddp"}
    assert Expression(text).evaluate(values) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os').system('true')", "calls something other than"),
        ("(lambda: 1)()", "calls something other than"),
        ("workers.__class__", None),
        ("[x for x in workers]", "ListComp"),
        ("workers +", "not valid"),
        ("open('f')", "calls something other than"),
    ],
)
def test_expressions_cannot_run_code(text: str, message: str | None) -> None:
    values = {"workers": 2}
    with pytest.raises(SpecError) as error:
        Expression(text).evaluate(values)
    if message:
        assert message in str(error.value)


def test_expression_names_must_exist_and_be_unambiguous() -> None:
    with pytest.raises(SpecError, match="unknown name 'wrkers'"):
        Expression("wrkers + 1").evaluate({"workers": 1})
    with pytest.raises(SpecError, match="ambiguous"):
        Expression("momentum").evaluate({"a.momentum": 1, "b.momentum": 2})
    with pytest.raises(SpecError, match=r"failed: .*by zero"):
        Expression("1 // (workers - 1)").evaluate({"workers": 1})


def test_axes_expand_as_a_cartesian_product() -> None:
    plan = plan_sweep(sweep(axes={"workers": [1, 2, 4], "exchange": ["allreduce", "ddp"]}))
    combos = [(r.spec.workers, r.spec.exchange) for r in plan.runs]
    assert combos == [(w, e) for w in (1, 2, 4) for e in ("allreduce", "ddp")]
    assert len({r.key for r in plan.runs}) == 6
    assert plan.point_keys == ["workers", "exchange"]


def test_fixed_values_and_suffix_keys_apply_to_every_run() -> None:
    plan = plan_sweep(
        sweep(
            set={"max_epochs": 3, "recipe": {"optimizer": {"momentum": 0.5}}},
            axes={"workers": [1, 2]},
        )
    )
    assert {r.spec.recipe.max_epochs for r in plan.runs} == {3}
    assert {r.spec.recipe.optimizer.momentum for r in plan.runs} == {0.5}


def test_derived_values_are_computed_per_run() -> None:
    plan = plan_sweep(
        sweep(
            axes={"workers": [1, 2, 4], "global_batch": [64]},
            derived={"recipe.max_epochs": "2 * workers", "momentum": "0.9 if workers < 4 else 0.5"},
        )
    )
    assert [(r.spec.workers, r.spec.local_batch) for r in plan.runs] == [(1, 64), (2, 32), (4, 16)]
    assert [r.spec.recipe.max_epochs for r in plan.runs] == [2, 4, 8]
    assert [r.spec.recipe.optimizer.momentum for r in plan.runs] == [0.9, 0.9, 0.5]
    assert plan.runs[2].point["recipe.max_epochs"] == 8  # recorded with the run


def test_rules_set_fork_and_drop() -> None:
    plan = plan_sweep(
        sweep(
            axes={"workers": [1, 2, 4], "exchange": ["allreduce", "ddp"]},
            rules=[
                {"when": "workers == 1 and exchange == 'ddp'", "drop": True},
                {"when": "workers == 4", "fork": {"local_batch": [8, 16]}},
                {"when": "exchange == 'ddp'", "set": {"max_epochs": 2}},
                {"when": "max_epochs == 2 and workers == 4 and local_batch == 8", "drop": True},
            ],
        )
    )
    got = [
        (r.spec.workers, r.spec.exchange, r.spec.local_batch, r.spec.recipe.max_epochs)
        for r in plan.runs
    ]
    assert got == [
        (1, "allreduce", 16, 10),
        (2, "allreduce", 16, 10),
        (2, "ddp", 16, 2),
        (4, "allreduce", 8, 10),
        (4, "allreduce", 16, 10),
        (4, "ddp", 16, 2),
    ]
    assert plan.dropped == 2


def test_identical_combinations_run_once() -> None:
    plan = plan_sweep(
        sweep(axes={"workers": [1, 2]}, rules=[{"when": "True", "set": {"workers": 2}}])
    )
    assert [r.spec.workers for r in plan.runs] == [2]
    assert plan.duplicates == 1


def test_repeats_have_distinct_recorded_seeds_and_interleave() -> None:
    plan = plan_sweep(sweep(axes={"workers": [1, 2]}, repeats=3, seed=10))
    assert [(r.repeat, r.spec.workers, r.spec.seed) for r in plan.runs] == [
        (0, 1, 10),
        (0, 2, 10),
        (1, 1, 11),
        (1, 2, 11),
        (2, 1, 12),
        (2, 2, 12),
    ]
    assert plan_sweep(sweep(axes={"workers": [1]}), repeats=2).runs[1].spec.seed == 1


def test_weak_scaling_keeps_the_local_batch() -> None:
    plan = plan_sweep(sweep(scaling="weak", axes={"workers": [1, 2, 4]}))
    assert [(r.spec.local_batch, r.spec.effective_global_batch) for r in plan.runs] == [
        (16, 16),
        (16, 32),
        (16, 64),
    ]


def test_strong_scaling_fixes_the_global_batch() -> None:
    plan = plan_sweep(sweep(scaling="strong", axes={"workers": [2, 4, 8]}))
    # default: the recipe's local batch at the smallest worker count
    assert [(r.spec.local_batch, r.spec.effective_global_batch) for r in plan.runs] == [
        (16, 32),
        (8, 32),
        (4, 32),
    ]
    explicit = plan_sweep(sweep(scaling="strong", global_batch=96, axes={"workers": [1, 2]}))
    assert [r.spec.local_batch for r in explicit.runs] == [96, 48]
    overridden = plan_sweep(
        sweep(scaling="strong", axes={"workers": [1, 2]}), overrides=["global_batch=128"]
    )  # `run --set global_batch=128`
    assert [(r.spec.local_batch, r.spec.effective_global_batch) for r in overridden.runs] == [
        (128, 128),
        (64, 128),
    ]
    # the command line overrides the file's global batch
    both = plan_sweep(
        sweep(scaling="strong", global_batch=96, axes={"workers": [1, 2]}),
        overrides=["global_batch=64"],
    )
    assert [r.spec.effective_global_batch for r in both.runs] == [64, 64]


def test_weak_scaling_takes_the_sweep_s_local_batch() -> None:
    plan = plan_sweep(sweep(scaling="weak", local_batch=128, axes={"workers": [1, 2]}))
    assert [(r.spec.local_batch, r.spec.effective_global_batch) for r in plan.runs] == [
        (128, 128),
        (128, 256),
    ]
    smaller = plan_sweep(
        sweep(scaling="weak", local_batch=128, axes={"workers": [1, 2]}),
        overrides=["recipe.local_batch=16"],
    )  # the command line overrides the file
    assert [r.spec.local_batch for r in smaller.runs] == [16, 16]
    with pytest.raises(SpecError, match="local_batch belongs to weak scaling"):
        sweep(scaling="strong", local_batch=16, axes={"workers": [1, 2]})


def test_strong_scaling_refuses_a_batch_that_does_not_divide() -> None:
    with pytest.raises(SpecError, match="global batch 16 does not divide among 3 workers"):
        plan_sweep(sweep(scaling="strong", axes={"workers": [1, 3]}))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"axes": {"workers": []}}, "axis 'workers' has no values"),
        ({"axes": {"seed": [1, 2]}}, "use repeats"),
        ({"scaling": "weak", "set": {"local_batch": 8}}, "sets the batch sizes itself"),
        ({"global_batch": 64}, "set scaling: strong"),
        ({"rules": [{"when": "workers > 1"}]}, "does nothing"),
        ({"rules": [{"drop": True, "set": {"x": 1}}]}, "not both"),
        ({"repeats": 0}, "repeats"),
        ({"axes": {"workers": [1]}, "bogus": 1}, "bogus: unknown key (it takes name, task,"),
        ({"axes": {"workers": [1]}, "rule": []}, "rule: unknown key (did you mean 'rules'?)"),
    ],
)
def test_impossible_sweeps_are_refused_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(SpecError, match="invalid sweep") as error:
        validate_sweep({"name": "t", "task": "synthetic-mlp", **fields})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_bad_run_is_refused_before_any_starts() -> None:
    with pytest.raises(SpecError, match=r"workers: .*greater than or equal to 1.*workers=0"):
        plan_sweep(sweep(axes={"workers": [2, 0]}))
    with pytest.raises(SpecError, match="unknown spec key 'momentm'"):
        plan_sweep(sweep(axes={"momentm": [0.1]}))
    with pytest.raises(SpecError, match="no runs left"):
        plan_sweep(sweep(axes={"workers": [1]}, rules=[{"when": "True", "drop": True}]))


def test_sweep_file_name_defaults_to_its_stem(tmp_path: Path) -> None:
    path = tmp_path / "my-sweep.yaml"
    path.write_text("task: synthetic-mlp\naxes:\n  workers: [1, 2]\n")
    assert load_sweep_file(path).name == "my-sweep"
    (tmp_path / "no-task.yaml").write_text("axes: {workers: [1]}\n")
    with pytest.raises(SpecError, match="names no task"):
        load_sweep_file(tmp_path / "no-task.yaml")
    (tmp_path / "list.yaml").write_text("[1, 2]\n")  # it was called a config file
    with pytest.raises(SpecError, match=r"^sweep file .*list\.yaml must hold a mapping of its"):
        load_sweep_file(tmp_path / "list.yaml")


def test_example_sweeps_expand() -> None:
    examples = REPO / "examples"
    weak = plan_sweep(load_sweep_file(examples / "scaling-weak.yaml"))
    strong = plan_sweep(load_sweep_file(examples / "scaling-strong.yaml"))
    full = plan_sweep(load_sweep_file(examples / "scaling.yaml"))
    assert len(full.runs) == 2 * (1 + 2 * 2) and full.dropped == 1
    assert {r.spec.workers for r in weak.runs} == {1, 2}
    assert weak.sweep.scaling == "weak" and strong.sweep.scaling == "strong"
    assert len({r.spec.effective_global_batch for r in strong.runs}) == 1


BILLION_LAUGHS = "\n".join(
    ["task: synthetic-mlp", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [
        f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [{','.join(['*' + chr(ord('a') + i - 1)] * 9)}]"
        for i in range(1, 9)
    ]
    + ["set: {momentum: *i}"]
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10**10**10", "over 4096 bits"),
        ("2 ** 5000", "over 4096 bits"),
        ("workers * 10**1000 * 10**1000 * 10**1000 * 10**1000 * 10**1000", "over 4096 bits"),
        ("[1] * 10**9", "over 10,000 items"),
        ("'ab' * 10**9", "over 10,000 items"),
        ("'%999999999d' % 1", "formats no strings"),
        ("1 << 100000", "operator LShift"),
        ("workers @ workers", "operator MatMult"),
        ("-" * 200 + "1", "nested more than 32 deep"),
        ("(" * 100_000 + "1" + ")" * 100_000, "200,001 characters long"),
        ("1 + " * 5000 + "1", "characters long"),
        ("int('9' * 4000)", "over 4096 bits"),
    ],
)
def test_expressions_are_bounded(text: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(SpecError) as error:
        Expression(text).evaluate({"workers": 2})
    assert time.monotonic() - started < 1.0
    assert message in str(error.value)
    assert "\n" not in str(error.value) and len(str(error.value)) < 300


def test_a_sweep_file_that_expands_exponentially_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 1000
    started = time.monotonic()
    with pytest.raises(SpecError, match="expands to more than 100,000 values") as error:
        load_sweep_file(path)
    assert time.monotonic() - started < 1.0 and len(str(error.value)) < 300
    (tmp_path / "loop.yaml").write_text("task: synthetic-mlp\nset: &s {x: *s}\n")
    with pytest.raises(SpecError, match="refers to itself"):
        load_sweep_file(tmp_path / "loop.yaml")
    (tmp_path / "deep.yaml").write_text("task: synthetic-mlp\nset: " + "[" * 5000 + "]" * 5000)
    with pytest.raises(SpecError, match="nested"):
        load_sweep_file(tmp_path / "deep.yaml")
    (tmp_path / "big.yaml").write_text("task: synthetic-mlp\n# " + "x" * (2 << 20) + "\n")
    with pytest.raises(SpecError, match="at most 1,048,576"):
        load_sweep_file(tmp_path / "big.yaml")


def test_an_override_that_expands_exponentially_is_refused() -> None:
    from dmlbench.spec.overrides import parse_assignment

    assert parse_assignment("x=[&a [1, 2], *a]")[1] == [[1, 2], [1, 2]]  # aliases are fine
    levels = ["&l0 [1,1,1,1,1,1,1,1,1,1]"]
    levels += [f"&l{n} [{','.join([f'*l{n - 1}'] * 10)}]" for n in range(1, 8)]  # 10⁸ values
    started = time.monotonic()
    with pytest.raises(SpecError, match="override 'x' is refused: it expands to more than"):
        parse_assignment(f"x=[{', '.join(levels)}]")
    assert time.monotonic() - started < 1.0


def test_huge_sweeps_are_refused_before_they_are_expanded() -> None:
    started = time.monotonic()
    with pytest.raises(SpecError, match="1,000,000 combinations × 1 repeats of its axes"):
        plan_sweep(sweep(axes={"workers": list(range(1, 1001)), "momentum": [0.1] * 1000}))
    with pytest.raises(SpecError, match="in its fork rules"):
        plan_sweep(
            sweep(
                axes={"workers": [1, 2]},
                rules=[
                    {"when": "True", "fork": {"momentum": [0.1] * 200, "max_epochs": [1] * 200}}
                ],
            )
        )
    assert time.monotonic() - started < 2.0


def test_validation_errors_stay_short() -> None:
    with pytest.raises(SpecError) as error:
        validate_sweep(
            {
                "name": "t",
                "task": "synthetic-mlp",
                "repeats": "x" * 10_000,
                **{f"bogus{i}": i for i in range(50)},
            }
        )
    assert len(str(error.value)) < 1000 and "more" in str(error.value)


def test_a_set_of_what_an_option_or_an_axis_sets_is_refused(dmlbench, tmp_path) -> None:
    """One of the two won without a word: `--workers 2 --set workers=3` ran 3 workers,
    a sweep's axis and its seeds silently replaced a `--set` of them, and in a sweep a
    spec file's exchange won over `--exchange` (a single run took the option's)."""
    refused = {
        ("run", "-w", "2", "--set", "workers=3"): "--set workers and --workers",
        ("run", "-w", "1,2", "--set", "workers=3"): "--set workers and the sweep's workers axis",
        ("run", "-w", "1,2", "--set", "seed=4"): "--set seed and the sweep's seeds (its first",
        ("run", "--network", "1gbit", "--set", "network=100mbit"): "--set network and --network",
        ("run", "--model", "mlp,linear", "--set", "model.name=mlp"): "the sweep's model axis",
        ("bench", "allreduce", "-w", "2,4", "--set", "workers=3"): "--set workers and --workers",
        # the spec sets the local batch to global_batch / workers: 32 ran, not 16
        ("run", "-w", "2", "--global-batch", "64", "--set", "local_batch=16"): "global_batch both",
    }
    for args, said in refused.items():
        code, _, err = dmlbench(*args, *(["--dry-run"] if args[0] == "run" else []))
        assert code == 2 and said in err and "give one of them" in err, (args, err)
    # what an axis or an option leaves alone is still set: a link's latency, a model's option
    code, out, err = dmlbench(
        "run", "-w", "1,2", "--network", "1gbit,10gbit", "--model", "mlp,linear",
        "--set", "latency=5ms", "--set", "hidden=[64]", "--dry-run", "--json",
    )  # fmt: skip
    assert code == 0, err
    specs = [run["spec"] for run in json.loads(out)["runs"]]
    assert {spec["network"]["latency"] for spec in specs} == {"5ms"}
    models = {spec["recipe"]["model"]["name"]: spec["recipe"]["model"]["options"] for spec in specs}
    assert models == {"mlp": {"hidden": [64]}, "linear": {}}
    config = tmp_path / "spec.yaml"
    config.write_text("task: digits-mlp\nexchange: powersgd\n")
    for workers in ("2", "1,2"):
        code, out, err = dmlbench(
            "run", "-w", workers, "-c", str(config), "--exchange", "fp16", "--dry-run", "--json"
        )
        assert code == 0, err
        plan = json.loads(out)
        assert {s["exchange"] for s in [r["spec"] for r in plan.get("runs", [plan])]} == {"fp16"}
    # an option that sets none of a mapping's keys (no --network) leaves them to --set
    code, _, err = dmlbench("bench", "allreduce", "-s", "latency=5ms", "-s", "max_iterations=0")
    assert code == 2 and "max_iterations" in err and "both set" not in err, err


def test_a_spec_files_seed_is_an_inline_sweeps_first(dmlbench, tmp_path) -> None:
    """`run --workers 1,2 --config spec.yaml` with `seed: 3` in the spec file was refused:
    "invalid sweep: set: give the first seed as the sweep's own 'seed:'", of a sweep file
    the user never wrote."""
    config = tmp_path / "spec.yaml"
    config.write_text("task: digits-mlp\nseed: 3\n")
    for more, seeds in (((), [3, 3, 4, 4]), (("--seed", "7"), [7, 7, 8, 8])):
        args = ("run", "-w", "1,2", "--repeats", "2", "-c", str(config), *more)
        code, out, err = dmlbench(*args, "--dry-run", "--json")
        assert code == 0, err
        assert [run["spec"]["seed"] for run in json.loads(out)["runs"]] == seeds


def test_a_sweep_files_set_that_one_of_its_axes_sets_is_refused(tmp_path: Path) -> None:
    """`set: {max_epochs: 3}` beside `axes: {recipe.max_epochs: [1, 2]}`: the axis won
    without a word."""
    path = tmp_path / "both.yaml"
    for set_, axis in (
        ("max_epochs: 3", "recipe.max_epochs"),
        ("recipe: {max_epochs: 3}", "max_epochs"),
    ):
        path.write_text(f"task: synthetic-mlp\nset: {{{set_}}}\naxes: {{{axis}: [1, 2]}}\n")
        with pytest.raises(SpecError, match=f"is under set: and is the axis {axis}, whose"):
            load_sweep_file(path)
    path.write_text("task: synthetic-mlp\nset: {max_epochs: 3}\nderived: {max_epochs: '1'}\n")
    with pytest.raises(SpecError, match="max_epochs is under set: and is derived as max_epochs"):
        load_sweep_file(path)
    path.write_text("task: synthetic-mlp\nset: {max_epochs: 3}\naxes: {workers: [1, 2]}\n")
    assert load_sweep_file(path).set == {"max_epochs": 3}


def test_a_set_of_what_a_sweep_files_rules_or_derived_values_set_is_refused(
    dmlbench, tmp_path: Path
) -> None:
    """`dmlbench sweep FILE --set local_batch=8` lost without a word where a rule of the
    file set or forked the local batch, and `--set max_epochs=5` where the file derived
    it: a run's plan read 32, or the derived epochs."""
    path = tmp_path / "rules.yaml"
    path.write_text(
        "task: synthetic-mlp\nscaling: none\naxes: {workers: [1, 2]}\n"
        "rules:\n"
        "  - {when: 'workers == 2', set: {local_batch: 32}}\n"
        "  - {when: 'workers == 1', fork: {momentum: [0.0, 0.9]}}\n"
        "derived: {recipe.max_epochs: '3 if workers == 1 else 2'}\n"
    )
    plan = ("sweep", str(path), "--plan", "--store", str(tmp_path / "store"))
    refused = {
        "local_batch=8": "--set recipe.local_batch and the sweep's rule 'workers == 2'",
        "momentum=0.5": "the sweep's rule 'workers == 1' both set recipe.optimizer.momentum",
        "max_epochs=5": "--set recipe.max_epochs and the sweep's derived recipe.max_epochs",
    }
    for assignment, said in refused.items():
        code, _, err = dmlbench(*plan, "--set", assignment)
        assert code == 2 and said in err and "give one of them" in err, (assignment, err)
    code, out, err = dmlbench(*plan, "--set", "weight_decay=0.001", "--json")  # left alone
    assert code == 0, err
    specs = [run["spec"]["recipe"] for run in json.loads(out)["runs"]]
    assert {spec["optimizer"]["weight_decay"] for spec in specs} == {0.001}
    assert sorted(spec["local_batch"] for spec in specs) == [16, 16, 32]


def test_a_spec_files_batch_is_an_inline_scaling_sweeps_own(dmlbench, tmp_path) -> None:
    """`run --workers 1,2 --scaling weak --config spec.yaml` with a local batch in the spec
    file (or strong with a global batch) was refused: "remove local_batch/global_batch
    from set, axes and derived", of a sweep file the user never wrote."""
    config = tmp_path / "spec.yaml"
    cases = [
        ("recipe: {local_batch: 16}", "weak", "1,2", [(16, 16), (16, 32)]),
        ("local_batch: 16", "weak", "1,2", [(16, 16), (16, 32)]),
        ("global_batch: 64", "strong", "1,2", [(64, 64), (32, 64)]),
        ("local_batch: 16", "strong", "2,4", [(16, 32), (8, 32)]),  # at the fewest workers
    ]
    for line, scaling, workers, batches in cases:
        config.write_text(f"task: digits-mlp\n{line}\n")
        args = ("run", "-w", workers, "--scaling", scaling, "-c", str(config), "--dry-run")
        code, out, err = dmlbench(*args, "--json")
        assert code == 0, (line, err)
        specs = [run["spec"] for run in json.loads(out)["runs"]]
        local = [spec["recipe"]["local_batch"] for spec in specs]
        assert [(b, b * spec["workers"]) for b, spec in zip(local, specs, strict=True)] == batches
    config.write_text("task: digits-mlp\nglobal_batch: 64\n")
    code, _, err = dmlbench("run", "-w", "1,2", "--scaling", "weak", "-c", str(config), "--dry-run")
    assert code == 2 and "weak scaling keeps each worker's local batch" in err, err
    config.write_text("task: digits-mlp\nlocal_batch: true\n")  # True * 2 workers was 2
    code, _, err = dmlbench(
        "run", "-w", "2,4", "--scaling", "strong", "-c", str(config), "--dry-run"
    )
    assert code == 2 and "local_batch True: give a whole number" in err, err
