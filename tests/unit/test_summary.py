"""Summaries computed from event logs: known numbers in, known numbers out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmlbench.results.contention import judge
from dmlbench.results.events import EVENTS_FILE, LEGACY_EVENTS_FILE
from dmlbench.results.records import RunSummary
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
    return _event(
        "eval_accuracy",
        metric,
        epoch_num=step / 10,
        step=step,
        samples_count=step * 8,
        eval_loss=1.0,
        elapsed_s=elapsed,
        compute_elapsed_s=elapsed - 0.1,
    )


def test_crashed_run_keeps_what_it_reached() -> None:
    events = [
        _event("run_start", global_batch=8, steps_per_epoch=10),
        _eval(10, 0.5, 1.0),
        _event("epoch_stop", 1, step=10),
        _eval(20, 0.7, 2.0),
        _event("epoch_stop", 2, step=20),
    ]
    summary = summarize(events)
    assert summary.finished is False
    assert summary.best_metric == 0.7 and summary.steps == 20
    assert summary.time_to_accuracy_s is None  # no target in this log


def test_a_run_that_failed_after_reaching_its_target_says_when_it_did() -> None:
    events = [
        _event("run_start", global_batch=8, steps_per_epoch=10, target=0.6),
        _eval(10, 0.5, 1.0),
        _eval(20, 0.7, 2.0),
        _eval(30, 0.9, 3.0),
    ]
    summary = summarize(events)
    assert summary.finished is False and summary.best_metric == 0.9
    assert summary.time_to_accuracy_s == 2.0
    assert summary.time_to_accuracy_compute_s == pytest.approx(1.9)
    # how far it got, as its last evaluation saw it: an interrupted run's summary read
    # "22.00 epochs, 484 steps, 0 samples in —"
    assert (summary.steps, summary.samples, summary.elapsed_s) == (30, 240, 3.0)


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
    assert summary.step_time_s == pytest.approx(0.04)
    assert summary.throughput == pytest.approx(100 * 64 / 4.0)


def _sample(cpu, wait, busy, *, window=10.0, machine=7.0, cores=2.0, threads=2.0, steal=0.0):
    return {
        "window_s": window,
        "cpu_s": cpu,
        "wait_s": wait,
        "machine_busy_s": busy,
        "machine_steal_s": steal,
        "machine": machine,
        "cores": cores,
        "threads": threads,
    }


def test_a_worker_that_waited_while_others_ran_is_disturbed() -> None:
    # 10 s window: the worker ran 12 core-s and waited 8; the machine was busy 20 core-s
    verdict = judge([_sample(12.0, 8.0, 20.0)])
    assert verdict["disturbed"] is True
    assert verdict["wait_share_max"] == pytest.approx(0.4)
    assert verdict["machines"][0]["outside_cores"] == pytest.approx(0.8)
    assert "waited for a core 40%" in verdict["reason"] and "0.80 of 2 cores" in verdict["reason"]


def test_a_quiet_run_and_a_busy_but_roomy_machine_are_not_disturbed() -> None:
    assert judge([_sample(19.0, 0.2, 19.5)])["disturbed"] is False
    # others used 6 cores of 16, but the worker waited for none: it got what it asked for
    roomy = judge([_sample(19.0, 0.1, 80.0, cores=16.0)])
    assert roomy["disturbed"] is False and roomy["machines"][0]["outside_cores"] > 6


def test_time_a_hypervisor_stole_disturbs_a_run_whose_wait_cannot_show_it() -> None:
    # stolen time is neither run nor waited in a guest: the worker waited 2% of its CPU
    # time, but over the 10 s window the hypervisor took 8 core-s beside 12 busy ones
    stolen = judge([_sample(12.0, 0.25, 12.2, steal=8.0)])
    assert stolen["disturbed"] is True
    assert stolen["machines"][0]["stolen_share"] == pytest.approx(0.8 / 2.02, abs=1e-3)
    assert "hypervisor stole 0.80 of 2 cores, 40% of the time" in stolen["reason"]
    # a little steal is not a disturbance, and neither is some beside a quiet worker
    assert judge([_sample(19.0, 0.2, 19.5, steal=0.3)])["disturbed"] is False
    assert judge([_sample(19.0, 0.2, 19.5, steal=2.0)])["disturbed"] is False  # 9%
    no_steal_counter = judge([{**_sample(12.0, 0.25, 12.2), "machine_steal_s": None}])
    assert no_steal_counter["disturbed"] is False


def test_oversubscribing_by_its_own_layout_is_said_but_not_disturbed() -> None:
    # four 1-thread workers on 2 cores: each waits half the time; nobody else ran
    ranks = [_sample(5.0, 5.0, 20.2, threads=1.0) for _ in range(4)]
    verdict = judge(ranks)
    assert verdict["disturbed"] is False
    assert "own 4 threads share 2 cores" in verdict["reason"]


def test_workers_on_two_machines_are_judged_per_machine() -> None:
    # rank 1's machine had a busy neighbour; rank 0's was quiet
    ranks = [_sample(9.0, 0.1, 9.2, machine=1.0), _sample(6.0, 4.0, 16.0, machine=2.0)]
    verdict = judge(ranks)
    assert verdict["disturbed"] is True and "ranks 1" in verdict["reason"]
    assert [m["ranks"] for m in verdict["machines"]] == [[0], [1]]
    # the same numbers on one machine: the other rank's CPU is the run's own, not outside
    assert judge([_sample(9.0, 0.1, 15.2), _sample(6.0, 4.0, 15.2)])["disturbed"] is False


def test_what_cannot_be_measured_gets_no_verdict() -> None:
    assert judge([])["disturbed"] is None
    no_schedstat = {**_sample(9.0, 0.0, 9.0), "wait_s": None}
    assert judge([no_schedstat])["disturbed"] is None
    assert judge([_sample(0.1, 0.1, 0.5, window=0.2)])["disturbed"] is None  # too short


def test_summary_carries_the_verdict_from_the_logged_samples() -> None:
    events = [
        _event("run_start", global_batch=8, steps_per_epoch=10),
        _event(
            "run_stop",
            "success",
            steps=10,
            steady_steps=10,
            cpu_samples=[_sample(12.0, 8.0, 20.0)],
            phases_steady=[{"forward": 1.0}],
        ),
    ]
    assert (summarize(events).contention or {})["disturbed"] is True


def test_hardware_use_is_the_step_flops_over_the_steady_step_time() -> None:
    steady = [{"data": 0.0, "forward": 1.0, "backward": 1.0, "comm": 0.0, "optimizer": 0.0}] * 2
    events = [
        _event(
            "run_start",
            global_batch=64,
            world_size=2,
            steps_per_epoch=10,
            flops_per_step=0.5e9,
            peak_flops_per_s=100e9,
        ),
        _event(
            "run_stop",
            "success",
            steady_steps=100,
            phases_steady=steady,
            steps=105,
            elapsed_s=3.0,
            eval_s=0.5,
            peak_memory_bytes=[1e8, 2e8],
        ),
    ]
    summary = summarize(events)
    assert summary.flops_per_s == pytest.approx(0.5e9 / 0.02)  # 2 s over 100 steps
    assert summary.utilisation == pytest.approx(0.25)
    assert summary.samples_per_s_per_worker == pytest.approx(100 * 64 / 2.0 / 2)
    assert summary.train_s == pytest.approx(2.5)


def test_a_run_without_a_flop_count_has_no_utilisation() -> None:
    steady = [{"data": 0.0, "forward": 1.0, "backward": 1.0, "comm": 0.0, "optimizer": 0.0}]
    events = [
        _event("run_start", global_batch=8, steps_per_epoch=10),
        _event("run_stop", "success", steady_steps=10, phases_steady=steady),
    ]
    summary = summarize(events)
    assert summary.utilisation is None and summary.flops_per_s is None


def test_the_summary_names_hardware_use_and_where_the_time_went() -> None:
    from dmlbench.cli.views.machine import compilation_text, hardware_text
    from dmlbench.cli.views.summary import time_split
    from dmlbench.train import allocator

    source = "GEMM probe: 2048², float32, 2 threads, oneDNN"
    summary = RunSummary.model_validate(
        {
            "flops_per_step": 7.76e9,
            "flops_per_s": 25e9,
            "utilisation": 0.25,
            "peak_flops_per_s": 100e9,
            "peak_source": source,
            "samples_per_s_per_worker": 1600.0,
            "peak_memory_bytes": [1e8, 2e8],
            "channels_last": True,
            "compiled": False,
            "page_faults_per_step": [3.0, 4.4],
            "cpu_allocator": "default",
        }
    )
    text = hardware_text(summary)
    assert text.startswith(
        f"7.76 GFLOP per step per worker; 25 GFLOP/s per worker = 25.0% of 100 GFLOP/s ({source})"
    )
    assert "1,600 samples/s per worker" in text and "peak memory 191 MiB" in text
    assert "; 4 page faults per step (the most); channels-last" in text
    assert text.endswith("; channels-last")
    one = summary.model_copy(update={"page_faults_per_step": [0.6, 1.2]})
    assert "; 1 page fault per step (the most)" in hardware_text(one)

    def kept_by(record: str) -> str:
        return hardware_text(summary.model_copy(update={"cpu_allocator": record}))

    assert kept_by(allocator.TUNED).endswith("; channels-last and tuned allocator")
    assert kept_by("jemalloc 5.3.0 (keeps freed memory)").endswith("; channels-last and jemalloc")
    fallback = allocator.TUNED + " in place of jemalloc, which was not preloaded"
    assert kept_by(fallback).endswith("; channels-last and tuned allocator (no jemalloc)")
    on_gpu = summary.model_copy(update={"cpu_allocator": fallback, "device": "cuda:0"})
    assert hardware_text(on_gpu).endswith("and host's tuned allocator (no jemalloc)")
    graphs = summary.model_copy(update={"compiled": "reduce-overhead", "cpu_allocator": None})
    assert hardware_text(graphs).endswith("; channels-last and compiled (reduce-overhead)")
    assert hardware_text(graphs.model_copy(update={"compiled": True})).endswith(" and compiled")
    assert hardware_text(RunSummary()) == ""
    assert time_split(RunSummary(train_s=198.1, eval_s=17.0)) == (
        ": training 198.1 s, evaluation 17.0 s"
    )
    compiled = RunSummary(compile_s=4.2, recompiles_in_clock=0)
    assert compilation_text(compiled) == "4.20 s torch.compile (before the clock starts)"
    again = compilation_text(compiled.model_copy(update={"recompiles_in_clock": 2}))
    assert again.endswith(
        "; recompiled 2 times inside the clock (a new input shape?): "
        "those steps include compile time"
    )


def test_the_event_log_is_written_in_mlperfs_mllog_lines_and_older_logs_still_read(
    tmp_path: Path,
) -> None:
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    from dmlbench.results.events import EventLog, events_file, read_events, read_events_counted

    log = EventLog(tmp_path / EVENTS_FILE)
    log.log("run_start", None, world_size=2)
    log.log("eval_accuracy", 0.5, epoch_num=1.0)
    log.log("run_stop", None, status="success")
    log.close()
    text = (tmp_path / EVENTS_FILE).read_text()
    assert all(line.startswith(":::MLLOG {") for line in text.splitlines())
    first = json.loads(text.splitlines()[0].removeprefix(":::MLLOG "))
    assert list(first) == ["namespace", "time_ms", "event_type", "key", "value", "metadata"]
    assert first["event_type"] == "INTERVAL_START" and first["namespace"] == ""
    lines, errors = parse_file(str(tmp_path / EVENTS_FILE), ruleset="5.1.0")
    assert errors == [] and [line.key for line in lines] == [
        "run_start",
        "eval_accuracy",
        "run_stop",
    ]
    assert lines[1].value == {"value": 0.5, "metadata": {"epoch_num": 1.0}}
    assert [e["key"] for e in read_events(events_file(tmp_path))] == [line.key for line in lines]
    # a run folder from before MLLOG: bare JSON lines in events.jsonl, read the same way
    old = tmp_path / "old"
    old.mkdir()
    (old / LEGACY_EVENTS_FILE).write_text(
        json.dumps({"key": "run_start", "value": None, "time_ms": 1.0, "metadata": {}}) + "\n{torn"
    )
    events, skipped = read_events_counted(events_file(old))
    assert [e["key"] for e in events] == ["run_start"] and skipped == 1


def test_a_diverged_runs_numbers_are_strict_json_in_the_log_and_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 53: a diverged run wrote a bare ``NaN`` into events.log, which strict JSON
    readers refuse. Non-finite numbers are written as their names and read back as
    floats; `--json` prints them as ``null``."""
    import math

    from dmlbench.cli.options import print_json
    from dmlbench.results.events import EventLog, read_events

    log = EventLog(tmp_path / EVENTS_FILE)
    log.log("eval_accuracy", 0.1, eval_loss=float("nan"), grad=[float("inf"), 1.0])
    log.log("run_stop", float("-inf"), status="diverged")
    log.close()
    for line in (tmp_path / EVENTS_FILE).read_text().splitlines():
        json.loads(line.removeprefix(":::MLLOG "), parse_constant=pytest.fail)  # strict
    first, last = read_events(tmp_path / EVENTS_FILE)
    assert math.isnan(first["metadata"]["eval_loss"]) and first["metadata"]["grad"] == [
        math.inf,
        1.0,
    ]
    assert last["value"] == -math.inf and last["metadata"]["status"] == "diverged"
    print_json({"loss": float("nan"), "rows": [{"x": float("inf")}], "ok": 1.5})
    printed = capsys.readouterr().out
    assert json.loads(printed, parse_constant=pytest.fail) == {
        "loss": None,
        "rows": [{"x": None}],
        "ok": 1.5,
    }
