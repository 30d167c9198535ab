"""What tells a group's runs apart: a variant label per run (``momentum=0.9
exchange=powersgd``), built from the spec keys that differ besides the worker count and
seed, and the short names figures draw when labels are long."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

from dmlbench.spec.overrides import flatten

# Spec keys that never make two runs different experiments.
_NOT_VARIANT = {"workers", "seed", "data_dir", "download", "plugins", "save_model"}
# Keys that follow the worker count: a variant only when they vary at a fixed count
# (local batch under weak/strong scaling; nproc_per_node, nodes: 2×2 against 1×4).
_BATCH_KEYS = {"recipe.local_batch", "global_batch", "nodes", "nproc_per_node"}
# The order an imported run's label says its scale in; the numbers in a label order it.
_SCALE = {"nodes": 0, "nproc_per_node": 1, "recipe.local_batch": 2}


def variant_labels(frame: pd.DataFrame, group_by: list[str]) -> pd.Series:
    """A label per run for what differs within its group besides workers and seed.

    Batch sizes count only when they vary at a fixed worker count (weak and strong
    scaling change them with the workers; that is the experiment, not a variant). The
    network's settings count as one key, ``network``, its profile's name or rate.
    """
    labels = pd.Series("", index=frame.index, dtype=object)
    for _, group in frame.groupby(group_by, sort=False):
        flat = pd.DataFrame(
            [
                {
                    k: json.dumps(v, sort_keys=True)
                    for k, v in flatten(json.loads(s)).items()
                    if not k.startswith("network.")
                }
                for s in group["spec"]
            ],
            index=group.index,
        )
        flat["network"] = group["network"].map(json.dumps)
        flat["workers"] = group["workers"]
        sections = [set(json.loads(s)) for s in group["spec"]]
        imported = all("external" in has for has in sections)  # MLPerf's published runs
        keys = []
        for key in flat.columns:
            present = set(flat[key].dropna())
            if len(present) < len(flat[key]) and present <= {_newer_defaults().get(key)}:
                continue  # an option older runs' specs lack, at its default where present
            if key in _NOT_VARIANT or flat[key].nunique(dropna=False) < 2:
                continue
            if _alike_where_present(key, flat[key], sections):
                continue
            follows = flat.groupby("workers")[key].nunique().max() < 2
            if key in _BATCH_KEYS and follows and not (imported and key == "nodes"):
                continue
            keys.append(key)
        if imported:  # a system's nodes, devices and batch first: systems sort by scale
            keys.sort(key=lambda key: (_SCALE.get(key, len(_SCALE)), key.startswith("external.")))
        for index, has in zip(group.index, sections, strict=True):
            labels[index] = " ".join(
                f"{_key_text(k)}={_value_text(_loads(flat.at[index, k]))}"
                for k in keys
                if _says(k, flat.at[index, k], has)
            )
    return labels


def _alike_where_present(key: str, values: pd.Series, sections: list[set[str]]) -> bool:
    """Whether ``key`` belongs to a section only some runs' specs have (a Dask fit's
    ``dask``) and is the same in all that have it: what tells those runs apart from the
    rest is said once, by the key that does (``exchange=dask-centralised``), not by every
    key of the section (two fits beside a torch run each read "device=cpu
    engine=centralised grads_per_worker=32 max_workers=2 ..." though only their damper
    differed)."""
    section = key.partition(".")[0]
    has = [section in spec for spec in sections]
    if all(has) or not any(has):
        return False
    return values[has].nunique(dropna=False) < 2


def _says(key: str, value: Any, sections: set[str]) -> bool:
    """Whether a key's value tells this run apart: an option of another model or
    exchange than this run's (absent from its spec), a key of a section its spec lacks
    (a Dask fit's ``dask.*`` beside a torch run: "delay=null factor=null ..."), an empty
    table or a batch key left to follow from the others ("global_batch=null") does not
    ("depth=null zero_init_residual=null options={}" labelled a vgg16 run beside
    ResNet-50's, "exchange=allreduce ratio=null" an all-reduce run beside topk's)."""
    if value == "{}":
        return False
    if key in _BATCH_KEYS and value == "null":
        return False  # follows from the others, as the b/B column shows it
    if isinstance(value, str):
        return True
    section, _, rest = key.partition(".")
    return not key.startswith(OPTION_TABLES) and (not rest or section in sections)


# Tables of one choice's options (the model's, the exchange's): another choice has others.
OPTION_TABLES = ("recipe.model.options", "exchange_options")


def _key_text(key: str) -> str:
    """A spec key in a variant label: its last part (``momentum``), with the part before
    where the last is a table's key (``alpha_by_workers.1``, α at 1 worker)."""
    if key == "recipe.model.name":
        return "model"
    parts = key.split(".")
    return ".".join(parts[-2:]) if len(parts) > 1 and not parts[-1].isidentifier() else parts[-1]


def _loads(text: Any) -> Any:
    """A flattened spec value; None where this run's spec lacks the key."""
    return json.loads(text) if isinstance(text, str) else None


@functools.cache
def _newer_defaults() -> dict[str, str]:
    """Run options' defaults as the flattened spec writes them (JSON)."""
    from dmlbench.spec import RunSpec

    return {
        name: json.dumps(field.get_default(call_default_factory=True), sort_keys=True, default=str)
        for name, field in RunSpec.model_fields.items()
        if not field.is_required()
    }


def _value_text(value: Any) -> str:
    """A spec value in a variant label: strings bare (spaces and all: :func:`variant_pairs`
    reads a value up to the next key), the rest as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


# A variant label longer than this is drawn as a letter, spelt out in a legend table.
SHORT_LABEL = 28


def number_order(text: Any) -> tuple[Any, ...]:
    """A sort key that puts labels in the order of the numbers in them: ``local_batch=4``
    before ``local_batch=16`` (as text, 16 came first)."""
    parts = re.split(r"(\d+)", str(text))
    # a run of digits past Python's limit for int() orders by its first 300
    return tuple(int(part[:300]) if i % 2 else part for i, part in enumerate(parts))


def short_labels(variants: Iterable[str], longest: int = SHORT_LABEL) -> dict[str, str]:
    """A short name for each variant label, in sorted order (so every figure of a section
    names and colours a variant alike): the label itself when every label is at most
    ``longest`` characters, else ``A``, ``B``, ... (see :func:`variant_legend`)."""
    unique = sorted({str(v) for v in variants}, key=number_order)
    if all(len(v) <= longest for v in unique):
        return {v: v for v in unique}
    return {label: _letters(i) for i, label in enumerate(unique)}


def _letters(index: int) -> str:
    """``A`` … ``Z``, then ``AA``, ``AB`` … as a spreadsheet names its columns (past Z
    they were ``V27``, read beside the variant ``V`` as its 27th)."""
    name = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        name = chr(ord("A") + rest) + name
    return name


def variant_pairs(label: str) -> dict[str, str]:
    """A variant label's ``key=value`` pairs, as a mapping; a value runs to the next
    key, spaces and all (an imported run's network, ``1xNVIDIA DGX-1``)."""
    return dict(_PAIR.findall(str(label)))


_PAIR = re.compile(r"(?:^|\s)([^\s=]+)=(.*?)(?=\s[^\s=]+=|$)")


def variant_legend(variants: Iterable[str]) -> pd.DataFrame:
    """The legend table of :func:`short_labels`: one row per variant, a column per key
    that varies, empty when no label was shortened."""
    names = short_labels(variants)
    if all(short == label for label, short in names.items()):
        return pd.DataFrame()
    rows = []
    for label, short in names.items():
        rows.append({"variant": short, **variant_pairs(label)})
    return pd.DataFrame(rows).fillna("—")
