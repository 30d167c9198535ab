"""`dmlbench advise`: the compute line, the epochs model, the ranking and the guidelines
(unit tier, in memory), and the command on a real store (multi-process tier)."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from dmlbench.advise.noise_evidence import NoiseEvidence, noise_evidence
from dmlbench.advise.recommend import EpochModel, advise, compute_model, worker_counts
from dmlbench.errors import DmlbenchError
from dmlbench.perfmodel import CommCalibration, Link
from dmlbench.perfmodel.calibrate import TaskCalibration, calibrate_task
from dmlbench.results.records import RunRecord, RunSummary
from dmlbench.tasks import get_task


def timed(run_id: str, step_s: float, workers: int = 1, local: int = 32, **extra) -> RunRecord:
    """A finished, unshaped run of synthetic-mlp whose steady steps computed ``step_s``."""
    steady = [{"forward": step_s * 10 / 2, "backward": step_s * 10 / 2, "comm": 0.0}]
    return RunRecord(
        run_id=run_id,
        task="synthetic-mlp",
        status="success",
        division="closed",
        created_at="2026-11-24",
        workers=workers,
        local_batch=local,
        global_batch=local * workers,
        seed=0,
        exchange="allreduce",
        spec={},
        deviations={},
        environment={},
        run_dir="d",
        target=0.95,
        network="none",
        summary=RunSummary.model_validate(
            {
                "phases_steady": steady * workers,
                "steady_steps": 10,
                "gradient_bytes": 4e6,
                "train_examples": 2048,
                **extra,
            }
        ),
    )


def test_the_compute_line_is_fitted_through_the_measured_local_batches() -> None:
    runs = [
        timed("a", 1.0e-3, local=16),
        timed("b", 2.5e-3, local=64),
        timed("c", 2.6e-3, local=64),
        timed("d", 1.6e-3, workers=2, local=16),
    ]
    line = compute_model(runs, "synthetic-mlp", cores=2)
    assert line.workers == 1 and line.batches == [16, 64]
    # the median at b=64 is 2.55 ms: through (16, 1.0) and (64, 2.55)
    assert line.per_example_s == pytest.approx(1.55e-3 / 48)
    assert line.fixed_s == pytest.approx(1.0e-3 - 16 * 1.55e-3 / 48)
    assert line.factor(2) == (pytest.approx(1.6), "line ×1.60 measured")
    # not measured at 4: from 2's, with twice as many workers on the same 2 cores
    assert line.factor(4) == (pytest.approx(3.2), "line ×3.20 assumed: 4 share 2 cores")
    hosts = dataclasses.replace(line, cores=None)  # one host each: nobody shares
    assert hosts.factor(4) == (pytest.approx(1.6), "line ×1.60 assumed as at 2")
    assert dataclasses.replace(hosts, slowdown={}).factor(4) == (1.0, "line")
    one = compute_model([timed("a", 2e-3, local=16)], "synthetic-mlp", cores=None)
    assert (one.fixed_s, one.per_example_s) == (0.0, pytest.approx(2e-3 / 16))
    assert "assumed proportional" in one.line() and one.factor(2)[1] == "assumed ∝ b"
    assert "125.00 µs × b per step" in one.line() and "at 1 worker)" in one.line()
    assert one.line().startswith("125.00 µs × b")  # no fixed part: it read "0.000 ms + "
    assert line.line().startswith(f"{1e3 * line.fixed_s:.3f} ms + ")  # a fitted line's
    slow = compute_model([timed("a", 0.16, local=16)], "synthetic-mlp", cores=None)
    assert "10.00 ms × b" in slow.line()  # not 10000.00 µs
    assert "at 2 workers" in dataclasses.replace(line, workers=2).line()
    with pytest.raises(DmlbenchError, match="dmlbench run synthetic-mlp"):
        compute_model([], "synthetic-mlp", cores=None)


def test_epochs_are_measured_or_modelled_through_the_noise_scale() -> None:
    model = EpochModel({32: 10.0, 64: 12.0}, noise=64.0)
    assert model.at(64) == (12.0, "measured at B=64")
    # two measured batches: the line E = 8 + B/16, so E_min = 8 and B_crit = 128
    epochs, source = model.at(128)
    assert epochs == pytest.approx(16.0) and source.startswith("modelled")
    assert "B_crit ≈ 128 from a line through the measured epochs" in source
    # one batch, or epochs that do not grow with it: the noise scale stands in
    one = EpochModel({32: 10.0}, noise=64.0).at(128)
    assert one[0] == pytest.approx(10 / 1.5 * 3) and "B_crit ≈ 64 from the measured noise" in one[1]
    falling = EpochModel({32: 12.0, 64: 10.0}, noise=64.0).at(128)[0]
    assert falling == pytest.approx((12 / 1.5 + 10 / 2) / 2 * 3)
    # no noise scale and epochs that do not grow with the batch: the nearest's, assumed
    blind = EpochModel({32: 10.0, 256: 9.0}, noise=None)
    assert blind.at(64) == (10.0, "assumed: as at B=32 (measured; no noise scale)")
    assert EpochModel({32: 10.0, 256: 24.0}, noise=None).at(64)[0] == pytest.approx(12.0)
    told = EpochModel({32: 10.0}, noise=64.0, given=True)  # --epochs 10, no run reached it
    assert told.at(32) == (10.0, "assumed (--epochs) at B=32")
    assert (
        told.at(64)[0] == pytest.approx(10 / 1.5 * 2) and "(assumed (--epochs))" in (told.at(64)[1])
    )
    with pytest.raises(DmlbenchError, match="no run reached the target"):
        EpochModel({}, noise=50.0).at(64)


def test_noise_evidence_is_the_median_of_the_runs_that_measured_one() -> None:
    runs = [
        timed("a", 1e-3, noise_scale={"b_simple": 100.0, "steps": 500}),
        timed("b", 1e-3, noise_scale={"b_simple": 300.0, "steps": 500}),
        timed("c", 1e-3, noise_scale={"b_simple": 200.0, "steps": 100}),
        timed("d", 1e-3, noise_scale=None),
        timed("e", 1e-3),
        timed("f", 1e-3, noise_scale={"b_simple": 2.0, "steps": 20}),  # too few steps
    ]
    found = noise_evidence(runs, "synthetic-mlp")
    assert found is not None and found.b_simple == 200.0 and found.runs == ["a", "b", "c"]
    assert noise_evidence(runs[3:], "synthetic-mlp") is None


def _calibration(epochs: dict[int, float]) -> TaskCalibration:
    return TaskCalibration(
        task="synthetic-mlp",
        workers=1,
        local_batch=16,
        compute_step_s=1e-3,
        gradient_bytes=4e6,
        train_examples=2048,
        eval_s_per_epoch=0.0,
        epochs_by_batch=epochs,
    )


def _advise(*, step_s: float, noise: float, link: Link, **options):
    runs = [timed("a", step_s * 16 / 64, local=16), timed("b", step_s, local=64)]
    return advise(
        get_task("synthetic-mlp"),
        _calibration({16: 4.0, 64: 4.0 * (1 + 64 / noise) / 1.25}),
        compute_model(runs, "synthetic-mlp", cores=None),
        {2: CommCalibration(alpha_s=1e-4, host_busbw=1e9)},
        NoiseEvidence(noise, ["n"]),
        max_workers=8,
        network="test",
        link=link,
        **options,
    )


def test_the_advice_follows_compute_network_and_noise() -> None:
    fast, slow = Link(1.25e9), Link(1.25e5)  # 10 Gbit/s; 1 Mbit/s
    # heavy compute, a fast network, a huge noise scale: every worker helps
    wide = _advise(step_s=1.0, noise=1e6, link=fast)
    assert wide.best.workers == 8
    assert [c.tta_s for c in wide.candidates] == sorted(c.tta_s for c in wide.candidates)
    # 4 MB of gradient over 1 Mbit/s takes a minute a step: one worker, no exchange
    alone = _advise(step_s=1.0, noise=1e6, link=slow)
    assert alone.best.workers == 1 and alone.best.comm_ratio == 0.0
    # a small noise scale: a big batch buys no fewer steps, so the batch stays small
    small = _advise(step_s=1.0, noise=16.0, link=fast)
    assert small.best.global_batch < wide.best.global_batch
    assert small.best.local_batch == 16 and small.best.global_batch <= 128  # 16: the least measured
    assert worker_counts(8) == [1, 2, 4, 8] and worker_counts(6) == [1, 2, 4, 6]


def test_the_guidelines_a_plan_breaks() -> None:
    fast = Link(1.25e9)
    fine = _advise(step_s=1.0, noise=1e6, link=fast, current=(2, 16))
    assert fine.current is not None and fine.broken == []
    assert fine.current.global_batch == 32  # below √2048 ≈ 45 and the noise scale
    bad = _advise(step_s=1e-3, noise=100.0, link=Link(1.25e6), current=(8, 64))
    rules = "\n".join(bad.broken)
    assert "above the critical batch ≈ 100" in rules
    assert "above √(training examples) ≈ 45" in rules
    assert "too small to use a worker" in rules  # a millisecond of compute, 4 MB at 10 Mbit/s
    assert "oversubscribed" not in rules  # every worker has its own host
    on_one_host = advise(
        get_task("synthetic-mlp"),
        _calibration({16: 4.0}),
        compute_model([timed("a", 1e-3, local=16)], "synthetic-mlp", cores=2),
        {2: CommCalibration(alpha_s=1e-4, host_busbw=1e9)},
        None,
        max_workers=4,
        network="none",
        link=Link(math.inf),
        current=(4, 16),
    )
    assert any("4 workers on 2 cores are oversubscribed" in r for r in on_one_host.broken)
    assert on_one_host.current is not None and "assumed: 4 share 2 cores" in (
        on_one_host.current.compute_source
    )
    assert on_one_host.sources["noise_scale"].startswith("not measured")
    measured_b = {c.local_batch: c.compute_source for c in on_one_host.candidates if c.workers == 1}
    assert measured_b[16] == "assumed ∝ b" and measured_b[32].endswith("extrapolated above b=16")


def test_the_advice_table_keys_each_compute_source_and_fits_80_columns() -> None:
    """A column of compute sources wrapped every row over four lines at 80 columns: each
    row now names its source by a letter, and each source is spelt once below."""
    from rich.console import Console

    from dmlbench.cli.views.predictions import advice_table

    small = _advise(step_s=1.0, noise=16.0, link=Link(1.25e9), current=(2, 16))
    console = Console(width=80, record=True)
    console.print(advice_table(small, "example at 1 EUR/worker-hour", "EUR"))
    text = console.export_text()
    assert "cost, EUR" in text  # the currency heads the column, as in the other tables
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    shown = [small.best, *small.candidates[1:5], small.current, *small.worth_measuring[:3]]
    sources = list(dict.fromkeys(c.compute_source for c in shown if c is not None))
    spelt = [
        " ".join(line.split()) for line in text.splitlines() if re.match(r"\s*compute [a-z]:", line)
    ]
    keys = "abcdefghijklmnopqrstuvwxyz"[: len(sources)]
    assert spelt == [f"compute {k}: {source}" for k, source in zip(keys, sources, strict=True)]
    # each source's text starts in one column, its wrapped lines too (they ran on at
    # the left margin, under the names)
    lines = [line.rstrip() for line in text.splitlines()]
    below = [line for line in lines[lines.index("from:") + 1 :] if line]
    starts = {len(re.match(r"(  \w[\w ]*:)?\s*", line).group(0)) for line in below}
    assert len(below) > len(spelt) and len(starts) == 1
    # so do the rules the plan breaks: a wrapped rule ran on at the left margin
    rules = lines[lines.index("your plan breaks:") + 1 : lines.index("from:")]
    assert small.broken and len(rules) > len(small.broken)  # at least one wraps at 80
    assert all(line.startswith(("  - ", "    ")) for line in rules), rules


def test_local_batches_below_the_measured_ones_are_worth_measuring_not_recommended() -> None:
    """A small noise scale makes the smallest batches fastest on paper; below the smallest
    measured batch (16) the compute line is extrapolated, so they are listed, not advised."""
    small = _advise(step_s=1.0, noise=16.0, link=Link(1.25e9))
    assert small.best.local_batch >= 16 and not small.best.below_measured
    assert all(c.local_batch >= 16 for c in small.candidates)
    assert small.worth_measuring, "b=8 predicts faster than b=16 at this noise scale"
    assert all(c.local_batch < 16 and c.tta_s < small.best.tta_s for c in small.worth_measuring)
    assert small.worth_measuring[0].compute_source.endswith("extrapolated below b=16")
    assert small.to_json()["worth_measuring"][0]["below_measured"] is True
    # measured down to b=4 (a third run), b=8 is interpolated and may be recommended
    runs = [timed("a", 0.25, local=16), timed("b", 1.0, local=64), timed("c", 0.1, local=4)]
    lower = advise(
        get_task("synthetic-mlp"),
        _calibration({16: 4.0, 64: 4.0 * (1 + 64 / 16) / 1.25}),
        compute_model(runs, "synthetic-mlp", cores=None),
        {2: CommCalibration(alpha_s=1e-4, host_busbw=1e9)},
        NoiseEvidence(16.0, ["n"]),
        max_workers=8,
        network="test",
        link=Link(1.25e9),
    )
    assert lower.best.local_batch < 16 and lower.worth_measuring == []


def test_calibration_keeps_to_one_local_batch() -> None:
    """Runs at b=16 and b=128 compute differently; calibrating one line from both would be
    refused as a disagreement, so the most measured batch is calibrated."""
    runs = [timed("a", 1e-3, local=16), timed("b", 1.1e-3, local=16), timed("c", 6e-3, local=128)]
    chosen = calibrate_task(runs, "synthetic-mlp")
    assert chosen.local_batch == 16 and chosen.compute_runs == ["a", "b"]


def test_the_summarys_phase_line_says_what_comm_holds_for_each_overlapped_exchange() -> None:
    from dataclasses import replace

    from rich.console import Console

    from dmlbench.cli.views.summary import run_summary

    shares = {p: {"mean": 0.2, "max": 0.3} for p in ("forward", "backward", "comm")}
    run = timed("a", 1e-3, workers=2, phase_shares=shares, comm_overlapped=True)

    def shown(exchange: str) -> str:
        console = Console(width=300, record=True)
        console.print(run_summary(replace(run, exchange=exchange)))
        return console.export_text()

    assert "(ddp: comm is the part not hidden behind backward)" in shown("ddp")
    # on a GPU its collectives run on streams, inside forward and backward
    run = replace(run, summary=run.summary.model_copy(update={"device": "cuda:0"}))
    assert "(fsdp: its gathers and reduce-scatters are inside forward and backward" in shown("fsdp")
    # on a CPU they block the worker: timed as comm, where its bytes were counted too
    cpu = {"device": "cpu", "bytes_per_step": 8e6}
    run = replace(run, summary=run.summary.model_copy(update=cpu))
    assert "(fsdp: comm is its gathers and reduce-scatters, which block a CPU)" in shown("fsdp")


def test_advice_says_why_it_has_no_noise_scale() -> None:
    """Runs that measured B_simple over 14 steps read "not measured (run with 2+
    workers)": they had 2 workers, and their measurement was too short to advise on."""
    from dmlbench.advise.noise_evidence import UNMEASURED, noise_unmeasured

    short = [
        timed(f"s{i}", 0.1, workers=2, noise_scale={"b_simple": 10.0, "steps": 14 + i})
        for i in range(2)
    ]
    assert noise_evidence(short, "synthetic-mlp") is None
    why = noise_unmeasured(short, "synthetic-mlp")
    assert why.startswith("measured by 2 runs over at most 15 steps, too few to advise on")
    assert "stop_at_target=false" in why
    assert noise_unmeasured([timed("one", 0.1)], "synthetic-mlp") == UNMEASURED
