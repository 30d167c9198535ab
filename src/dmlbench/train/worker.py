"""The function each worker process runs (started by torch's elastic launcher)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from dmlbench.results.events import EVENTS_FILE, EventLog
from dmlbench.spec import RunSpec
from dmlbench.tasks import get_task, import_plugins
from dmlbench.train.context import DistContext
from dmlbench.train.trainer import Trainer

MODEL_FILE = "model.pt"


@record
def run_worker(spec_json: str, run_dir: str) -> None:
    """Load data, train, and (rank 0) log events and save weights; always leave the group."""
    spec = RunSpec.model_validate(json.loads(spec_json))
    import_plugins(spec.plugins)
    ctx = DistContext.initialize(spec)
    events = EventLog(Path(run_dir) / EVENTS_FILE if ctx.is_main else None)
    try:
        task = get_task(spec.task)
        events.log("init_start", rank_count=ctx.world_size)
        data = task.load(spec.data_dir)
        trainer = Trainer(spec, task, data, ctx, events)
        events.log("init_stop")
        trainer.train()
        if spec.save_model and ctx.is_main:
            torch.save(trainer.model.state_dict(), Path(run_dir) / MODEL_FILE)
    finally:
        events.close()
        ctx.destroy()
