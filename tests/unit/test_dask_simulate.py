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
    Network,
    UpdateTime,
    measure_update_time,
    network_table,
    schedule,
    schedule_table,
    simulate,
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
