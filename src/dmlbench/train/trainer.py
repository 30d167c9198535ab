"""Trainer: one worker's synchronous data-parallel SGD with phase timing and stop rules.

``train()`` runs epochs until a stop rule fires (target reached, time budget spent,
``max_epochs`` or ``max_steps``), evaluating on the whole test set every
``eval_every_epochs``. ``train_step()`` is one update, with each phase timed.
Only rank 0 writes events; every number it writes about other ranks was gathered
from them.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dmlbench.comm import make_exchange
from dmlbench.comm.collectives import all_gather_named, all_reduce_sum, squared_norm
from dmlbench.comm.sharded import shard_units
from dmlbench.data import Dataset, EpochSharding, eval_shard
from dmlbench.data.feed import Feed
from dmlbench.data.images import ImageFiles, batches
from dmlbench.errors import SpecError
from dmlbench.heartbeat import beat
from dmlbench.models import build_model
from dmlbench.models.flops import forked_rng, step_flops
from dmlbench.models.losses import LOSSES
from dmlbench.noise import NoiseScaleMeter
from dmlbench.optim import build_optimizer, l2_penalty, learning_rate
from dmlbench.optim.build import clip_gradients, parameter_groups
from dmlbench.results.contention import FIELDS as CONTENTION_FIELDS
from dmlbench.results.events import EventLog
from dmlbench.results.records import RunStop
from dmlbench.results.schema import ALL_PHASES
from dmlbench.spec import RunSpec
from dmlbench.spec.run import CHANNELS_LAST_EXCHANGES
from dmlbench.system import machine_cpu_s, machine_id, thread_wait_s
from dmlbench.tasks import TaskDefinition
from dmlbench.train.context import DistContext
from dmlbench.train.hardware import (
    FaultCounter,
    compiled_graphs,
    peak_for,
    peak_memory_bytes,
    tune_allocator,
)
from dmlbench.train.memory import (
    AsOnDevice,
    SavedForBackward,
    local_bytes,
    optimizer_state,
    peak_bytes,
    resident_bytes,
    restart_peak,
    state_slots,
)
from dmlbench.train.timers import PhaseTimer

PROGRESS_EVERY_S = 2.0
TRAIN_SUBSET_SEED = 0  # the draw of training accuracy's examples: one for every run


def _cpu_sample(helpers_s: float = 0.0) -> list[float]:
    """Clocks for the contention check: wall, this process's CPU (with ``helpers_s``, the
    CPU of processes its exchange started) and CPU wait, and the machine's busy and
    stolen core-seconds (see :mod:`dmlbench.results.contention`)."""
    busy, steal = machine_cpu_s()
    cpu = time.process_time() + helpers_s
    return [time.perf_counter(), cpu, thread_wait_s(), busy, steal]


def _autocast(precision: str, device: torch.device) -> Callable[[], AbstractContextManager]:
    """A context that runs forward (and the loss) in ``precision``; refused in one line on
    a device that cannot."""
    if precision == "fp32":
        return contextlib.nullcontext
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise SpecError(
            f"precision {precision}: {torch.cuda.get_device_name(device)} has no "
            "bfloat16; use precision=fp32"
        )
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


class Trainer:
    def __init__(
        self,
        spec: RunSpec,
        task: TaskDefinition,
        data: Dataset,
        ctx: DistContext,
        events: EventLog | None = None,
    ) -> None:
        self.spec, self.task, self.data, self.ctx = spec, task, data, ctx
        self.events = events or EventLog(None)
        self.device = ctx.device
        self._resident_start = resident_bytes(self.device)  # before the model exists
        self.activation_bytes = 0  # kept for backward by one step's forward (counted)
        self._training_peak = 0  # the most resident memory while steps ran (not evaluation)
        self._whole_peak = 0  # the run's peak before each restart of the steps' peak
        self.allocator = tune_allocator(spec.cpu_allocator)  # the trainer owns its process
        torch.manual_seed(spec.seed)  # same initial weights on every rank
        self.model = build_model(spec.recipe.model, data.input_shape, data.num_outputs)
        self.model.to(self.device)
        self.channels_last = self._wants_channels_last()
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            # oneDNN returns some small-image weight gradients (ResNet-50's last 3×3
            # convolutions) in the default layout; torch copies them into the weights'
            # layout and warns each worker about it. Measured: channels-last is still
            # 24% faster for ResNet-50 (BENCHMARKS.md), so the warning is only noise.
            warnings.filterwarnings(
                "ignore", message="grad and param do not obey the gradient layout contract"
            )
        self.sharding = EpochSharding(
            len(data.train_x), ctx.world_size, ctx.rank, spec.local_batch, spec.seed
        )
        self.exchange = make_exchange(
            spec.exchange, self.device, spec.exchange_options, self.sharding.steps_per_epoch
        )
        self.noise = self._noise_meter()
        self.exchange.measure_norms = self.noise is not None and ctx.world_size > 1
        self.net = self.exchange.prepare(self.model)
        self.optimizer = self.exchange.wrap_optimizer(
            lambda groups: build_optimizer(spec.recipe.optimizer, groups),
            parameter_groups(spec.recipe.optimizer, self.model),
        )
        self.loss_fn, self.correct_fn = LOSSES[task.loss]
        self.preprocess = data.preprocess(spec.recipe.augment)
        # training accuracy's examples: one fixed draw, the same on every rank and run
        wanted = min(spec.train_metric_examples, len(data.train_x))
        self.train_subset = (
            torch.randperm(
                len(data.train_x), generator=torch.Generator().manual_seed(TRAIN_SUBSET_SEED)
            )[:wanted]
            if wanted
            else None
        )
        self.generator = torch.Generator().manual_seed(spec.seed * 7919 + ctx.rank)
        self.loader_processes = spec.loader_processes_per_worker()
        self._subset_files: ImageFiles | None = None
        self.feed = Feed(
            data,
            augment=spec.recipe.augment,
            device=self.device,
            generator=self.generator,
            seed=spec.seed,
            processes=self.loader_processes,
            synthetic=spec.synthetic_data,
        )
        self.timer = PhaseTimer(ctx.synchronize if self.device.type == "cuda" else None)
        self.autocast = _autocast(spec.recipe.precision, self.device)
        self.step = 0
        self._loss_sum = torch.zeros((), device=self.device)
        # this epoch's sums of |small-batch gradient|² and |big-batch gradient|², and steps
        self._norm_sums = torch.zeros(3, device=self.device)
        self._half_norm2 = torch.zeros((), device=self.device)  # split batch: first half's
        self._warm: list[float] | None = None  # phase totals when warm-up ended
        self._start = 0.0  # perf_counter() when the run's clock started
        self._cpu_start: list[float] = []  # _cpu_sample() when the timed steps began
        self.faults = FaultCounter()  # over the steady steps
        self._graphs = 0  # compiled_graphs() when the clock started

    def _wants_channels_last(self) -> bool:
        """``channels_last``: true, or auto on a model with 2-D convolutions (whose
        kernels it speeds up) and an exchange that takes its parameters as they are."""
        setting = self.spec.channels_last
        if setting == "auto":
            convolutional = any(isinstance(m, nn.Conv2d) for m in self.model.modules())
            return convolutional and self.spec.exchange in CHANNELS_LAST_EXCHANGES
        return bool(setting)

    def _layout(self, x: torch.Tensor) -> torch.Tensor:
        """Images in the model's memory layout."""
        if self.channels_last and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def _cpu_now(self) -> list[float]:
        return _cpu_sample(self.exchange.helper_cpu_s() + self.feed.cpu_s())

    def _noise_meter(self) -> NoiseScaleMeter | None:
        """The run's gradient noise scale meter, where it is measured (see ``noise_scale``):
        batch ``b`` against ``b·N`` across workers, or half a batch against the batch on
        one worker with ``noise_scale=true``."""
        mode, batch, workers = self.spec.noise_scale, self.spec.local_batch, self.ctx.world_size
        if mode is False or not self.exchange.exact or self.exchange.sharded:
            return None
        if workers == 1 and mode == "auto":
            return None
        if self.spec.synthetic_data:
            return None  # one fixed random batch a worker: no noise of the data to measure
        examples = len(self.data.train_x)  # an epoch draws batches without replacement
        if workers == 1:
            return NoiseScaleMeter(batch // 2, batch, population=examples)
        return NoiseScaleMeter(batch, batch * workers, population=examples)

    @property
    def split_batch(self) -> bool:
        """One worker measuring the noise scale runs each batch as two halves."""
        return self.noise is not None and self.ctx.world_size == 1

    def _grad_norm2(self) -> torch.Tensor:
        return squared_norm(p.grad for p in self.model.parameters())

    # -- one update -------------------------------------------------------------------

    def train_step(self, indices: torch.Tensor, stop_vote: bool | None = None) -> bool:
        """One synchronous update on this worker's ``indices``; True if any worker votes stop.

        ``stop_vote`` is None on steps without a vote (see ``GradientExchange.vote_every``).
        """
        timer, step = self.timer, self.step
        beat(step, "data")  # progress for the launcher's watchdog, a few attribute writes
        timer.start()
        x, y = self.feed.take(indices)
        x = self._layout(x)
        timer.lap("data")
        beat(step, "forward")
        self.exchange.zero_grad()
        loss = self._forward_backward(x, y)
        if self.exchange.overlapped:
            timer.move(self.exchange.exposed_comm(timer.last), "backward", "comm")
        beat(step, "comm")
        stop = self.exchange.exchange(stop_vote)
        timer.lap("comm")
        if self.spec.recipe.clip_grad_norm is not None:  # of the averaged gradient
            clip_gradients(self.model.parameters(), self.spec.recipe.clip_grad_norm)
        if self.noise is not None:
            self._note_norms()
        beat(step, "optimizer")
        rate = learning_rate(
            self.spec.recipe.schedule,
            step=self.step,
            epoch=self.step / self.sharding.steps_per_epoch,
            local_batch=self.spec.local_batch,
            world_size=self.ctx.world_size,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        self.optimizer.step()
        timer.lap("optimizer")
        if self.exchange.after_step():  # local SGD averages the replicas here
            timer.lap("comm")
        self._loss_sum += loss
        self.step += 1
        if self.step == self.spec.warmup_steps_excluded:
            self._warm = timer.vector()
            self._cpu_start = self._cpu_now()
            self.faults.restart()
        return stop

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward on the batch; its mean loss, detached. With
        ``split_batch``, as two halves whose gradients add up to the batch's, noting the
        first half's own gradient norm on the way."""
        half = len(x) // 2 if self.split_batch else len(x)
        parts = [(x[:half], y[:half]), (x[half:], y[half:])] if half < len(x) else [(x, y)]
        total = torch.zeros((), device=self.device)
        for index, (part_x, part_y) in enumerate(parts):
            weight = len(part_x) / len(x)
            with self.autocast():
                loss = self.loss_fn(self.net(part_x), part_y).mean()
            if self.spec.recipe.l2:
                loss = loss + l2_penalty(self.model, self.spec.recipe.l2)
            self.timer.lap("forward")
            (loss * weight).backward()
            self.timer.lap("backward")
            if index == 0 and len(parts) > 1:  # the gradients hold weight × the half's
                self._half_norm2 = self._grad_norm2() / weight**2
            total += loss.detach() * weight
        return total

    def _note_norms(self) -> None:
        """Add this step's squared gradient norms at the small and the big batch."""
        if self.split_batch:
            norms: tuple[torch.Tensor, torch.Tensor] | None = (self._half_norm2, self._grad_norm2())
        else:
            norms = self.exchange.gradient_norms()
        if norms is not None:
            self._norm_sums += torch.stack([*norms, torch.ones((), device=self.device)])

    # -- evaluation ---------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Accuracy and mean loss on the whole test set, each rank taking one slice; with
        ``train_metric_examples``, also on that fixed subset of the training set."""
        self.timer.start()
        self.exchange.sync_buffers(self.model)
        self.model.eval()
        sums = self._metric_sums(self.data.test_x, self.data.test_y)
        if self.train_subset is not None:
            sums += self._metric_sums(self._subset_images(), self.data.train_y[self.train_subset])
        self.model.train()
        self.exchange.after_evaluate(self.model)
        totals = all_reduce_sum(sums, self.device)
        self.timer.lap("eval")
        metrics = {"accuracy": totals[0] / totals[2], "loss": totals[1] / totals[2]}
        if self.train_subset is not None:
            metrics.update(train_accuracy=totals[3] / totals[5], train_loss=totals[4] / totals[5])
        return metrics

    def _subset_images(self) -> torch.Tensor | ImageFiles:
        """The training-accuracy subset's images: gathered at each evaluation from memory
        (not kept: up to a million examples), or the same file subset every time (its
        decoding processes are kept for the next evaluation)."""
        assert self.train_subset is not None
        if not isinstance(self.data.train_x, ImageFiles):
            return self.data.train_x[self.train_subset]
        if self._subset_files is None:
            self._subset_files = self.data.train_x[self.train_subset]
        return self._subset_files

    def _metric_sums(self, xs: torch.Tensor | ImageFiles, ys: torch.Tensor) -> list[float]:
        """[correct, loss sum, count] over this rank's slice of ``xs``."""
        shard = eval_shard(len(xs), self.ctx.world_size, self.ctx.rank)
        correct = torch.zeros((), device=self.device)
        loss_sum = torch.zeros((), device=self.device)
        for x_part, y_part in self.feed.batches(xs, ys, shard, self.task.eval_batch):
            beat(self.step, "eval")
            x = x_part.to(self.device, non_blocking=True)
            y = y_part.to(self.device, non_blocking=True)
            with self.autocast():
                out = self.model(self._layout(self.preprocess.eval(x)))
            correct += self.correct_fn(out, y)
            loss_sum += self.loss_fn(out, y).sum()
        return [correct.item(), loss_sum.item(), float(len(shard))]

    # -- the loop -----------------------------------------------------------------------

    def _first_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of the shape every step's forward sees (half a batch when split)."""
        size = self.spec.local_batch // 2 if self.split_batch else self.spec.local_batch
        size = min(size, len(self.data.train_x))
        if self.spec.synthetic_data:
            x, y = self.feed.take(torch.arange(size))
            return self._layout(x), y
        x, y = next(batches(self.data.train_x, self.data.train_y, range(size), size, 0))
        return self._layout(self.preprocess.eval(x.to(self.device))), y.to(self.device)

    def _count_flops(self) -> int:
        """FLOPs of one training step of this worker (forward and backward of its
        batch), counted on a replica of the model on the meta device: no memory (the
        run's peak memory is its own), no collectives (a sharded model's would be)."""
        x, y = (t.to("meta") for t in self._first_batch())
        parts = 2 if self.split_batch else 1
        with forked_rng(self.device), torch.device("meta"):
            shadow = build_model(
                self.spec.recipe.model, self.data.input_shape, self.data.num_outputs
            )
        if self.channels_last:
            shadow.to(memory_format=torch.channels_last)  # type: ignore[call-overload]

        dtype = None if self.spec.recipe.precision == "fp32" else torch.bfloat16

        def forward(model: nn.Module) -> torch.Tensor:
            with SavedForBackward(model) as saved:
                loss = self.loss_fn(model(x), y).mean()
            self.activation_bytes = saved.bytes  # a split batch's halves free in turn
            return loss

        # backward too: activation checkpointing recomputes forward there, as it ran
        with AsOnDevice(self.device.type, dtype):
            return parts * step_flops(shadow, forward, self.device)

    def _compile(self) -> float:
        """``torch.compile`` the model and compile it with one forward and backward, before
        the clock starts; weights, statistics, gradients and random streams are as they
        were. Returns the seconds it took."""
        start = time.perf_counter()
        state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.net = torch.compile(self.net)  # type: ignore[assignment]
        x, y = self._first_batch()
        try:
            with forked_rng(self.device):
                self.exchange.zero_grad()
                with self.autocast():
                    loss = self.loss_fn(self.net(x), y).mean()
                loss.backward()
        except Exception as error:  # inductor's errors are pages long: the first line
            first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise SpecError(
                f"compile=true: torch.compile failed on this machine: {first}; "
                "run with compile=false"
            ) from None
        self.exchange.zero_grad()
        with torch.no_grad():
            self.model.load_state_dict(state)
        return time.perf_counter() - start

    def step_limit(self) -> int:
        limit = math.ceil(self.spec.recipe.max_epochs * self.sharding.steps_per_epoch)
        return min(limit, self.spec.max_steps) if self.spec.max_steps else limit

    def train(self) -> RunStop:
        """Epochs until a stop rule fires; returns what it logged as ``run_stop``."""
        spec, sharding = self.spec, self.sharding
        flops = self._count_flops()
        peak = peak_for(
            self.device, torch.get_num_threads(), spec.recipe.precision, spec.peak_tflops
        )
        compile_s = self._compile() if spec.compile else None
        self.events.log(
            "run_start",
            world_size=self.ctx.world_size,
            local_batch=spec.local_batch,
            global_batch=sharding.global_batch,
            steps_per_epoch=sharding.steps_per_epoch,
            step_limit=self.step_limit(),
            target=spec.recipe.target,
            goal=spec.recipe.goal,
            tokens_per_sample=(
                self.data.input_shape[0] if self.task.loss == "next_token" else None
            ),
            train_examples=len(self.data.train_x),
            test_examples=len(self.data.test_x),
            threads_per_worker=torch.get_num_threads(),
            device=str(self.device),
            backend=self.ctx.backend,
            exchange=self.exchange.name,
            comm_overlapped=self.exchange.overlapped,
            parameters=sum(p.numel() for p in self.model.parameters() if p.requires_grad),
            gradient_bytes=sum(
                p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad
            ),
            flops_per_step=flops,
            peak_flops_per_s=peak.flops_per_s,
            peak_source=peak.source,
            channels_last=self.channels_last,
            compiled=spec.compile,
            compile_s=compile_s,
            cpu_allocator=self.allocator,
        )
        if self.ctx.world_size > 1:
            dist.barrier()
        self._graphs = compiled_graphs()
        self._start = time.perf_counter()
        self._cpu_start = self._cpu_now()
        reason: str | None = None
        best = tta = tta_compute = None
        epoch = 0
        previous = [0.0] * len(ALL_PHASES)
        while reason is None:
            first_step = self.step
            self.faults.resume()
            reason = self._train_epoch(epoch)
            self.faults.pause()
            epoch += 1
            previous = self._log_epoch(epoch, self.step - first_step, previous)
            if reason == "time_budget":
                break  # an evaluation now would end after the budget: it could not count
            if spec.synthetic_data:
                continue  # random images: nothing to evaluate
            if epoch % spec.eval_every_epochs == 0 or reason is not None:
                metrics, elapsed, compute_elapsed = self._evaluate_and_log()
                accuracy = metrics["accuracy"]
                best = accuracy if best is None else max(best, accuracy)
                if tta is None and spec.recipe.reached(accuracy, metrics["loss"]):
                    tta, tta_compute = elapsed, compute_elapsed
                    if spec.stop_at_target:
                        reason = "target_reached"
        elapsed = time.perf_counter() - self._start
        return self._finish(reason or "max_epochs", elapsed, best, tta, tta_compute)

    def _train_epoch(self, epoch: int) -> str | None:
        """Run ``epoch``'s steps; return why training must stop, or None to go on."""
        rows = self.sharding.indices(epoch)
        self.feed.start_epoch(rows, epoch)
        self._whole_peak = max(self._whole_peak, peak_bytes(self.device))
        restart_peak(self.device)  # the steps' own peak, without evaluation's
        try:
            return self._run_steps(rows, epoch)
        finally:
            self._training_peak = max(self._training_peak, peak_bytes(self.device))

    def _run_steps(self, rows: torch.Tensor, epoch: int) -> str | None:
        budget, limit = self.spec.recipe.time_budget_s, self.step_limit()
        last_progress = time.perf_counter()
        for row in rows:
            vote = None
            if budget is not None and self.step % self.exchange.vote_every == 0:
                vote = time.perf_counter() - self._start >= budget
            if self.train_step(row, vote):
                return "time_budget"
            if self.step >= limit:
                return "max_steps" if limit == self.spec.max_steps else "max_epochs"
            if self.ctx.is_main and time.perf_counter() - last_progress > PROGRESS_EVERY_S:
                last_progress = time.perf_counter()
                self.events.log("train_progress", self.step, epoch_num=epoch + 1)
        return None

    def _evaluate_and_log(self) -> tuple[dict[str, float], float, float]:
        """Evaluate; log ``eval_accuracy``; return (metrics, elapsed, elapsed without eval)."""
        metrics = self.evaluate()
        elapsed = time.perf_counter() - self._start
        compute_elapsed = elapsed - self.timer.seconds["eval"]
        self.events.log(
            "eval_accuracy",
            metrics["accuracy"],
            epoch_num=round(self.step / self.sharding.steps_per_epoch, 4),
            step=self.step,
            samples_count=self.step * self.sharding.global_batch,
            eval_loss=metrics["loss"],
            train_accuracy=metrics.get("train_accuracy"),
            train_loss=metrics.get("train_loss"),
            elapsed_s=elapsed,
            compute_elapsed_s=compute_elapsed,
        )
        return metrics, elapsed, compute_elapsed

    def _log_epoch(self, epoch: int, steps: int, previous: list[float]) -> list[float]:
        """Gather this epoch's per-rank phase seconds and mean train loss; rank 0 logs them."""
        totals = self.timer.vector()
        mine = [now - before for now, before in zip(totals, previous, strict=True)]
        norms = self._norm_sums.tolist()
        ranks = all_gather_named(
            {"phases": mine, "norms": norms, "loss": self._loss_sum.item(), "steps": steps},
            self.device,
        )
        self._loss_sum.zero_()
        self._norm_sums.zero_()
        losses = sum(rank["loss"] for rank in ranks)
        noise = self._noise_of_epoch([rank["norms"] for rank in ranks])
        self.events.log(
            "epoch_stop",
            epoch,
            step=self.step,
            train_loss=losses / max(1.0, sum(rank["steps"] for rank in ranks)),
            phases=[dict(zip(ALL_PHASES, rank["phases"], strict=True)) for rank in ranks],
            **({"noise_scale": noise} if noise else {}),
        )
        return totals

    def _noise_of_epoch(self, sums: list[list[float]]) -> dict[str, Any] | None:
        """This epoch's noise scale from every rank's (small sum, big sum, steps), folded
        into the run's meter too. Each rank's average gradient is the same: rank 0's."""
        if self.noise is None:
            return None
        epoch = NoiseScaleMeter(self.noise.small_batch, self.noise.big_batch, self.noise.population)
        epoch.add_sums(
            sum(row[0] for row in sums),
            round(sum(row[2] for row in sums)),
            sums[0][1],
            round(sums[0][2]),
        )
        self.noise.add_sums(epoch.small_sum, epoch.small_count, epoch.big_sum, epoch.big_count)
        estimate = epoch.estimate()
        return estimate.as_dict() if estimate else None

    def _noise_of_run(self) -> dict[str, Any] | None:
        """The noise scale over every step of the run, with the batch sizes it compared."""
        if self.noise is None or (estimate := self.noise.estimate()) is None:
            return None
        return {
            **estimate.as_dict(),
            "small_batch": self.noise.small_batch,
            "big_batch": self.noise.big_batch,
        }

    def _finish(
        self,
        reason: str,
        elapsed: float,
        best: float | None,
        tta: float | None,
        tta_compute: float | None,
    ) -> RunStop:
        totals = self.timer.vector()
        warm = self._warm if self._warm is not None else [0.0] * len(totals)
        excluded = self.spec.warmup_steps_excluded if self._warm is not None else 0
        steady = [t - w for t, w in zip(totals, warm, strict=True)]
        used = [end - begin for end, begin in zip(self._cpu_now(), self._cpu_start, strict=True)]
        mine = [*used, machine_id(), float(os.cpu_count() or 0), torch.get_num_threads()]
        sent = float(self.exchange.bytes_sent)
        memory = float(max(peak_memory_bytes(self.device), self._whole_peak))
        faults = self.faults.count / max(1, self.step - excluded)
        ranks = all_gather_named(
            {
                "phases": totals,
                "steady": steady,
                "cpu": mine,
                "faults": faults,
                "memory": memory,
                "sent": sent,
            },
            self.device,
        )
        samples = [dict(zip(CONTENTION_FIELDS, rank["cpu"], strict=True)) for rank in ranks]
        status = "success" if tta is not None else "target_not_reached"
        if self.spec.synthetic_data:
            status = "throughput"  # random images: there is no accuracy to reach
        stop = RunStop(
            status=status,
            stop_reason=reason,
            steps=self.step,
            epochs=self.step / self.sharding.steps_per_epoch,
            samples=self.step * self.sharding.global_batch,
            elapsed_s=elapsed,
            eval_s=self.timer.seconds["eval"],
            time_to_accuracy_s=tta,
            time_to_accuracy_compute_s=tta_compute,
            best_metric=best,
            target=self.spec.recipe.target,
            warmup_steps_excluded=excluded,
            steady_steps=self.step - excluded,
            phases=[dict(zip(ALL_PHASES, rank["phases"], strict=True)) for rank in ranks],
            phases_steady=[dict(zip(ALL_PHASES, rank["steady"], strict=True)) for rank in ranks],
            bytes_sent=[rank["sent"] for rank in ranks],  # per rank, to collectives
            bytes_per_step=max(rank["sent"] for rank in ranks) / max(1, self.step),
            peak_memory_bytes=[rank["memory"] for rank in ranks],
            page_faults_per_step=[rank["faults"] for rank in ranks],  # in steady steps
            noise_scale=self._noise_of_run(),
            # graphs torch.compile made inside the clock (rank 0's): their compile time is
            # in the steps it measured; 0 when everything compiled before
            recompiles_in_clock=compiled_graphs() - self._graphs if self.spec.compile else None,
            cpu_samples=[
                {k: None if math.isnan(v) else v for k, v in sample.items()} for sample in samples
            ],
            **self._memory(),
        )
        self.events.log("run_stop", stop.status, **stop.metadata())
        return stop

    def _memory(self) -> dict[str, Any]:
        """The model's memory accounting (whole-model bytes, see perfmodel.memory) and
        what each rank held: its resident memory at the start, its parameters' and its
        optimizer state's bytes."""
        params = list(self.model.parameters())
        whole = float(sum(p.numel() * p.element_size() for p in params))
        gradients = float(sum(p.numel() * p.element_size() for p in params if p.requires_grad))
        units = [
            float(sum(p.numel() * p.element_size() for p in unit.parameters()))
            for unit in shard_units(self.model)
        ]
        ranks = all_gather_named(
            {
                "start": self._resident_start,
                "training_peak": self._training_peak,
                "parameters": local_bytes(params),
                "optimizer_state": local_bytes(optimizer_state(self.optimizer)),
            },
            self.device,
        )
        slots = state_slots(self.optimizer)
        return {
            "memory_account": {
                "parameters": whole,
                "gradients": gradients,
                "optimizer_state": slots * whole,
                # foreach Adam and AdamW take the second moment's square root: one
                # parameter-sized tensor a parameter, for the step's length
                "optimizer_temporaries": whole if slots >= 2 else 0.0,
                "activations": float(self.activation_bytes),
                "largest_unit": max(units, default=0.0),
                "root": whole - sum(units),
            },
            "memory_start_bytes": [rank["start"] for rank in ranks],
            "training_peak_bytes": [rank["training_peak"] for rank in ranks],  # steps only
            "parameter_bytes_local": [rank["parameters"] for rank in ranks],
            "optimizer_state_bytes": [rank["optimizer_state"] for rank in ranks],
        }
