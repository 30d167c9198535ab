"""Trainer: one worker's synchronous data-parallel SGD with phase timing and stop rules.

``train()`` runs epochs until a stop rule fires (target reached, time budget spent,
``max_epochs`` or ``max_steps``), evaluating on the whole test set every
``eval_every_epochs``. ``train_step()`` is one update, with each phase timed.
Only rank 0 writes events; every number it writes about other ranks was gathered
from them.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dmlbench.comm import load_modules, make_exchange
from dmlbench.comm.collectives import all_gather_named
from dmlbench.data import Dataset, EpochSharding
from dmlbench.data.dataset import Shapes
from dmlbench.data.feed import Feed
from dmlbench.data.images import batches
from dmlbench.errors import SpecError
from dmlbench.heartbeat import beat
from dmlbench.models import build_model
from dmlbench.models.flops import forked_rng
from dmlbench.models.losses import LOSSES
from dmlbench.optim import build_optimizer, l2_penalty, learning_rate
from dmlbench.optim.build import clip_gradients, parameter_groups
from dmlbench.results.events import EventLog
from dmlbench.results.records import RunStop
from dmlbench.results.schema import ALL_PHASES
from dmlbench.spec import RunSpec
from dmlbench.spec.run import CHANNELS_LAST_EXCHANGES
from dmlbench.tasks import TaskDefinition
from dmlbench.train.allocator import tune_allocator
from dmlbench.train.context import DistContext
from dmlbench.train.evaluation import Evaluator
from dmlbench.train.hardware import autocast_for, peak_for, runtime_for, to_channels_last
from dmlbench.train.measures import RunMeasures, StepCount, count_step_flops, cpu_samples
from dmlbench.train.noise_probe import NoiseProbe
from dmlbench.train.progress import ProgressMeter
from dmlbench.train.timers import PhaseTimer


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
        load_modules(spec.exchange)  # their code is not the run's memory
        self.allocator = tune_allocator(spec.cpu_allocator)  # the trainer owns its process
        self.measures = RunMeasures(self.device)  # before the model exists
        self.counted = StepCount()  # one step on the meta device: FLOPs, bytes kept
        torch.manual_seed(spec.seed)  # same initial weights on every rank
        self.model = build_model(spec.recipe.model, data.input_shape, data.num_outputs)
        self.model.to(self.device)
        self.channels_last = self._wants_channels_last()
        if self.channels_last:
            to_channels_last(self.model)
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
        self.noise = NoiseProbe.for_run(
            spec, self.exchange, len(data.train_x), ctx.world_size, self.device
        )
        self.net = self.exchange.prepare(self.model)
        self.optimizer = self.exchange.wrap_optimizer(
            lambda groups: build_optimizer(spec.recipe.optimizer, groups),
            parameter_groups(spec.recipe.optimizer, self.model),
        )
        self.loss_fn, _ = LOSSES[task.loss]
        self.preprocess = data.preprocess(spec.recipe.augment)
        self.generator = torch.Generator().manual_seed(spec.seed * 7919 + ctx.rank)
        self.loader_processes = spec.loader_processes_per_worker()
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
        self.autocast = autocast_for(spec.recipe.precision, self.device)
        examples = spec.train_metric_examples
        self.evaluator = Evaluator(self._eval_forward, task, data, self.feed, ctx, examples)
        self.step = 0
        self._loss_sum = torch.zeros((), device=self.device)
        self.measures.helpers_s = lambda: self.exchange.helper_cpu_s() + self.feed.cpu_s()

    def _wants_channels_last(self) -> bool:
        """``channels_last``: true, or auto on a model with 2-D convolutions (whose
        kernels it speeds up) and an exchange that takes its parameters as they are."""
        setting = self.spec.channels_last
        if setting == "auto":
            convolutional = any(isinstance(m, nn.Conv2d) for m in self.model.modules())
            return convolutional and self.spec.exchange in CHANNELS_LAST_EXCHANGES
        return bool(setting)

    def _eval_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The model's output on a batch of evaluation examples as read."""
        with self.autocast():
            return self.model(self._layout(self.preprocess.eval(x)))

    def _layout(self, x: torch.Tensor) -> torch.Tensor:
        """Images in the model's memory layout."""
        images = self.channels_last and x.dim() == 4
        return x.contiguous(memory_format=torch.channels_last) if images else x

    @property
    def split_batch(self) -> bool:
        """Each batch runs as two halves: the noise probe's, on one worker."""
        return self.noise is not None and self.noise.split

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
        for phase, waited in self.exchange.exposed_comm(timer.last).items():
            timer.move(waited, phase, "comm")
        beat(step, "comm")
        stop = self.exchange.exchange(stop_vote)
        timer.lap("comm")
        if self.spec.recipe.clip_grad_norm is not None:  # of the averaged gradient
            clip_gradients(self.model.parameters(), self.spec.recipe.clip_grad_norm)
        if self.noise is not None:
            self.noise.note_step(self.model, self.exchange)
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
            self.measures.warmed_up(timer.vector())
        return stop

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward on the batch; its mean loss, detached. Where the noise
        probe splits it, two halves whose gradients add up to the batch's, noting the
        first half's norm."""
        half = len(x) // 2 if self.split_batch else len(x)
        parts = [(x[:half], y[:half]), (x[half:], y[half:])] if half < len(x) else [(x, y)]
        total = torch.zeros((), device=self.device)
        for index, (part_x, part_y) in enumerate(parts):
            weight = len(part_x) / len(x)
            self.exchange.phase = "forward"
            with self.autocast():
                loss = self.loss_fn(self.net(part_x), part_y).mean()
            if self.spec.recipe.l2:
                loss = loss + l2_penalty(self.model, self.spec.recipe.l2)
            self.timer.lap("forward")
            self.exchange.phase = "backward"
            (loss * weight).backward()
            self.timer.lap("backward")
            if self.noise is not None and index == 0 and len(parts) > 1:
                self.noise.note_half(self.model, weight)
            total += loss.detach() * weight
        return total

    # -- evaluation ---------------------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Accuracy and mean loss on the whole test set (see :class:`Evaluator`)."""
        self.timer.start()
        self.exchange.sync_buffers(self.model)
        self.model.eval()
        sums = self.evaluator.sums(self.step)
        self.model.train()
        self.exchange.after_evaluate(self.model)
        metrics = self.evaluator.metrics(sums)
        self.timer.lap("eval")
        return metrics

    # -- the loop -----------------------------------------------------------------------

    def _first_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of the shape every step's forward sees (half a batch when split)."""
        size = self.spec.local_batch // 2 if self.split_batch else self.spec.local_batch
        size = min(size, len(self.data.train_x))
        if self.spec.synthetic_data:
            x, y = self.feed.take(torch.arange(size))
            return self._layout(x), y
        images = self.data.train_x
        assert not isinstance(images, Shapes)  # synthetic data took the branch above
        x, y = next(batches(images, self.data.train_y, range(size), size, 0))
        return self._layout(self.preprocess.eval(x.to(self.device))), y.to(self.device)

    def _count_flops(self) -> int:
        """FLOPs of one training step of this worker (see :func:`count_step_flops`)."""
        x, y = self._first_batch()

        def replica() -> nn.Module:
            model = build_model(
                self.spec.recipe.model, self.data.input_shape, self.data.num_outputs
            )
            return to_channels_last(model) if self.channels_last else model

        self.counted = count_step_flops(
            replica, x, y, self.loss_fn, self.device, self.spec.recipe.precision
        )
        return self.counted.flops * (2 if self.split_batch else 1)

    def _compile(self) -> float:
        """``torch.compile`` the model and compile it with one forward and backward, before
        the clock starts; weights, statistics, gradients and random streams are as they
        were. Returns the seconds it took."""
        start = time.perf_counter()
        state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        mode = None if self.spec.compile is True else str(self.spec.compile)
        self.net = torch.compile(self.net, mode=mode)  # type: ignore[assignment]
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
                f"compile={json.dumps(self.spec.compile)}: torch.compile failed on this "
                f"machine: {first}; run with compile=false"
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
        tokens = self.data.input_shape[0] if self.task.loss == "next_token" else None
        self.progress = ProgressMeter(self.device, sharding.global_batch, tokens, flops, peak)
        self.events.log(
            "run_start",
            world_size=self.ctx.world_size,
            local_batch=spec.local_batch,
            global_batch=sharding.global_batch,
            steps_per_epoch=sharding.steps_per_epoch,
            step_limit=self.step_limit(),
            target=spec.recipe.target,
            goal=spec.recipe.goal,
            tokens_per_sample=tokens,
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
        self.measures.start_clock()
        self.progress.restart(self.step)
        reason: str | None = None
        best = tta = tta_compute = None
        epoch = 0
        previous = [0.0] * len(ALL_PHASES)
        while reason is None:
            first_step = self.step
            self.events.log("epoch_start", epoch_num=epoch + 1)
            reason = self._train_epoch(epoch)
            epoch += 1
            previous = self._log_epoch(epoch, self.step - first_step, previous)
            if reason == "time_budget":
                break  # an evaluation now would end after the budget: it could not count
            if spec.synthetic_data:
                continue  # random images: nothing to evaluate
            if epoch % spec.eval_every_epochs == 0 or reason is not None:
                metrics, elapsed, compute_elapsed = self._evaluate_and_log()
                self.progress.restart(self.step)
                accuracy = metrics["accuracy"]
                best = accuracy if best is None else max(best, accuracy)
                if tta is None and spec.recipe.reached(accuracy, metrics["loss"]):
                    tta, tta_compute = elapsed, compute_elapsed
                    if spec.stop_at_target:
                        reason = "target_reached"
        elapsed = self.measures.elapsed()
        return self._finish(reason or "max_epochs", elapsed, best, tta, tta_compute)

    def _train_epoch(self, epoch: int) -> str | None:
        """Run ``epoch``'s steps; return why training must stop, or None to go on."""
        rows = self.sharding.indices(epoch)
        with self.measures.steps():
            self.feed.start_epoch(rows, epoch)
            return self._run_steps(rows, epoch)

    def _run_steps(self, rows: torch.Tensor, epoch: int) -> str | None:
        budget, limit = self.spec.recipe.time_budget_s, self.step_limit()
        for done, row in enumerate(rows, 1):
            vote = None
            if budget is not None and self.step % self.exchange.vote_every == 0:
                vote = self.measures.elapsed() >= budget
            if self.train_step(row, vote):
                return "time_budget"
            if self.step >= limit:
                return "max_steps" if limit == self.spec.max_steps else "max_epochs"
            if self.ctx.is_main and self.progress.due():
                word = self.progress.word(self.step, self._loss_sum, done)
                self.events.log("train_progress", self.step, epoch_num=epoch + 1, **word)
        return None

    def _evaluate_and_log(self) -> tuple[dict[str, float], float, float]:
        """Evaluate; log ``eval_accuracy``; return (metrics, elapsed, elapsed without eval)."""
        epoch_num = round(self.step / self.sharding.steps_per_epoch, 4)
        self.events.log("eval_start", epoch_num=epoch_num)
        metrics = self.evaluate()
        self.events.log("eval_stop", epoch_num=epoch_num)
        elapsed = self.measures.elapsed()
        compute_elapsed = elapsed - self.timer.seconds["eval"]
        self.events.log(
            "eval_accuracy",
            metrics["accuracy"],
            epoch_num=epoch_num,
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
        norms = self.noise.take_epoch() if self.noise else [0.0, 0.0, 0.0]
        ranks = all_gather_named(
            {"phases": mine, "norms": norms, "loss": self._loss_sum.item(), "steps": steps},
            self.device,
        )
        self._loss_sum.zero_()
        losses = sum(rank["loss"] for rank in ranks)
        noise = self.noise.meter.add_epoch([r["norms"] for r in ranks]) if self.noise else None
        self.events.log(
            "epoch_stop",
            epoch,
            epoch_num=epoch,
            step=self.step,
            train_loss=losses / max(1.0, sum(rank["steps"] for rank in ranks)),
            phases=[dict(zip(ALL_PHASES, rank["phases"], strict=True)) for rank in ranks],
            **({"noise_scale": noise.as_dict()} if noise else {}),
        )
        return totals

    def _finish(
        self,
        reason: str,
        elapsed: float,
        best: float | None,
        tta: float | None,
        tta_compute: float | None,
    ) -> RunStop:
        excluded = self.spec.warmup_steps_excluded if self.measures.warm is not None else 0
        mine = self.measures.of_this_rank(self.timer.vector(), self.step, excluded)
        ranks = all_gather_named({**mine, "sent": self.exchange.sent()}, self.device)
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
            noise_scale=self.noise.meter.summary() if self.noise else None,
            # graphs torch.compile made inside the clock (rank 0's): their compile time is
            # in the steps it measured; 0 when everything compiled before
            recompiles_in_clock=self.measures.recompiles() if self.spec.compile else None,
            cpu_samples=cpu_samples([rank["cpu"] for rank in ranks]),
            **self._memory(),
        )
        self.events.log("run_stop", stop.status, **stop.metadata())
        return stop

    def _memory(self) -> dict[str, Any]:
        """The model's memory accounting and what each rank held."""
        mine = self.measures.memory_of_this_rank(self.model, self.optimizer)
        ranks = all_gather_named(mine, self.device)
        runtime, records = runtime_for(self.spec.exchange, self.device)
        return {
            "memory_account": self.counted.memory_account(
                self.model, self.optimizer, runtime, records
            ),
            "memory_start_bytes": [rank["start"] for rank in ranks],
            "training_peak_bytes": [rank["training_peak"] for rank in ranks],  # steps only
            "parameter_bytes_local": [rank["parameters"] for rank in ranks],
            "optimizer_state_bytes": [rank["optimizer_state"] for rank in ranks],
        }
