"""The base of every typed spec. Lives apart from ``dmlbench.spec`` so that any package
(``netem`` included) can use it without importing the run spec."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from dmlbench.errors import SpecError

# Bounds of the numbers a spec holds: what SQLite's INTEGER (signed 64 bits) stores, and
# far beyond any real run, so a value of 10**30 is refused in validation, not by SQLite.
MAX_SEED = 2**63 - 1
MAX_COUNT = 2**40
MAX_THREADS = 1024  # per worker, on any machine
THREADS_PER_CORE_ENV = "DMLBENCH_THREADS_PER_CORE"
THREADS_PER_CORE = 4  # at launch: a node's workers' threads, at most this × its cores


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

    def check_threads(self, cores: int | None = None) -> None:
        """Refuse, before anything starts, more threads than this host can run: a node's
        workers together get at most ``THREADS_PER_CORE`` × its cores (env
        ``DMLBENCH_THREADS_PER_CORE`` overrides the factor)."""
        cores = cores or len(os.sched_getaffinity(0))
        try:
            factor = int(os.environ.get(THREADS_PER_CORE_ENV) or THREADS_PER_CORE)
        except ValueError:
            raise SpecError(f"{THREADS_PER_CORE_ENV} must be a whole number") from None
        total = self.threads(cores) * self.per_node
        if total > factor * cores:
            raise SpecError(
                f"threads_per_worker={self.threads(cores)} × {self.per_node} workers here is "
                f"{total} threads on {cores} cores (at most {factor} a core): lower "
                f"threads_per_worker, or raise {THREADS_PER_CORE_ENV}"
            )

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
