"""Which examples each worker sees.

Every epoch draws one seeded permutation of the training set, shared by all workers.
Global batch ``s`` is ``perm[s·B : (s+1)·B]`` and worker ``r`` takes its ``r``-th slice
of ``b`` examples. So within an epoch the workers' shards are disjoint and equal in
size, every worker runs the same number of steps, and the sequence of global batches
does not depend on how many workers share it (which is what makes 2 workers × b
equal 1 worker × 2b). The last ``n mod B`` examples of each permutation are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dmlbench.errors import SpecError


@dataclass(frozen=True)
class EpochSharding:
    num_examples: int
    world_size: int
    rank: int
    local_batch: int
    seed: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world of {self.world_size}")
        if self.steps_per_epoch == 0:
            raise SpecError(
                f"global batch {self.global_batch} is larger than the {self.num_examples} "
                "training examples; use fewer workers or a smaller local_batch"
            )

    @property
    def global_batch(self) -> int:
        return self.local_batch * self.world_size

    @property
    def steps_per_epoch(self) -> int:
        return self.num_examples // self.global_batch

    def permutation(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_examples, generator=generator)

    def indices(self, epoch: int) -> torch.Tensor:
        """``[steps_per_epoch, local_batch]`` example indices of this worker for ``epoch``."""
        steps, used = self.steps_per_epoch, self.steps_per_epoch * self.global_batch
        grid = self.permutation(epoch)[:used].view(steps, self.world_size, self.local_batch)
        return grid[:, self.rank].contiguous()


def eval_shard(num_examples: int, world_size: int, rank: int) -> range:
    """Contiguous slice of the test set for ``rank``; together the slices cover it once."""
    start = num_examples * rank // world_size
    stop = num_examples * (rank + 1) // world_size
    return range(start, stop)
