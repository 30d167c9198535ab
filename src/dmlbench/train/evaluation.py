"""A worker's share of an evaluation: accuracy and mean loss on the whole test set, each
rank taking one slice, and with ``train_metric_examples`` on one fixed subset of the
training set too. The trainer puts the model in evaluation mode around it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dmlbench.comm.collectives import all_reduce_sum
from dmlbench.data import Dataset, eval_shard
from dmlbench.data.dataset import Shapes
from dmlbench.data.feed import Feed
from dmlbench.data.images import ImageFiles
from dmlbench.heartbeat import beat
from dmlbench.models.losses import LOSSES
from dmlbench.tasks import TaskDefinition
from dmlbench.train.context import DistContext

TRAIN_SUBSET_SEED = 0  # the draw of training accuracy's examples: one for every run


class Evaluator:
    def __init__(
        self,
        forward: Callable[[torch.Tensor], torch.Tensor],
        task: TaskDefinition,
        data: Dataset,
        feed: Feed,
        ctx: DistContext,
        train_examples: int,
    ) -> None:
        """``forward``: the model's output on a batch as read (preprocessed, in the model's
        layout and precision), in evaluation mode."""
        self.forward, self.data, self.feed, self.ctx = forward, data, feed, ctx
        self.loss_fn, self.correct_fn = LOSSES[task.loss]
        self.batch = task.eval_batch
        # training accuracy's examples: one fixed draw, the same on every rank and run
        wanted = min(train_examples, len(data.train_x))
        draw = torch.Generator().manual_seed(TRAIN_SUBSET_SEED)
        self.train_subset = (
            torch.randperm(len(data.train_x), generator=draw)[:wanted]
            if wanted
            else torch.zeros(0, dtype=torch.int64)  # none: no shuffle of a million names
        )
        self._subset_files: ImageFiles | None = None

    @torch.no_grad()
    def sums(self, step: int) -> list[float]:
        """This rank's [correct, loss sum, count] on its slice of the test set, then the
        same on its slice of the training subset, if there is one."""
        assert not isinstance(self.data.test_x, Shapes)  # synthetic data is never evaluated
        sums = self._metric_sums(self.data.test_x, self.data.test_y, step)
        if len(self.train_subset):
            ys = self.data.train_y[self.train_subset]
            sums += self._metric_sums(self._subset_images(), ys, step)
        return sums

    def metrics(self, sums: list[float]) -> dict[str, float]:
        """Every rank's sums added up (a collective): accuracy and mean loss."""
        totals = all_reduce_sum(sums, self.ctx.device)
        metrics = {"accuracy": totals[0] / totals[2], "loss": totals[1] / totals[2]}
        if len(self.train_subset):
            metrics.update(train_accuracy=totals[3] / totals[5], train_loss=totals[4] / totals[5])
        return metrics

    def _subset_images(self) -> torch.Tensor | ImageFiles:
        """The training-accuracy subset's images: gathered at each evaluation from memory
        (not kept: up to a million examples), or the same file subset every time (its
        decoding processes are kept for the next evaluation)."""
        images = self.data.train_x
        assert not isinstance(images, Shapes)  # synthetic data is never evaluated
        if not isinstance(images, ImageFiles):
            return images[self.train_subset]
        if self._subset_files is None:
            self._subset_files = images[self.train_subset]
        return self._subset_files

    def _metric_sums(
        self, xs: torch.Tensor | ImageFiles, ys: torch.Tensor, step: int
    ) -> list[float]:
        """[correct, loss sum, count] over this rank's slice of ``xs``."""
        device = self.ctx.device
        shard = eval_shard(len(xs), self.ctx.world_size, self.ctx.rank)
        correct = torch.zeros((), device=device)
        loss_sum = torch.zeros((), device=device)
        for x_part, y_part in self.feed.batches(xs, ys, shard, self.batch):
            beat(step, "eval")
            x = x_part.to(device, non_blocking=True)
            y = y_part.to(device, non_blocking=True)
            out = self.forward(x)
            correct += self.correct_fn(out, y)
            loss_sum += self.loss_fn(out, y).sum()
        return [correct.item(), loss_sum.item(), float(len(shard))]
