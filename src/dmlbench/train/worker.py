"""The function each worker process runs (started by torch's elastic launcher)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from dmlbench.listeners import NODE_ADDRESS_ENV
from dmlbench.resolve import deviations
from dmlbench.results.compliance import Submission, log_cache_clear, platform
from dmlbench.results.events import EVENTS_FILE, EventLog
from dmlbench.spec import RunSpec
from dmlbench.tasks import get_task, import_plugins
from dmlbench.train.agreement import agree
from dmlbench.train.context import DistContext
from dmlbench.train.hardware import device_name
from dmlbench.train.trainer import Trainer

if TYPE_CHECKING:
    from dmlbench.data import Dataset
    from dmlbench.tasks.base import TaskDefinition

MODEL_FILE = "model.pt"
AGREEMENT_TIMEOUT_S = 120.0
# A worker whose peer died sees a broken connection in its next collective. It waits this
# long before raising, so that the launcher, which reports the first failure it notices,
# reports the peer's own failure (the cause) rather than this one (a symptom).
PEER_LOST_GRACE_S = 3.0
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Read error", "Broken pipe")


def _lost_a_peer(error: BaseException) -> bool:
    """torch's own DistError, or gloo's broken connection: gloo raises a plain RuntimeError
    (torch 2.13), so its message is the only sign."""
    return isinstance(error, torch.distributed.DistError) or any(
        marker in str(error) for marker in _PEER_LOST
    )


def _submission(spec: RunSpec, task: TaskDefinition, data: Dataset, trainer: Trainer) -> Submission:
    """What the run's log says of it for MLPerf's compliance checker."""
    return Submission(
        benchmark=task.mlperf_benchmark or task.name,
        platform=platform(trainer.ctx.nodes, device_name(trainer.device)),
        division="open" if deviations(spec) else "closed",
        seed=spec.seed,
        global_batch=trainer.sharding.global_batch,
        optimizer=spec.recipe.optimizer.name,
        train_samples=len(data.train_x),
        eval_samples=len(data.test_x),
    )


@record
def run_worker(spec_json: str, run_dir: str) -> None:
    """Load data, train, and (rank 0) log events and save weights; always leave the group."""
    spec = RunSpec.model_validate(json.loads(spec_json))
    import_plugins(spec.plugins)
    ctx = DistContext.initialize(spec)
    events = EventLog(Path(run_dir) / EVENTS_FILE if ctx.is_main else None)
    try:
        hosts = None
        if ctx.nodes > 1:  # refused here, before any data is read, when nodes disagree
            store = torch.distributed.distributed_c10d._get_default_store()
            address = os.environ.get(NODE_ADDRESS_ENV, "")
            views = agree(json.loads(spec_json), store, address, AGREEMENT_TIMEOUT_S)
            hosts = [view["address"] for view in views]
        task = get_task(spec.task)
        log_cache_clear(events)
        events.log(
            "init_start",
            rank_count=ctx.world_size,
            nodes=ctx.nodes,
            nproc_per_node=ctx.world_size // ctx.nodes,
            hosts=hosts,
        )
        data = task.synthetic() if spec.synthetic_data else task.read(spec.data_dir)
        if not spec.partial_data:  # the data may have changed since the launcher looked
            task.check_examples(len(data.train_x), len(data.test_x), spec.data_dir)
        if spec.validation_split:
            data = data.hold_out(spec.validation_split)
        trainer = Trainer(spec, task, data, ctx, events)
        if ctx.is_main:  # the only rank that logs
            _submission(spec, task, data, trainer).log(events)
        events.log("init_stop")
        try:
            trainer.train()
            weights = trainer.exchange.full_state(trainer.model) if spec.save_model else None
        finally:
            trainer.exchange.close()
            trainer.feed.close()
        if weights is not None and ctx.is_main:
            torch.save(weights, Path(run_dir) / MODEL_FILE)
    except Exception as error:
        if _lost_a_peer(error):
            time.sleep(PEER_LOST_GRACE_S)
        raise
    finally:
        events.close()
        ctx.destroy()
