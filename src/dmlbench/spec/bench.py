"""CommBenchSpec: a communication micro-benchmark (mlbench's task 0), fully resolved."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import ByteSize, Field, ValidationError, model_validator

from dmlbench.errors import SpecError
from dmlbench.netem.profiles import NetworkSpec
from dmlbench.strict import MAX_THREADS, WorkersSpec

ELEMENT_BYTES = 4  # float32


class CommBenchSpec(WorkersSpec):
    """All-reduce of float32 tensors over message sizes on a log scale.

    Sizes go from ``min_bytes`` (1 element) up to ``max_bytes``, multiplying by
    ``factor``; the largest size is always included. Each size gets ``warmup``
    untimed all-reduces, then ``repeats`` timed repeats, each after a barrier. A repeat
    is as many back-to-back all-reduces as fill ``repeat_s`` (one for large messages);
    its time per all-reduce is one sample.
    """

    op: Literal["allreduce"] = "allreduce"
    workers: int = Field(2, ge=1, le=4096)
    nodes: int = Field(
        1,
        ge=1,
        le=1024,
        description="an emulated cluster: workers / nodes per node, a "
        "namespace per node; measures across nodes, within one, and hierarchically",
    )
    backend: Literal["gloo", "nccl", "mpi"] = "gloo"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # sizes in bytes, or as 64MiB, 1GB (pydantic's ByteSize)
    min_bytes: ByteSize = Field(ByteSize(ELEMENT_BYTES), ge=ELEMENT_BYTES)
    max_bytes: ByteSize = Field(ByteSize(10**8), ge=ELEMENT_BYTES, le=2**34)
    factor: int = Field(4, ge=2, le=1024, description="size step: bytes × factor")
    warmup: int = Field(3, ge=0, le=1000)
    repeats: int = Field(10, ge=1, le=100_000)
    repeat_s: float = Field(
        0.01,
        gt=0,
        le=60,
        description="a timed repeat runs back-to-back all-reduces for "
        "about this long (at least one), so barrier skew does not swamp small messages",
    )
    max_iterations: int = Field(1000, ge=1, description="most all-reduces in one repeat")
    threads_per_worker: int | None = Field(None, ge=1, le=MAX_THREADS)
    mpi_isolate: bool = Field(
        True,
        description="run mpirun in a network namespace of its own (Open MPI's runtime "
        "listens on every interface); false accepts listeners reachable from outside",
    )
    stall_timeout_s: float = Field(
        60.0, gt=0, le=86_400, description="a worker with no heartbeat for this long is stopped"
    )
    network: NetworkSpec = Field(default_factory=NetworkSpec)

    @model_validator(mode="after")
    def _sizes_make_sense(self) -> CommBenchSpec:
        if self.max_bytes < self.min_bytes:
            raise ValueError(f"max_bytes {self.max_bytes} is below min_bytes {self.min_bytes}")
        if self.workers % self.nodes:
            raise ValueError(f"workers {self.workers} do not divide among {self.nodes} nodes")
        if self.nodes > 1 and self.backend == "mpi":
            raise ValueError("an emulated cluster (nodes > 1) runs gloo or nccl, not mpi")
        return self

    @property
    def per_node(self) -> int:
        return self.workers // self.nodes

    def sizes(self) -> list[int]:
        """Message sizes in bytes, whole float32 elements, smallest first."""
        sizes, size = [], int(self.min_bytes)
        while size < self.max_bytes:
            sizes.append(size - size % ELEMENT_BYTES)
            size *= self.factor
        sizes.append(self.max_bytes - self.max_bytes % ELEMENT_BYTES)
        return sorted(set(sizes))

    def iterations(self, seconds_each: float) -> int:
        """All-reduces per timed repeat when one takes ``seconds_each`` (1 to max)."""
        return max(1, min(self.max_iterations, int(self.repeat_s / max(seconds_each, 1e-9))))


def validate_bench(data: dict[str, Any]) -> CommBenchSpec:
    """A benchmark spec from its dictionary: every problem one readable line. What the
    machine must have for it (MPI, CUDA, root) is checked by ``launch.bench.resolve_bench``."""
    from dmlbench.spec.run import one_line

    try:
        spec = CommBenchSpec.model_validate(data)
    except ValidationError as error:
        raise SpecError(f"invalid benchmark spec: {one_line(error)}") from None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 0
    need = 3 * spec.max_bytes * spec.workers  # tensor + gloo's buffers, per worker
    if memory and need > memory // 2:
        raise SpecError(
            f"max_bytes {spec.max_bytes:,} at {spec.workers} workers needs about "
            f"{need / 2**30:.1f} GiB, over half of this machine's {memory / 2**30:.1f} GiB; "
            "lower --max-bytes"
        )
    return spec
