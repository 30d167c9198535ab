"""``key=value`` overrides on nested spec dictionaries.

A key is a dotted path (``recipe.optimizer.momentum``) or, for convenience, any unique
suffix of one (``momentum``). Values are read as YAML scalars or lists, so ``0.1``,
``true``, ``[82, 109]`` and ``null`` mean what they look like.
"""

from __future__ import annotations

import copy
import difflib
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from dmlbench.errors import SpecError
from dmlbench.files import expanded_size
from dmlbench.names import shorten

# Keys whose value is a free-form mapping: a dotted path may add new keys below them.
_OPEN_MAPPINGS = ("options", "alpha_by_workers", "exchange_options")

# The options each model takes, by model name, as dmlbench.models registers them (it
# builds on this layer): a suffix such as ``heads`` then names an option of the model a
# tree names while that option still stands at its default, so not in the tree.
MODEL_OPTIONS: dict[str, tuple[str, ...]] = {}


def parse_assignment(text: str) -> tuple[str, Any]:
    """Split ``key=value`` and read the value as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SpecError(
            f"override {shorten(text)!r} is not key=value (e.g. --set recipe.local_batch=64)"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    except RecursionError:
        raise SpecError(f"override '{shorten(key)}' is nested too deeply") from None
    except ValueError:  # an integer of more digits than Python converts
        raise SpecError(
            f"override '{shorten(key)}' is refused: its value is a number of more than "
            f"{sys.get_int_max_str_digits():,} digits"
        ) from None
    try:
        expanded_size(value)
    except ValueError as error:
        raise SpecError(f"override '{shorten(key)}' is refused: {error}") from None
    return key, value


def _paths(tree: Mapping[Any, Any], prefix: str = "") -> list[str]:
    paths: list[str] = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        paths.append(path)
        if isinstance(value, Mapping):
            paths.extend(_paths(value, f"{path}."))
    if "options" in tree and isinstance(name := tree.get("name"), str):  # a model
        unset = [o for o in MODEL_OPTIONS.get(name, ()) if o not in (tree["options"] or {})]
        paths += [f"{prefix}options.{option}" for option in unset]
    return paths


def resolve_key(tree: Mapping[str, Any], key: str) -> str:
    """Return the full dotted path that ``key`` names in ``tree``, or explain why not."""
    paths = _paths(tree)
    if key in paths:
        return key
    matches = [p for p in paths if p.endswith(f".{key}")]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise SpecError(f"'{shorten(key)}' is ambiguous: say one of {', '.join(sorted(matches))}")
    head, _, tail = key.rpartition(".")
    if head.rpartition(".")[2] in _OPEN_MAPPINGS:  # a new entry, e.g. model.options.width
        return f"{resolve_key(tree, head)}.{tail}"
    by_leaf = {p.rpartition(".")[2]: p for p in paths}
    close = difflib.get_close_matches(key.rpartition(".")[2][:200], by_leaf, n=1)
    hint = f" (did you mean '{by_leaf[close[0]]}'?)" if close else ""
    if models := [name for name, options in MODEL_OPTIONS.items() if key in options]:
        hint = (
            f" (an option of the model {' or '.join(models)}: name that model first, with "
            "--model or recipe.model.name)"
        )
    raise SpecError(f"unknown spec key '{shorten(key)}'{hint}; `--dry-run --json` shows every key")


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    node, leaf = _parent(tree, path)
    node[leaf] = value


def _parent(tree: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The mapping that holds ``path``'s last part (made on the way where missing), and
    that part."""
    node = tree
    *parents, last = path.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    return node, last


def deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``extra`` into ``base`` recursively (in place) and return ``base``.

    A mapping that changes the schedule ``kind``, or the model's ``name``, replaces it
    wholesale, since the fields of one kind (one model's options) mean nothing to
    another. A bare name for a model or a network is taken as ``--set`` takes it.
    """
    for key, value in extra.items():
        current = base.get(key)
        same_kind = not (
            isinstance(value, Mapping)
            and isinstance(current, Mapping)
            and any(_another(current, value, tag) for tag in ("kind", "name"))
        )
        if isinstance(value, Mapping) and isinstance(current, dict) and same_kind:
            deep_merge(current, value)
        else:
            _put(base, key, dict(value) if isinstance(value, Mapping) else value)
    return base


def _another(current: Mapping[str, Any], new: Mapping[str, Any], tag: str) -> bool:
    """Whether ``new`` names another kind of thing than ``current`` by ``tag``: a
    schedule's ``kind``, or a model's ``name`` (a mapping with ``options``)."""
    if tag not in new or new[tag] == current.get(tag):
        return False
    return tag == "kind" or "options" in current


def assign(tree: dict[str, Any], key: str, value: Any) -> str:
    """Set spec key ``key`` (full path or unique suffix) to an already parsed ``value``.
    Naming another model drops the old one's options (set new ones after it)."""
    path = resolve_key(tree, key)
    _put(*_parent(tree, path), value)
    return path


def _put(node: dict[str, Any], leaf: str, value: Any) -> None:
    """``node[leaf] = value``, where a bare name given for a whole mapping takes what its
    option takes (a spec file's ``model: mlp`` as ``--model mlp``, ``network: 1gbit`` as
    ``--network 1gbit``), and naming another model drops the old one's options."""
    current = node.get(leaf)
    if isinstance(value, str) and isinstance(current, dict):  # a bare name for a mapping
        if "name" in current and "options" in current:  # a model's, as --model takes it
            node, leaf = current, "name"  # the rule below for its options
        elif "profile" in current:  # a network's link, as --network takes it
            value = _network_link(current, value)
    if leaf == "name" and _another(node, {"name": value}, "name"):
        node["options"] = {}
    node[leaf] = value


def _network_link(current: dict[str, Any], value: str) -> dict[str, Any]:
    """``network: 1gbit`` (a sweep's axis, ``--set network=250mbit``): the network with
    its link the profile or rate ``value`` names, its other keys (latency) kept."""
    from dmlbench.netem.profiles import network_option

    return {**current, "profile": "none", "bandwidth": None, **(network_option(value) or {})}


def apply_overrides(tree: dict[str, Any], assignments: Iterable[str]) -> list[str]:
    """Apply ``key=value`` strings to ``tree`` in order; return the full paths touched."""
    return [assign(tree, *parse_assignment(text)) for text in assignments]


def refuse_set_twice(
    touched: Iterable[str], options: Mapping[str, Any], axes: Mapping[str, str] | None = None
) -> None:
    """Refuse a ``--set`` (its full paths ``touched``) of a key that the command's
    ``options`` (the values they set, by top-level key) or a sweep's ``axes`` (the leaves
    they write → what to call them) set too, where one of the two would win without a
    word: ``--workers 2 --set workers=3`` ran 3, and a sweep over ``workers`` its own."""
    set_by_options = [path for path, value in flatten(options).items() if value != {}]
    given = {path: f"--{path.split('.')[0].replace('_', '-')}" for path in set_by_options}
    given |= axes or {}
    for path in touched:
        for other, by in given.items():
            if path == other or other.startswith(f"{path}.") or path.startswith(f"{other}."):
                key = min(path, other, key=len)
                raise SpecError(f"--set {key} and {by} both set {key}: give one of them")


def written(tree: dict[str, Any], path: str, values: Iterable[Any]) -> set[str]:
    """The leaves of ``tree`` that setting ``path`` to each of ``values`` writes: a
    sweep's axis ``network: [1gbit, 10gbit]`` writes the link, not the latency, and a
    model's name the name, not the options it drops."""
    before = flatten(tree)
    leaves: set[str] = set()
    for value in values:
        scratch = copy.deepcopy(tree)
        assign(scratch, path, value)
        after = flatten(scratch)
        leaves |= {k for k, v in after.items() if v != {} and (k not in before or before[k] != v)}
    return leaves


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}``; lists stay whole."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat
