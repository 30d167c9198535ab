"""The schedule simulation and the history on known numbers (no cluster)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dmlbench.dask.dampers import (
    PAPER_EPOCHS,
    PAPER_SCHEDULES,
    Constant,
    GeoDamp,
    PadaDamp,
    TrainState,
)
from dmlbench.dask.history import History, plot_histories
from dmlbench.dask.simulate import (
    GBIT,
    PAPER_NETWORKS,
    PAPER_TABLE_2,
    Network,
    SleepEngine,
    UpdateTime,
    fit_engine_cost,
    full_batch_updates,
    measure_update_time,
    network_table,
    paper_engines,
    schedule,
    schedule_table,
    simulate,
    sleep_engine_table,
)
from dmlbench.perfmodel.model import CommCalibration, Link


def test_schedule_counts_updates_like_the_estimators() -> None:
    assert schedule(Constant(10), 100, 3) == [10] * 30
    assert schedule(Constant(30), 100, 1) == [30, 30, 40]  # no 10-example last update
    sizes = schedule(GeoDamp(10, delay=1, factor=2), 100, 3)
    assert sizes == [10] * 10 + [20] * 5 + [40, 40, 20]  # a half batch left over stays
    grown = schedule(PadaDamp(10, rate=1.0), 100, 1)
    assert grown[:3] == [10, 11, 12] and sum(grown) == 100


def test_the_papers_five_schedules() -> None:
    """Batch ×5 at epochs 60, 120 and 180 up to each maximum, then the rate ×1/5 instead;
    over CIFAR-10's 50,000 examples for 200 epochs, fewer updates the more it grows."""
    at = {e: TrainState(epoch=e) for e in (0, 59.9, 60, 120, 180)}
    lr_only = PAPER_SCHEDULES["128 → 128"]
    assert [lr_only(s).batch_size for s in at.values()] == [128] * 5
    assert [lr_only(s).lr_factor for s in at.values()] == pytest.approx([1, 1, 0.2, 0.04, 0.008])
    doubled = PAPER_SCHEDULES["256 → 5,120 (*2)"]
    assert [doubled(s).batch_size for s in at.values()] == [256, 256, 1280, 5120, 5120]
    assert [doubled(s).lr_factor for s in at.values()] == pytest.approx([1, 1, 1, 0.8, 0.16])
    updates = {name: schedule(d, 50_000, PAPER_EPOCHS) for name, d in PAPER_SCHEDULES.items()}
    assert len(updates["128 → 128"]) == 200 * 391  # 390 of 128, then 80 joins the last
    growing = [len(updates[n]) for n in ("128 → 128", "128 → 640", "128 → 3,200", "128 → 16,000")]
    assert growing == sorted(growing, reverse=True) and len(set(growing)) == 4
    largest = {
        "128 → 128": 128,
        "128 → 640": 640,
        "128 → 3,200": 3_200,
        "128 → 16,000": 16_000,
        "256 → 5,120 (*2)": 5_120,
    }
    for name, sizes in updates.items():  # an epoch's last update takes what is left over
        assert largest[name] in sizes and max(sizes) < 1.5 * largest[name], name


def test_update_time_and_the_simulated_table() -> None:
    model = UpdateTime(fixed_s=0.002, per_task_s=0.001, compute_s=0.010, grads_per_worker=32)
    assert model.tasks(32) == 1 and model.tasks(33) == 2
    assert model(128, max_workers=4) == pytest.approx(0.002 + 0.004 + 0.010)
    assert model(128, max_workers=1) == pytest.approx(0.002 + 0.004 + 0.040)
    schedules = {
        "constant": schedule(Constant(32), 1024, 4),
        "geo": schedule(GeoDamp(32, delay=1, factor=2), 1024, 4),
    }
    table = simulate(schedules, model, [1, 8]).set_index(["schedule", "max_workers"])
    assert table.loc[("constant", 1), "updates"] == 128
    assert table.loc[("geo", 1), "updates"] == 32 + 16 + 8 + 4
    assert table.loc[("constant", 8), "wall_s"] == pytest.approx(128 * 0.013)
    # with workers growing with the batch, GeoDamp's time follows its updates
    assert table.loc[("geo", 8), "speedup"] > table.loc[("geo", 1), "speedup"] > 1


def test_update_time_is_measured_from_update_records() -> None:
    records = [
        {"tasks": k, "workers": k, "wall_s": 0.003 + 0.001 * k + 0.02, "compute_s": 0.02}
        for k in (1, 2, 4)
        for _ in range(3)
    ]
    records.append({"tasks": 8, "workers": 2, "wall_s": 9.0, "compute_s": 0.02})  # queued
    model = measure_update_time(records, 32)
    assert model.fixed_s == pytest.approx(0.003) and model.per_task_s == pytest.approx(0.001)
    assert model.compute_s == pytest.approx(0.02)
    with pytest.raises(ValueError, match="no update records"):
        measure_update_time([], 32)


def test_network_table_charges_the_central_server_more() -> None:
    model = UpdateTime(0.0, 0.0, 0.01, 32)
    schedules = {"geo": schedule(GeoDamp(32, delay=1, factor=4), 4096, 3)}
    calibration = CommCalibration(alpha_s=1e-5, host_busbw=1e12)
    links = {"1gbit": Link(1.25e8), "100gbit": Link(1.25e10)}
    table = network_table(schedules, model, 100e6, links, calibration, max_workers=64)
    wall = table.set_index(["network", "algorithm"])["wall_s"]
    assert wall[("1gbit", "ps")] > wall[("1gbit", "ring")] > wall[("100gbit", "ring")]


def test_schedule_table_gives_the_papers_columns() -> None:
    """Updates, epochs and maximum workers per schedule, and the training time with no
    network and over each network, from bandwidth and latency."""
    model = UpdateTime(fixed_s=0.0, per_task_s=0.0, compute_s=0.1, grads_per_worker=128)
    table = schedule_table(PAPER_SCHEDULES, 50_000, PAPER_EPOCHS, model, 11e6).set_index("schedule")
    names = [network.name for network in PAPER_NETWORKS]
    lr_only, widest = table.loc["128 → 128"], table.loc["128 → 16,000"]
    assert (lr_only["updates"], lr_only["epochs"], lr_only["max_workers"]) == (78_200, 200, 1)
    assert lr_only["compute_s"] == pytest.approx(7_820)
    assert [lr_only[name] for name in names] == pytest.approx([7_820] * 3)  # one worker
    assert widest["max_workers"] == 125 and table.loc["256 → 5,120 (*2)", "max_workers"] == 40
    assert widest["updates"] < table.loc["128 → 3,200", "updates"] < lr_only["updates"]
    slow_central, slow_ring, fast_ring = (widest[name] for name in names)
    assert slow_central > slow_ring > fast_ring > widest["compute_s"]

    one_update = {"one": Constant(640)}  # 5 workers, 1 s to send the gradient once
    link = Link(54 * GBIT, 0.05e-6)
    nets = [Network("central", "ps", link), Network("ring", "ring", link)]
    row = schedule_table(one_update, 640, 1, model, 54 * GBIT, nets).iloc[0]
    assert row["central"] == pytest.approx(0.1 + 2 * 0.05e-6 + 2 * 5 * 1.0)  # in and out
    assert row["ring"] == pytest.approx(0.1 + 8 * 0.05e-6 + 8 / 5 * 1.0)  # 2(N−1) steps


def test_adadamps_epoch_arithmetic_gives_the_papers_update_counts() -> None:
    assert full_batch_updates(Constant(30), 100, 2) == {30: 8}  # ⌈100/30⌉ a whole batch each
    counts = {
        name: sum(full_batch_updates(damper, 50_000, PAPER_EPOCHS).values())
        for name, damper in PAPER_SCHEDULES.items()
    }  # the paper's Table 1
    assert counts == {
        "128 → 128": 78_200,
        "128 → 640": 34_520,
        "128 → 3,200": 29_480,
        "128 → 16,000": 29_240,
        "256 → 5,120 (*2)": 14_960,
    }


def test_the_sleep_engine_runs_its_tasks_in_waves_of_its_threads() -> None:
    engine = SleepEngine(
        threads=4, fixed_s=0.01, per_task_s=0.002, gradient_s=0.1, grads_per_worker=100
    )
    assert engine(100) == pytest.approx(0.01 + 0.002 + 0.1)
    assert engine(400) == pytest.approx(0.01 + 4 * 0.002 + 0.1)  # one wave of 4
    assert engine(500) == pytest.approx(0.01 + 5 * 0.002 + 2 * 0.1)  # a second wave
    assert engine(250) == pytest.approx(0.01 + 2 * 0.002 + 0.125)  # 2 tasks of 125
    tree = SleepEngine(4, 0.0, 0.0, 0.0, 100, broadcast=Link(1e9, 1e-3), model_bytes=1e7)
    assert tree(100) == 0.0  # one worker: nothing to send
    assert tree(800) == pytest.approx(2 * 3 * (0.01 + 1e-3))  # 2 waves, log2 8 hops each
    copying = SleepEngine(4, 0.0, 0.0, 0.0, 100, copy_s=0.05)
    assert copying(100) == copying(400) == pytest.approx(0.05)


def test_the_engine_cost_fit_recovers_a_line() -> None:
    assert fit_engine_cost({1: 0.013, 2: 0.016, 8: 0.034}) == pytest.approx((0.010, 0.003))
    with pytest.raises(ValueError, match="two task counts"):
        fit_engine_cost({4: 0.1})


def test_the_papers_simulation_replays_its_table_2_within_15_percent() -> None:
    """Inputs from the authors' repository only (benchmarks/replay_adadamp.py prints it)."""
    engines = paper_engines(model_bytes=4 * 2_748_890)  # WRN-16-4's float32 weights
    table = sleep_engine_table(PAPER_SCHEDULES, 50_000, PAPER_EPOCHS, engines)
    table = table.set_index("schedule")
    for schedule_name, published in PAPER_TABLE_2.items():
        for column, minutes in zip(engines, published, strict=True):
            predicted = table.loc[schedule_name, column] / 60
            assert predicted == pytest.approx(minutes, rel=0.15), (schedule_name, column)
    assert list(engines)[1:] == [n.name for n in PAPER_NETWORKS if n.algorithm == "ring"]


def test_history_is_json_and_plots(tmp_path: Path) -> None:
    history = History()
    for epoch in range(3):
        record = history.new_epoch(engine="centralised")
        for u in range(4):
            record["updates"].append(
                {
                    "update": epoch * 4 + u + 1,
                    "batch_size": 32 * 2**epoch,
                    "workers": epoch + 1,
                    "loss": 1 / (epoch * 4 + u + 1),
                }
            )
        record.update(
            n_updates=(epoch + 1) * 4,
            test_accuracy=0.5 + 0.1 * epoch,
            batch_size=32 * 2**epoch,
            workers=epoch + 1,
        )
    assert json.loads(json.dumps(history)) == history
    assert history.n_updates == 12 and len(history.frame("updates")) == 12
    assert list(history.frame("epochs")["epoch"]) == [1, 2, 3]
    with pytest.raises(ValueError, match="level"):
        history.frame("batches")
    path = plot_histories({"a": history}, tmp_path / "h.png", metric="test_accuracy")
    assert path.stat().st_size > 10_000 and math.isfinite(path.stat().st_mtime)
