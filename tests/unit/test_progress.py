"""What a run says of itself as it goes: rank 0's progress words, and the keys MLPerf's
compliance checker asks of its log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from dmlbench.results.compliance import Submission, log_cache_clear, platform
from dmlbench.results.events import EventLog, read_events
from dmlbench.train.hardware import Peak
from dmlbench.train.progress import PROGRESS_EVERY_S, ProgressMeter


def test_a_progress_word_counts_the_steps_since_the_last_one() -> None:
    """Rates over the steps since the last word (start-up and evaluation left out by
    restart), the epoch's mean loss, MFU against the worker's peak, and tokens for a
    language model only."""
    cpu = torch.device("cpu")
    meter = ProgressMeter(cpu, 64, None, 1e9, Peak(1e10, "configured"))
    assert not meter.due()
    meter.restart(100)
    time.sleep(0.05)
    word = meter.word(110, torch.tensor(12.0), 4)
    assert word["train_loss"] == 3.0 and word["memory_bytes"] > 0
    assert 0 < word["samples_per_s"] <= 10 * 64 / 0.05  # 10 steps in at least 0.05 s
    assert word["mfu"] == pytest.approx(word["samples_per_s"] / 64 * 1e9 / 1e10)
    assert "tokens_per_s" not in word
    again = meter.word(110, torch.tensor(12.0), 4)  # no step since: no rate
    assert again["samples_per_s"] == 0.0 and again["mfu"] == 0.0
    words = ProgressMeter(cpu, 8, 128, None, Peak(0.0, "unknown")).word(1, torch.tensor(1.0), 1)
    assert words["tokens_per_s"] == words["samples_per_s"] * 128 and "mfu" not in words
    assert PROGRESS_EVERY_S >= 1.0  # a word is rare beside a step


def test_a_log_says_what_mlperfs_checker_asks_once_each(tmp_path: Path) -> None:
    """Each key once, MLPerf's open division beside dmlbench's own, and the cache honestly
    not cleared; MLPerf's benchmark name where the task is one."""
    log = EventLog(tmp_path / "events.log")
    log_cache_clear(log)
    Submission(
        benchmark="resnet",
        platform=platform(2, "  Intel(R)   Xeon(R) CPU "),
        division="closed",
        seed=3,
        global_batch=256,
        optimizer="sgd",
        train_samples=1_281_167,
        eval_samples=50_000,
    ).log(log)
    log.close()
    events = {e["key"]: e for e in read_events(tmp_path / "events.log")}
    assert len(events) == len(read_events(tmp_path / "events.log")) == 12
    assert events["cache_clear"]["value"] is False
    assert events["submission_division"]["value"] == "open"
    assert events["submission_division"]["metadata"] == {"dmlbench_division": "closed"}
    assert events["submission_platform"]["value"] == "2xIntel(R) Xeon(R) CPU"
    assert events["submission_benchmark"]["value"] == "resnet"
    assert [events[k]["value"] for k in ("train_samples", "eval_samples", "seed")] == [
        1_281_167,
        50_000,
        3,
    ]
    assert events["gradient_accumulation_steps"]["value"] == 1
