"""MLPerf runs (:mod:`dmlbench.results.mlperf`) as the store keeps an external run: its
spec, environment and summary, and its evaluation curve."""

from __future__ import annotations

import math
from typing import Any

from dmlbench.qualities import imported_task
from dmlbench.results.mlperf import MlperfRun
from dmlbench.results.records import Evaluation, RunSummary
from dmlbench.results.store import ResultsStore


def as_record(run: MlperfRun) -> dict[str, Any]:
    """The store's fields of an external run (see ``ResultsStore.add_external``)."""
    local = run.global_batch // run.workers if run.global_batch >= run.workers else 1
    spec = {
        "task": imported_task(run.benchmark),
        "workers": run.workers,
        "nodes": run.devices.nodes,
        "nproc_per_node": run.devices.per_node,
        "seed": run.seed,
        "exchange": "external",
        "recipe": {
            "local_batch": local,
            "target": run.target,
            "gradient_accumulation": run.gradient_accumulation,
        },
        # the submission, not the run: its runs are repeats of one experiment to compare
        "external": {
            k: run.origin[k] for k in ("source", "round", "submitter", "division", "system")
        },
    }
    environment = {
        "host": run.origin["system"],
        "cpu_model": run.system.get("host_processor_model_name"),
        "cores": None,
        "gpus": [run.devices.model] * run.devices.per_node if run.devices.accelerators else [],
        "torch": None,
        "git_revision": run.origin.get("commit"),
        "framework": run.system.get("framework"),
        "interconnect": run.system.get("accelerator_interconnect"),
        "networking": run.system.get("host_networking"),
        "platform": run.origin.get("platform") or run.origin["system"],
    }
    best = max((e.metric for e in run.evals), default=None)
    summary = {
        "finished": True,
        "status": run.status,
        "stop_reason": "target_reached" if run.status == "success" else "max_epochs",
        "world_size": run.workers,
        "nodes": run.devices.nodes,
        "nproc_per_node": run.devices.per_node,
        "local_batch": local,
        "global_batch": run.global_batch,
        "target": run.target,
        "train_examples": run.dataset_samples,
        "elapsed_s": run.time_to_train_s,
        "eval_s": run.eval_s,
        "train_s": run.time_to_train_s - run.eval_s,
        "init_s": run.init_s,
        "time_to_accuracy_s": run.time_to_train_s if run.status == "success" else None,
        "best_metric": best,
        "epochs": run.epochs,
        "samples": run.samples,
        "throughput": run.throughput,
        # an update's time, as a run of this machine's reports it: "step ms" in compare
        "step_time_s": run.global_batch / run.throughput if run.throughput else None,
        "samples_per_s_per_worker": run.throughput / run.workers if run.throughput else None,
        "device": run.devices.model,
        "mlperf": {
            "status": run.mlperf_status,
            "time_to_train_s": run.time_to_train_s,
            "epochs_to_converge": run.epochs,
            "samples_to_converge": run.samples,
            "gradient_accumulation": run.gradient_accumulation,
            "startup_s": run.startup_s,
        },
    }
    return {"spec": spec, "environment": environment, "summary": RunSummary.model_validate(summary)}


def evaluations(run: MlperfRun) -> list[Evaluation]:
    """The evaluation curve as the store keeps it: the step and samples where the log
    says them (epochs × the dataset); 0 where it does not (BERT v0.7 logs neither)."""
    found = []
    per_epoch = math.ceil(run.dataset_samples / run.global_batch) if run.dataset_samples else 0
    for e in run.evals:
        known = per_epoch and not math.isnan(e.epoch)
        found.append(
            Evaluation(
                epoch=e.epoch,
                step=int(e.epoch * per_epoch) if known else 0,
                samples=int(e.epoch * (run.dataset_samples or 0)) if known else 0,
                elapsed_s=e.elapsed_s,
                compute_elapsed_s=e.elapsed_s,
                metric=e.metric,
                loss=math.nan,  # MLPerf logs no evaluation loss
            )
        )
    return found


def store_run(store: ResultsStore, run: MlperfRun) -> bool:
    """Store ``run``, whole or not at all; ``False`` when the store has it already."""
    fields = as_record(run)
    return store.add_external(
        run.run_id, **fields, evals=evaluations(run), origin=run.origin, started=run.started_at
    )
