"""The performance model on hand-computed cases, its calibration, and `dmlbench simulate`."""

from __future__ import annotations

import dataclasses
import math

import pytest
from helpers import comm_record

from dmlbench.errors import DmlbenchError, SpecError
from dmlbench.perfmodel import (
    CommCalibration,
    Layout,
    Link,
    allreduce_time,
    calibrate_comm,
    calibrate_task,
    cluster_allreduce_time,
    predict,
)
from dmlbench.results.records import CommResult, CommRun, Evaluation, RunRecord, RunSummary

CAL = CommCalibration(alpha_s=1e-4, host_busbw=math.inf, link_efficiency=1.0)


LINK = Link(bandwidth=1e8, latency_s=1e-3)  # 100 MB/s, 1 ms one way


def test_ring_all_reduce_by_hand() -> None:
    # 2(N-1) = 6 steps of (α + 2L) = 6 × 2.1 ms, plus 6/4 × 1 MB at 100 MB/s = 15 ms
    assert allreduce_time("ring", 4, 1e6, LINK, CAL) == pytest.approx(0.0126 + 0.015)


def test_two_level_all_reduce_by_hand() -> None:
    fast = Link(bandwidth=1e9, latency_s=1e-5)  # inside a node: 1 GB/s, 10 µs, shared
    two = Layout(nodes=2, intra=fast)
    # flat ring over 2×2: 6 steps, each as slow as its slowest hop (the 100 MB/s link
    # between nodes; 1 intra hop per node shares 1 GB/s), latency the larger one
    assert cluster_allreduce_time("ring", 4, 1e6, LINK, two, CAL) == pytest.approx(
        6 * (1e-4 + 2e-3) + 6 / 4 * 1e6 / 1e8
    )
    # hierarchical: reduce + broadcast in a node of 2, then the 2 nodes' ring on 1 MB
    inside = 2 * (1 * (1e-4 + 2e-5) + 1 / 2 * 1e6 / 1e9)
    between = 2 * (1e-4 + 2e-3) + 1e6 / 1e8
    assert cluster_allreduce_time("hierarchical", 4, 1e6, LINK, two, CAL) == pytest.approx(
        inside + between
    )
    # one worker per node is the per-worker ring; one node never touches the slow link
    assert cluster_allreduce_time("ring", 4, 1e6, LINK, Layout(4), CAL) == pytest.approx(
        allreduce_time("ring", 4, 1e6, LINK, CAL)
    )
    one = cluster_allreduce_time("ring", 4, 1e6, LINK, Layout(1, fast), CAL)
    assert one == pytest.approx(6 * (1e-4 + 2e-5) + 6 / 4 * 1e6 / (1e9 / 4))
    with pytest.raises(ValueError, match="ring or hierarchical"):
        cluster_allreduce_time("tree", 4, 1e6, LINK, two, CAL)


def test_halving_and_doubling_by_hand() -> None:
    """Rabenseifner's all-reduce: the ring's bytes in 2·log2 N message steps, two more
    where N is no power of two (binary blocks); hierarchical between nodes too."""
    assert allreduce_time("halving-doubling", 8, 1e6, LINK, CAL) == pytest.approx(
        6 * (1e-4 + 2e-3) + 2 * 7 / 8 * 1e6 / 1e8
    )
    assert allreduce_time("halving-doubling", 5, 1e6, LINK, CAL) == pytest.approx(
        8 * (1e-4 + 2e-3) + 2 * 4 / 5 * 1e6 / 1e8
    )
    ring = allreduce_time("ring", 32, 1e6, LINK, CAL)
    assert allreduce_time("halving-doubling", 32, 1e6, LINK, CAL) < ring / 3  # 10 steps, not 62
    fast = Link(bandwidth=1e9, latency_s=1e-5)
    two = Layout(nodes=4, intra=fast)
    inside = 2 * (1 * (1e-4 + 2e-5) + 1 / 2 * 1e6 / 1e9)
    assert cluster_allreduce_time(
        "hierarchical", 8, 1e6, LINK, two, CAL, between="halving-doubling"
    ) == pytest.approx(inside + allreduce_time("halving-doubling", 4, 1e6, LINK, CAL))


def test_tree_all_reduce_by_hand() -> None:
    # ⌈log2 5⌉ = 3 levels, up and down: 6 × (2.1 ms + 10 ms)
    assert allreduce_time("tree", 5, 1e6, LINK, CAL) == pytest.approx(6 * 0.0121)


def test_parameter_server_by_hand() -> None:
    # one round trip of overheads, and the server's link carries 2 × N × S
    assert allreduce_time("ps", 4, 1e6, LINK, CAL) == pytest.approx(2 * 0.0021 + 8 * 0.01)


def test_one_worker_and_the_bottleneck() -> None:
    assert allreduce_time("ring", 1, 1e6, LINK, CAL) == 0.0
    slow_hosts = CommCalibration(alpha_s=0.0, host_busbw=5e7, link_efficiency=1.0)
    # the hosts (50 MB/s) are slower than the link (100 MB/s): they set the pace
    assert allreduce_time("ring", 2, 1e6, Link(1e8), slow_hosts) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="unknown algorithm"):
        allreduce_time("gossip", 2, 1.0, LINK, CAL)  # type: ignore[arg-type]


def test_prediction_by_hand() -> None:
    guess = predict(
        workers=2,
        algorithm="ring",
        local_batch=10,
        compute_per_example_s=0.001,
        compute_fixed_s=0.002,
        gradient_bytes=1e6,
        train_examples=1000,
        epochs_to_target=2,
        eval_s_per_epoch=0.5,
        link=LINK,
        calibration=CAL,
        price_per_worker_hour=3.6,
    )
    comm = 2 * 0.0021 + 1e6 / 1e8  # ring, N = 2
    assert guess.global_batch == 20 and guess.steps == 100  # 50 steps per epoch × 2
    assert guess.step_s == pytest.approx(0.012 + comm)
    assert guess.tta_s == pytest.approx(100 * (0.012 + comm) + 2 * 0.5)
    assert guess.cost == pytest.approx(guess.tta_s / 3600 * 2 * 3.6)
    assert guess.comm_ratio == pytest.approx(comm / (0.012 + comm))


def comm_run(workers: int, rows: list[tuple[int, float, float, float]], **spec) -> CommRun:
    return comm_record(
        run_id=f"c{workers}",
        workers=workers,
        created_at="2026-11-23",
        spec={"network": spec.get("network", {})},
        results=[
            CommResult(
                bytes=b,
                repeats=1,
                iterations=1,
                latency_s=lat,
                latency_min_s=low,
                latency_max_s=lat,
                latency_std_s=0.0,
                algbw=bw,
                busbw=bw,
            )
            for b, lat, low, bw in rows
        ],
    )


def test_calibration_reads_overhead_and_host_bandwidth() -> None:
    unshaped = [
        (4, 1e-4, 5e-5, 0),
        (64, 2e-3, 4e-4, 0),
        (4096, 2e-3, 3e-4, 0),
        (2**24, 0.01, 0.009, 2e9),
    ]
    shaped = [(64, 1e-3, 1e-4, 0), (2**24, 0.01, 0.009, 1e9)]  # not used for calibration
    runs = [comm_run(2, unshaped), comm_run(2, shaped, network={"bandwidth": "1gbit"})]
    (only,) = calibrate_comm(runs).values()
    assert only.alpha_s == pytest.approx(3e-4 / 2)  # fastest small message over 2 steps
    assert only.host_busbw == 2e9
    # `bench allreduce --workers 1` crosses no link: left out, not divided by 0 steps
    alone = comm_run(1, unshaped)
    assert calibrate_comm([*runs, alone]).keys() == {2}
    with pytest.raises(DmlbenchError, match="at 2 or more workers"):
        calibrate_comm([alone])


def test_calibration_leaves_out_benchmarks_that_measured_no_bandwidth() -> None:
    """`bench allreduce --max-bytes 1KB` measures the per-message overhead alone, and 3
    workers on 2 cores measure them waiting for a core: such a run at 3 workers put
    0.6 MB/s in the model, and `simulate` then predicted 93 ms steps at 4 workers on
    10gbit where the 2-worker benchmark gave 1.4 ms."""
    full = [(4, 1e-4, 5e-5, 0), (64, 2e-3, 4e-4, 0), (2**24, 0.01, 0.009, 2e9)]
    tiny = [(4, 1e-4, 5e-5, 0), (64, 2e-3, 4e-4, 0), (1000, 1e-4, 6e-5, 1.6e7)]
    both = calibrate_comm([comm_run(2, full), comm_run(2, tiny)])
    assert both[2].host_busbw == 2e9  # the median of the two was 1.0e9
    with pytest.raises(DmlbenchError, match="too small to measure bandwidth"):
        calibrate_comm([comm_run(2, tiny)])
    # more workers than the host's cores: left out where a run with fewer was not
    crowded = dataclasses.replace(comm_run(3, full), cores=2)
    fits = dataclasses.replace(comm_run(2, full), cores=2)
    assert crowded.oversubscribed and not fits.oversubscribed
    assert calibrate_comm([fits, crowded]).keys() == {2}
    assert calibrate_comm([crowded]).keys() == {3}  # the only measurement there is


def task_run(run_id: str, compute_s: float, workers: int = 1) -> RunRecord:
    """A finished, unshaped run whose steady steps took ``compute_s`` each (both phases)."""
    steady = [{"forward": compute_s * 10 / 2, "backward": compute_s * 10 / 2, "comm": 0.0}]
    return RunRecord(
        run_id=run_id,
        task="t",
        status="success",
        division="closed",
        created_at="2026-11-23",
        workers=workers,
        local_batch=32,
        global_batch=32 * workers,
        seed=0,
        exchange="allreduce",
        spec={},
        deviations={},
        environment={},
        run_dir="d",
        target=0.9,
        network="none",
        summary=RunSummary.model_validate(
            {
                "phases_steady": steady * workers,
                "steady_steps": 10,
                "gradient_bytes": 4e6,
                "train_examples": 3200,
            }
        ),
        evals=[
            Evaluation(
                epoch=3,
                step=300,
                samples=9600,
                elapsed_s=1.0,
                compute_elapsed_s=1.0,
                metric=0.95,
                loss=0.1,
            )
        ],
    )


def test_calibration_refuses_runs_that_disagree_and_names_its_runs() -> None:
    quiet, again, busy = task_run("quiet", 0.010), task_run("again", 0.012), task_run("busy", 0.17)
    both = calibrate_task([quiet, again], "t")
    assert both.compute_step_s == pytest.approx(0.011) and both.compute_runs == ["quiet", "again"]
    with pytest.raises(DmlbenchError) as refused:  # 17× apart: one run shared the machine
        calibrate_task([quiet, busy], "t")
    assert "10.00 ms/step (quiet) against 170.00 ms/step (busy)" in str(refused.value)
    assert "--calibrate-from" in str(refused.value) and "\n" not in str(refused.value)
    pinned = calibrate_task(
        [quiet, busy, task_run("wide", 0.05, workers=2)], "t", calibrate_from=["qui"]
    )  # a unique start of the id
    assert pinned.compute_step_s == pytest.approx(0.010) and pinned.compute_runs == ["quiet"]
    with pytest.raises(DmlbenchError, match="--calibrate-from nope: no finished"):
        calibrate_task([quiet], "t", calibrate_from=["nope"])
    with pytest.raises(DmlbenchError, match="2 finished, unshaped runs of t start or end"):
        calibrate_task([quiet, task_run("quieter", 0.011)], "t", calibrate_from=["qui"])


def test_calibration_prefers_undisturbed_runs_and_says_so() -> None:
    import dataclasses

    from dmlbench.report.tables import calibration_text

    quiet = task_run("quiet", 0.010, workers=2)
    busy = dataclasses.replace(task_run("busy", 0.17), disturbed=True)
    chosen = calibrate_task([busy, quiet], "t")  # the busy run has fewer workers
    assert chosen.compute_runs == ["quiet"] and chosen.disturbed_runs == ["busy"]
    assert not chosen.compute_disturbed
    assert "1 disturbed run left out" in calibration_text(dataclasses.asdict(chosen))
    only = calibrate_task([busy], "t")  # nothing better: used, and said to be overstated
    assert only.compute_disturbed and "disturbed by other processes" in calibration_text(
        dataclasses.asdict(only)
    )


def test_calibration_takes_runs_of_one_exchange_precision_and_model() -> None:
    """Issue 56, item 3: compute at 2 workers was the mean of a zero1 run (615 ms a step)
    and an fsdp run (1,148 ms). Runs of one setup are used, and the others are said."""
    import dataclasses

    from dmlbench.report.tables import calibration_text

    def of(run: RunRecord, exchange: str, precision: str = "fp32") -> RunRecord:
        recipe = {"precision": precision, "model": {"name": "gpt", "options": {"depth": 2}}}
        return dataclasses.replace(run, exchange=exchange, spec={"recipe": recipe})

    zero1 = [of(task_run(f"z{i}", 0.615, workers=2), "zero1") for i in range(2)]
    fsdp = of(task_run("f", 1.148, workers=2), "fsdp")
    chosen = calibrate_task([*zero1, fsdp], "t")  # two zero1 runs against one fsdp
    assert chosen.compute_step_s == pytest.approx(0.615)
    assert chosen.setup == "zero1 · fp32 · gpt (depth=2)"
    assert chosen.compute_runs == ["z0", "z1"] and chosen.other_setups == {
        "fsdp · fp32 · gpt (depth=2)": 1
    }
    said = calibration_text(dataclasses.asdict(chosen))
    assert "with zero1 · fp32 · gpt (depth=2) (runs z0, z1)" in said
    assert "1 run of other setups left out" in said
    pinned = calibrate_task([*zero1, fsdp], "t", calibrate_from=["f"])
    assert pinned.compute_step_s == pytest.approx(1.148) and pinned.setup.startswith("fsdp")
    bf16 = of(task_run("b", 0.3, workers=2), "zero1", "bf16")
    with pytest.raises(DmlbenchError, match="differ in exchange, precision or model"):
        calibrate_task([*zero1, bf16], "t", calibrate_from=["z0", "b"])


def test_simulate_and_advise_cost_only_what_the_price_is_for(tmp_path) -> None:
    """A store of GPU runs was predicted at the default price, a CPU machine's 0.19 USD
    an hour: now such a prediction has no cost and says why, until a price for the GPU."""
    from dmlbench.advise.recommend import advise_from_store
    from dmlbench.perfmodel.simulate import simulate
    from dmlbench.prices import Price, load_prices
    from dmlbench.resolve import resolve_spec
    from dmlbench.results import ResultsStore

    store = ResultsStore(tmp_path / "s")
    bench = {"op": "allreduce", "workers": 2, "nodes": 1, "backend": "gloo", "network": {}}
    from dmlbench.results.environment import collect_environment

    here = collect_environment()
    store.begin_comm("c", bench, here)
    sizes = [(4, 1e-4), (2**24, 0.01)]
    rows = [
        {"bytes": b, "repeats": 3, "iterations": 1, "latency_s": t, "latency_min_s": t}
        | {"latency_max_s": t, "latency_std_s": 0.0, "algbw": b / t, "busbw": b / t}
        for b, t in sizes
    ]
    store.finish_comm("c", status="success", results=rows, error=None)
    measured = task_run("g", 0.01)
    spec = resolve_spec("synthetic-mlp").to_json_dict()
    store.begin("g", spec, {}, {**here, "gpus": ["NVIDIA H200"]})
    summary = measured.summary.model_copy(update={"device": "cuda:0"})
    store.finish("g", status="success", summary=summary, evals=measured.evals)
    cpu = load_prices()["gcp-n1-standard-4"]
    predicted = simulate(store, "synthetic-mlp", [1, 2], ["10gbit"], ["ring"], price=cpu)
    assert predicted.calibration.device == "NVIDIA H200"
    assert all(row["cost"] is None for row in predicted.rows)
    assert predicted.unpriced and "prices a CPU machine" in predicted.unpriced
    assert "the runs ran on NVIDIA H200" in predicted.unpriced
    h200 = Price("h200", 4.0, device="H200")
    priced = simulate(store, "synthetic-mlp", [1, 2], ["10gbit"], ["ring"], price=h200)
    assert priced.unpriced is None and all(row["cost"] > 0 for row in priced.rows)
    # the cost is headed by its currency, in the terminal and in the report, as the
    # scaling tables head theirs; the report says the price, as `simulate` does
    from rich.console import Console

    from dmlbench.cli.views.predictions import prediction_table
    from dmlbench.report.html import prediction_sections
    from dmlbench.report.html_tables import prediction_view

    euro = Price("h200-eu", 3.7, currency="EUR", device="H200")
    result = simulate(store, "synthetic-mlp", [1, 2], ["10gbit"], ["ring"], price=euro).to_json()
    console = Console(width=120, record=True)
    console.print(prediction_table(result))
    printed = console.export_text()
    assert "cost, EUR" in printed and "speedup: time to the target against N=1;" in printed
    # the speedup is against the first count asked for, and the table says which
    later = simulate(store, "synthetic-mlp", [2, 4], ["10gbit"], ["ring"], price=euro).to_json()
    assert later["predictions"][0]["speedup"] == 1.0
    console = Console(width=200, record=True)
    console.print(prediction_table(later))
    assert "speedup: time to the target against N=2;" in console.export_text()
    many = simulate(store, "synthetic-mlp", [128], ["10gbit"], ["ring"], price=euro).to_json()
    console = Console(width=200, record=True)
    console.print(prediction_table(many))
    assert f"{16 * 128:,}" in console.export_text()  # B as every count: 2,048
    # a global batch past the task's 2,048 training examples was predicted: an epoch in
    # less time than one step
    with pytest.raises(SpecError, match="--workers 256: a global batch of 4,096 is larger "):
        simulate(store, "synthetic-mlp", [1, 256], ["10gbit"], ["ring"], price=euro)
    (section,) = prediction_sections([result])
    assert prediction_view(section.runs).head[-1] == "cost, EUR"
    assert "Cost at h200-eu at 3.7 EUR/worker-hour." in section.notes
    (unpriced,) = prediction_sections([predicted.to_json()])
    assert any(note.startswith("No cost: gcp-n1-standard-4 prices") for note in unpriced.notes)
    stored_before = {key: v for key, v in result.items() if key != "currency"}
    (older,) = prediction_sections([stored_before])  # kept before the currency was
    assert prediction_view(older.runs).head[-1] == "cost"
    advice = advise_from_store(store, "synthetic-mlp", max_workers=2, network="10gbit", price=cpu)
    assert advice.best.cost is None and advice.unpriced == predicted.unpriced
    advice = advise_from_store(store, "synthetic-mlp", max_workers=2, network="10gbit", price=h200)
    assert advice.best.cost and advice.best.cost > 0 and advice.unpriced is None
    assert advice.current is None and not advice.broken  # no plan given: none checked
    planned = advise_from_store(store, "synthetic-mlp", max_workers=2, network="10gbit", workers=2)
    assert planned.current and (planned.current.workers, planned.current.local_batch) == (2, 16)
