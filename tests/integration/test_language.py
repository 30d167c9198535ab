"""kjv-gpt end to end on the real King James Bible (Debian's bible-kjv): tokenised once,
trained on two workers, judged by its validation loss."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from helpers import inside

from dmlbench.data import text
from dmlbench.launch import run_benchmark
from dmlbench.perfmodel.memory import MemoryAccount
from dmlbench.resolve import resolve_spec
from dmlbench.results import ResultsStore
from dmlbench.tasks.language import CORPUS, VOCAB
from dmlbench.train import allocator

pytestmark = pytest.mark.skipif(
    shutil.which("bible", path="/usr/bin:/usr/games") is None,
    reason="no bible-kjv: apt-get install bible-kjv (make test does)",
)


@pytest.fixture(scope="module")
def kjv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder with the corpus tokenised (once for the module)."""
    folder = tmp_path_factory.mktemp("kjv")
    text.prepare(folder, CORPUS, VOCAB, False)
    return folder


@pytest.mark.multiprocess
def test_two_workers_train_the_language_model_to_a_loss_target(
    store: ResultsStore, kjv: Path
) -> None:
    quick = [f"data_dir={kjv}", "max_steps=3", "warmup_steps_excluded=1"]
    spec = resolve_spec(
        "kjv-gpt", workers=2, overrides=[*quick, "recipe.model.options.depth=1", "recipe.target=50"]
    )
    outcome = run_benchmark(spec, store, echo=False)
    run = store.runs(outcome.run_id)[0]
    assert outcome.status == "success" and run.goal == "loss"  # any model's loss is < 50
    assert run.time_to_accuracy_s is not None and run.division == "open"
    evaluation = run.evals[-1]
    assert 0 < evaluation.loss < 50 and 0 <= evaluation.metric <= 1
    summary = inside("results", outcome.run_id, "--store", str(store.root)).stdout
    assert "time to loss 50" in summary and "best loss" in summary
    assert (run.summary.flops_per_step or 0) > 0  # attention included (unit tests)


def _weights(store: ResultsStore, kjv: Path, exchange: str, *extra: str) -> dict:
    overrides = [
        f"data_dir={kjv}",
        "max_steps=3",
        "warmup_steps_excluded=1",
        "save_model=true",
        "recipe.model.options.depth=2",
        "recipe.model.options.width=64",
        *extra,
    ]
    spec = resolve_spec("kjv-gpt", workers=2, exchange=exchange, overrides=overrides)
    outcome = run_benchmark(spec, store, echo=False)
    assert outcome.status == "target_not_reached", store.runs(outcome.run_id)[0].error
    return torch.load(Path(outcome.run_dir) / "model.pt")


@pytest.mark.multiprocess
def test_sharded_strategies_reach_ddps_weights(store: ResultsStore, kjv: Path) -> None:
    """ZeRO-1 and FSDP (full sharding; parameters kept from forward to backward, with
    activation checkpointing) compute synchronous SGD's update: after three AdamW steps
    with clipping their weights are DDP's."""
    reference = _weights(store, kjv, "ddp")
    for exchange, extra in [
        ("zero1", ()),
        ("fsdp", ()),
        (
            "fsdp",
            (
                "exchange_options={reshard_after_forward: false}",
                "recipe.model.options.checkpoint_activations=true",
            ),
        ),
    ]:
        weights = _weights(store, kjv, exchange, *extra)
        assert weights.keys() == reference.keys()
        for name, value in reference.items():
            torch.testing.assert_close(weights[name], value, rtol=0, atol=1e-6, msg=exchange)
    # what each worker hands to collectives a step, P the gradients' bytes: DDP's
    # all-reduce P; ZeRO-1 adds the parameters' broadcast; FSDP gathers its shard P/2
    # before forward (and, resharded, again before backward), then reduce-scatters P
    sent = {
        (run.exchange, str(run.spec.get("exchange_options"))): run.summary.bytes_per_step
        for run in store.runs()
    }
    ddp = sent["ddp", "{}"]
    assert ddp is not None and ddp > 0 and sent["zero1", "{}"] > ddp
    full = sent["fsdp", "{}"]
    kept = sent["fsdp", "{'reshard_after_forward': False}"]
    assert kept == pytest.approx(1.5 * ddp, rel=0.01)  # padding to a shard: a few bytes
    assert kept < full <= 2.02 * ddp
    # on a CPU FSDP's collectives block the worker: their time is comm, taken out of the
    # phase it ran in (never more than that phase took)
    for run in store.runs():
        if run.exchange == "fsdp":
            assert (run.summary.phase_shares or {})["comm"]["mean"] > 0.01, run.run_id
            for rank in run.summary.phases_steady or []:
                assert min(rank.values()) >= 0, rank
    # ZeRO's largest shard is the prediction's: torch partitions greedily by size, and
    # the tied embedding alone outweighs every block here (not the even 1/N)
    zero = next(run for run in store.runs() if run.exchange == "zero1")
    account = MemoryAccount.from_summary(zero.summary.memory_account or {})
    held = max(zero.summary.optimizer_state_bytes or [0])
    assert account.zero_share(2) > 0.6
    assert held == pytest.approx(account.optimizer_state * account.zero_share(2), rel=0.01)


@pytest.mark.multiprocess
def test_advise_says_which_strategy_fits_a_memory_budget(store: ResultsStore) -> None:
    """Predicted memory decides at a worker count no run measured; where runs measured
    a strategy, the larger of predicted and measured does."""
    quick = ["synthetic_data=true", "max_steps=4", "warmup_steps_excluded=1"]
    # measured as docs/memory.md says, with glibc returning what it frees (after this
    # module's runs on jemalloc: the launcher restarts its fork server without it)
    returning = [*quick, "cpu_allocator=returning"]
    spec = resolve_spec("kjv-gpt", workers=1, exchange="ddp", overrides=returning)
    outcome = run_benchmark(spec, store, echo=False)
    assert store.runs(outcome.run_id)[0].summary.cpu_allocator == allocator.RETURNING

    def advise(budget: str, workers: str = "4") -> dict:
        command = ["advise", "kjv-gpt", "--memory-per-worker", budget, "--workers", workers]
        return json.loads(inside(*command, "--json", "--store", str(store.root)).stdout)

    alone = advise("1TiB", "1")["strategies"]
    measured = alone[0]["measured_bytes"]  # ddp at 1 worker: the run above
    assert measured > 0 and [s["measured_bytes"] for s in alone[1:]] == [None] * 3
    needs = math.ceil(max(measured, alone[0]["predicted_bytes"]))
    assert advise(str(needs), "1")["strategies"][0]["fits"]
    assert not advise(str(needs - 1), "1")["strategies"][0]["fits"]

    roomy = advise("1TiB")
    assert roomy["choice"] == "ddp" and all(s["fits"] for s in roomy["strategies"])
    assert all(s["measured_bytes"] is None for s in roomy["strategies"])  # none at 4
    sizes = {s["strategy"]: s["predicted_bytes"] for s in roomy["strategies"]}
    assert sizes["fsdp"] < sizes["zero1"] < sizes["ddp"]  # sharding saves memory
    tight = advise(str(int(sizes["fsdp"]) + 1))
    assert tight["choice"] == "fsdp" and not tight["strategies"][0]["fits"]
    assert advise("1")["choice"] is None
    printed = inside(
        "advise",
        "kjv-gpt",
        "--memory-per-worker",
        str(int(sizes["fsdp"]) + 1),
        "--workers",
        "4",
        "--store",
        str(store.root),
    ).stdout
    assert "shard with fsdp (--exchange fsdp)" in printed.replace("\n", " ")
    bad = inside(
        "advise", "kjv-gpt", "--memory-per-worker", "lots", "--store", str(store.root), check=False
    )
    assert bad.returncode == 2 and "say a size like 16GiB" in bad.stderr
    # the batch advice's options are refused, not dropped without a word
    mixed = ("--memory-per-worker", "16GiB", "--network", "1gbit", "--epochs", "3")
    refused = inside("advise", "kjv-gpt", *mixed, "--store", str(store.root), check=False)
    assert refused.returncode == 2 and "drop --network, --epochs" in refused.stderr
