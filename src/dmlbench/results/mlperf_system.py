"""A submission's system description, ``<submitter>/systems/<system>.json``, as the
devices its runs trained on: nodes, devices a node and their model.

MLPerf's schema names ``number_of_nodes`` and ``accelerators_per_node``. Submitters
did not all follow it to the letter, and their systems were accepted as they are, so
the few spellings found in published rounds are read too (v0.7: Dell EMC's
``number of nodes``). A system with no accelerator (v0.7: Intel's Xeon systems) trained
on its host processors, and those are its devices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlbench.errors import StoreError
from dmlbench.files import read_bounded
from dmlbench.names import shorten

MAX_SYSTEM_BYTES = 1 << 20  # a system description is 2 KB
SPELLINGS = {"number_of_nodes": ("number of nodes",)}


@dataclass(frozen=True)
class Devices:
    nodes: int
    per_node: int
    model: str
    accelerators: bool  # False: the host processors trained


def read_system(root: Path, system: str) -> dict[str, Any]:
    """The description of ``system`` in the submission at ``root``; one line when it is
    missing, too large or not a JSON object."""
    where = root / "systems" / f"{system}.json"
    try:
        data = json.loads(read_bounded(where, MAX_SYSTEM_BYTES, "system description", StoreError))
    except ValueError:
        raise StoreError(f"the system description {where} is not JSON") from None
    if not isinstance(data, dict):
        raise StoreError(f"the system description {where} is not a JSON object")
    return data


def _field(system: dict[str, Any], key: str) -> Any:
    for name in (key, *SPELLINGS.get(key, ())):
        if name in system:
            return system[name]
    return None


def _count(system: dict[str, Any], key: str, where: str, *, least: int = 1) -> int:
    value = _field(system, key)
    text = str(value).strip() if isinstance(value, str | int) else ""
    if not text.isdigit() or not least <= int(text) <= 1_000_000:
        raise StoreError(
            f"{where}: {key} is {shorten(repr(value))}, not a count of {least} or more"
        )
    return int(text)


def system_devices(system: dict[str, Any], where: str) -> Devices:
    """The devices a run of ``system`` trained on; ``where`` names the file in errors."""
    nodes = _count(system, "number_of_nodes", where)
    per_node = _count(system, "accelerators_per_node", where, least=0)
    if per_node:
        model = system.get("accelerator_model_name") or "unknown"
        return Devices(nodes, per_node, str(model), accelerators=True)
    per_node = _count(system, "host_processors_per_node", where)
    model = system.get("host_processor_model_name") or "unknown"
    return Devices(nodes, per_node, str(model), accelerators=False)
