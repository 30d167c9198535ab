"""Summaries computed from event logs: known numbers in, known numbers out."""

from __future__ import annotations

import pytest

from dmlbench.results.summary import phase_shares, summarize


def test_phase_shares_mean_and_max_over_ranks() -> None:
    ranks = [
        {"data": 1.0, "forward": 2.0, "backward": 3.0, "comm": 2.0, "optimizer": 2.0},
        {"data": 1.0, "forward": 2.0, "backward": 3.0, "comm": 4.0, "optimizer": 0.0},
    ]
    shares = phase_shares(ranks)
    assert shares["comm"] == {"mean": pytest.approx(0.3), "max": pytest.approx(0.4)}
    assert shares["optimizer"]["max"] == pytest.approx(0.2)


def _event(key, value=None, **metadata):
    return {"key": key, "value": value, "time_ms": 0.0, "metadata": metadata}


def _eval(step, metric, elapsed):
    return _event("eval_accuracy", metric, epoch_num=step / 10, step=step, samples_count=step * 8,
                  eval_loss=1.0, elapsed_s=elapsed, compute_elapsed_s=elapsed - 0.1)  # fmt: skip


def test_crashed_run_keeps_what_it_reached() -> None:
    events = [
        _event("run_start", global_batch=8, steps_per_epoch=10),
        _eval(10, 0.5, 1.0),
        _event("epoch_stop", 1, step=10),
        _eval(20, 0.7, 2.0),
        _event("epoch_stop", 2, step=20),
    ]
    summary = summarize(events)
    assert summary["finished"] is False
    assert summary["best_metric"] == 0.7 and summary["steps"] == 20
    assert summary["time_to_accuracy_s"] is None  # no target in this log


def test_a_run_that_failed_after_reaching_its_target_says_when_it_did() -> None:
    events = [
        _event("run_start", global_batch=8, steps_per_epoch=10, target=0.6),
        _eval(10, 0.5, 1.0),
        _eval(20, 0.7, 2.0),
        _eval(30, 0.9, 3.0),
    ]
    summary = summarize(events)
    assert summary["finished"] is False and summary["best_metric"] == 0.9
    assert summary["time_to_accuracy_s"] == 2.0
    assert summary["time_to_accuracy_compute_s"] == pytest.approx(1.9)


def test_throughput_uses_the_slowest_rank_and_steady_steps() -> None:
    steady = [
        {"data": 0.0, "forward": 1.0, "backward": 1.0, "comm": 0.0, "optimizer": 0.0},
        {"data": 0.0, "forward": 1.0, "backward": 2.0, "comm": 1.0, "optimizer": 0.0},
    ]
    events = [
        _event("run_start", global_batch=64, steps_per_epoch=10),
        _event("run_stop", "success", steady_steps=100, phases_steady=steady, steps=105),
    ]
    summary = summarize(events)
    assert summary["step_time_s"] == pytest.approx(0.04)
    assert summary["throughput"] == pytest.approx(100 * 64 / 4.0)
