"""Expand a SweepSpec into the validated RunSpecs it stands for.

Every run is refused or accepted before the first one starts: a sweep never fails
half-way because its fifth combination was impossible.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from dmlbench.errors import SpecError
from dmlbench.resolve import spec_tree, validate_spec
from dmlbench.spec.overrides import assign, flatten, resolve_key
from dmlbench.spec.run import RunSpec
from dmlbench.spec.sweep import SweepSpec
from dmlbench.sweep.expressions import Expression

# Spec fields that say where or how data is found, or how long to wait on a stalled
# worker, not what runs: not part of a run's key.
_NOT_IDENTITY = ("data_dir", "download", "plugins", "stall_timeout_s")
# Fields added later, left out of the key at their default so stored sweeps still resume.
_KEY_DEFAULTS = {
    "partial_data": False,
    "noise_scale": "auto",
    "validation_split": 0.0,
    "train_metric_examples": 0,
    "channels_last": "auto",
    "compile": False,
    "cpu_allocator": "jemalloc",  # tuned before: the same maths, and resumed alike
    "peak_tflops": None,
    "synthetic_data": False,
    "loader_processes": "auto",
}
# Recipe fields added later, by their path in the recipe: the same at their default
_RECIPE_KEY_DEFAULTS: dict[tuple[str, ...], object] = {("optimizer", "decay_norms"): True}
MAX_RUNS = 10_000  # a sweep larger than this is a typo (or an attack), not an experiment


def _bounded(sweep: SweepSpec, combinations: int, repeats: int, stage: str) -> None:
    if combinations * repeats > MAX_RUNS:
        raise SpecError(
            f"sweep '{sweep.name}' expands to {combinations:,} combinations × {repeats:,} "
            f"repeats {stage}; at most {MAX_RUNS:,} runs: split it into several sweeps"
        )


def run_key(spec: RunSpec) -> str:
    """Identity of a run for resuming: a hash of its resolved spec (seed included)."""
    canonical = json.dumps(key_data(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def key_data(spec: RunSpec) -> dict[str, Any]:
    """What :func:`run_key` hashes: the spec less what is not its identity, and less
    fields added later at their defaults (a stored sweep's keys stay the same)."""
    data = {
        k: v
        for k, v in spec.to_json_dict().items()
        if k not in _NOT_IDENTITY and not (k in _KEY_DEFAULTS and v == _KEY_DEFAULTS[k])
    }
    for path, default in _RECIPE_KEY_DEFAULTS.items():
        *parents, name = path
        holder = data["recipe"]
        for parent in parents:
            holder = holder[parent]
        if holder.get(name) == default:
            del holder[name]
    if spec.nodes == 1:  # one host: the layout is the worker count (keys of older sweeps)
        data.pop("nodes", None)
        data.pop("nproc_per_node", None)
    return data


@dataclass(frozen=True)
class PlannedRun:
    spec: RunSpec
    point: dict[str, Any]  # what distinguishes this run: axis, rule and derived values
    repeat: int
    key: str


@dataclass
class SweepPlan:
    sweep: SweepSpec
    runs: list[PlannedRun]
    dropped: int = 0  # combinations removed by drop rules
    duplicates: int = 0  # combinations that resolved to a spec already planned
    point_keys: list[str] = field(default_factory=list)  # the keys that vary, for display

    def describe(self, run: PlannedRun) -> str:
        parts = [f"{_short(k)}={run.point[k]}" for k in self.point_keys if k in run.point]
        return " ".join([*parts, f"seed={run.spec.seed}"])

    def to_json(self, stored: Collection[str] = ()) -> dict[str, Any]:
        """The plan as ``dmlbench sweep --plan --json`` prints it; ``stored``: the keys
        the store has already."""
        return {
            "sweep": self.sweep.model_dump(mode="json"),
            "dropped": self.dropped,
            "duplicates": self.duplicates,
            "runs": [
                {
                    "key": r.key,
                    "repeat": r.repeat,
                    "point": r.point,
                    "stored": r.key in stored,
                    "spec": r.spec.to_json_dict(),
                }
                for r in self.runs
            ],
        }


def _short(key: str) -> str:
    return key.rpartition(".")[2]


def _apply_rules(
    trees: list[tuple[dict[str, Any], dict[str, Any]]], sweep: SweepSpec
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    for rule in sweep.rules:
        if rule.drop:
            continue
        condition = Expression(rule.when)
        expanded = []
        width = math.prod(len(values) for values in rule.fork.values())
        for tree, point in trees:
            if not condition.evaluate(flatten(tree)):
                expanded.append((tree, point))
                continue
            _bounded(sweep, len(expanded) + width, 1, "in its fork rules")
            fork_keys = list(rule.fork)
            for combo in itertools.product(*(rule.fork[k] for k in fork_keys)):
                new_tree, new_point = copy.deepcopy(tree), dict(point)
                for key, value in [*rule.set.items(), *zip(fork_keys, combo, strict=True)]:
                    new_point[assign(new_tree, key, value)] = value
                expanded.append((new_tree, new_point))
        trees = expanded
    return trees


def _world(tree: dict[str, Any]) -> int:
    """A tree's world size: workers, or nodes × nproc_per_node when that is given."""
    per_node = tree.get("nproc_per_node")
    return int(tree.get("nodes") or 1) * int(per_node) if per_node else int(tree["workers"])


def _strong_global_batch(sweep: SweepSpec, trees: list[dict[str, Any]]) -> int:
    """One every run was given on the command line (``--set global_batch=…``: it
    overrides the file); else the sweep's ``global_batch``; else the smallest run's local
    batch × its workers."""
    given = {tree.get("global_batch") for tree in trees}
    if len(given) == 1 and (batch := given.pop()) is not None:
        return int(batch)
    if sweep.global_batch is not None:
        return sweep.global_batch
    smallest = min(trees, key=_world)
    return int(smallest["recipe"]["local_batch"]) * _world(smallest)


# what sets a sweep's seeds, as a refused --set of them names it
SEEDS = "the sweep's seeds (its first: run's --seed, a sweep file's seed:)"


def _set_later(sweep: SweepSpec, seeds: list[int]) -> list[tuple[str, Iterable[Any] | None, str]]:
    """What the sweep sets after the command line's ``--set``, with the values it takes
    (None: computed per run) and what to call it: its axes, its rules' set and fork, its
    derived values, its seeds. A ``--set`` of one of them would lose without a word."""
    later: list[tuple[str, Iterable[Any] | None, str]] = [
        (key, values, f"the sweep's {key} axis") for key, values in sweep.axes.items()
    ]
    for rule in sweep.rules:
        what = f"the sweep's rule '{rule.when}'"
        later += [(key, [value], what) for key, value in rule.set.items()]
        later += [(key, values, what) for key, values in rule.fork.items()]
    later += [(key, None, f"the sweep's derived {key}") for key in sweep.derived]
    return [*later, ("seed", seeds, SEEDS)]


def plan_sweep(
    sweep: SweepSpec,
    *,
    overrides: Iterable[str] = (),
    plugins: Iterable[str] = (),
    fields: dict[str, Any] | None = None,
    repeats: int | None = None,
) -> SweepPlan:
    """Expand ``sweep``; ``overrides``/``fields`` apply to every run (CLI ``--set``, paths)."""
    config = {"plugins": sweep.plugins, **sweep.set}  # as a run's spec file: below the options
    if sweep.local_batch is not None:  # weak scaling's, below what the command line sets
        config["recipe.local_batch"] = sweep.local_batch
    repeat_count = repeats or sweep.repeats
    cli_seed = (fields or {}).get("seed")
    first_seed = sweep.seed if cli_seed is None else cli_seed
    seeds = [first_seed + repeat for repeat in range(repeat_count)]  # set last, as an axis
    base = spec_tree(
        sweep.task,
        config=config,
        overrides=overrides,
        plugins=plugins,
        later=_set_later(sweep, seeds),
        **(fields or {}),
    )
    axis_paths = [resolve_key(base, key) for key in sweep.axes]
    _bounded(sweep, math.prod(len(v) for v in sweep.axes.values()), repeat_count, "of its axes")
    trees: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for combo in itertools.product(*sweep.axes.values()):
        tree = copy.deepcopy(base)
        for path, value in zip(axis_paths, combo, strict=True):
            assign(tree, path, value)
        trees.append((tree, dict(zip(axis_paths, combo, strict=True))))
    trees = _apply_rules(trees, sweep)
    _bounded(sweep, len(trees), repeat_count, "after its rules")
    for key, text in sweep.derived.items():
        expression = Expression(text)
        for tree, point in trees:
            value = expression.evaluate(flatten(tree))
            point[assign(tree, key, value)] = value
    before = len(trees)
    for rule in sweep.rules:
        if rule.drop:
            condition = Expression(rule.when)
            trees = [(t, p) for t, p in trees if not condition.evaluate(flatten(t))]
    dropped = before - len(trees)
    if not trees:
        raise SpecError(f"sweep '{sweep.name}' has no runs left after its drop rules")
    if sweep.scaling == "strong":
        batch = _strong_global_batch(sweep, [t for t, _ in trees])
        for tree, point in trees:
            if batch % _world(tree):
                raise SpecError(
                    f"strong scaling: global batch {batch} does not divide among "
                    f"{_world(tree)} workers; choose worker counts that divide {batch} "
                    "or another global batch (global_batch in the sweep, or --global-batch)"
                )
            tree["global_batch"] = batch
            point["global_batch"] = batch
    runs: list[PlannedRun] = []
    seen: set[str] = set()
    duplicates = 0
    for repeat, seed in enumerate(seeds):  # repeat-major: repeats interleave
        for tree, point in trees:
            tree = copy.deepcopy(tree)
            tree["seed"] = seed
            try:
                spec = validate_spec(tree)
            except SpecError as error:
                where = " ".join(f"{_short(k)}={v}" for k, v in point.items())
                raise SpecError(f"{error} (sweep run {where or 'base'})") from None
            key = run_key(spec)
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            runs.append(PlannedRun(spec, point, repeat, key))
    varying = [
        k
        for k in dict.fromkeys(k for r in runs for k in r.point)
        if len({json.dumps(r.point.get(k), default=str) for r in runs}) > 1
    ]
    return SweepPlan(sweep, runs, dropped, duplicates, varying)
