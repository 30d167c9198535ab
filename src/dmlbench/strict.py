"""The base of every typed spec. Lives apart from ``dmlbench.spec`` so that any package
(``netem`` included) can use it without importing the run spec."""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

from dmlbench.errors import registered


class StrictModel(BaseModel):
    """Refuses unknown keys, so a typo in a spec never passes silently, and infinite or
    NaN numbers, which no spec value means."""

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


class WorkersSpec(StrictModel):
    """A spec that starts worker processes (a run, a micro-benchmark): what they share.
    Each declares its own ``threads_per_worker`` field and ``per_node``."""

    if TYPE_CHECKING:  # declared by the subclasses, so their field order stays theirs
        threads_per_worker: int | None

        @property
        def per_node(self) -> int: ...

    def threads(self, cores: int | None = None) -> int:
        """Threads per worker: this host's cores shared by the workers it runs."""
        cores = cores or len(os.sched_getaffinity(0))
        return self.threads_per_worker or max(1, cores // self.per_node)

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def in_registry(kind: str, module: str, attribute: str) -> AfterValidator:
    """A field's validator: the value must name an entry of the registry
    ``module.attribute``, imported when a spec is validated (registries import torch)."""

    def check(name: str) -> str:
        return registered(kind, name, getattr(importlib.import_module(module), attribute))

    return AfterValidator(check)
