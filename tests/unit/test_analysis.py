"""Analysis formulas on known numbers: olympic mean, speedup, efficiency, AAT, cost."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from dmlbench.errors import SpecError
from dmlbench.prices import Price, load_prices
from dmlbench.report import analysis, frames, notes, variants
from dmlbench.results.records import Evaluation, RunRecord, RunSummary


def stored_run(
    run_id: str,
    workers: int,
    *,
    tta: float | None,
    seed: int = 0,
    status: str | None = None,
    local_batch: int = 32,
    global_batch: int | None = None,
    step_time: float = 0.01,
    comm: tuple[float, float] = (0.1, 0.2),
    exchange: str = "allreduce",
    cores: int = 2,
    evals: list[tuple[float, float]] = (),
    sweep: str | None = "s",
    scaling: str | None = None,
    disturbed: bool | None = False,
) -> RunRecord:
    """A run as ``ResultsStore.runs`` returns it."""
    global_batch = global_batch or local_batch * workers
    status = status or ("success" if tta is not None else "target_not_reached")
    spec = {
        "task": "t",
        "workers": workers,
        "seed": seed,
        "exchange": exchange,
        "recipe": {"local_batch": global_batch // workers},
        "global_batch": global_batch,
    }
    return RunRecord(
        run_id=run_id,
        task="t",
        sweep=sweep,
        scaling=scaling,
        division="closed",
        status=status,
        stop_reason=None,
        workers=workers,
        local_batch=global_batch // workers,
        global_batch=global_batch,
        seed=seed,
        repeat=seed,
        exchange=exchange,
        target=0.9,
        best_metric=0.91 if tta else 0.8,
        time_to_accuracy_s=tta,
        time_to_accuracy_compute_s=tta and tta * 0.9,
        elapsed_s=tta or 50.0,
        epochs=4.0,
        steps=400,
        throughput=global_batch / step_time,
        summary=RunSummary.model_validate(
            {
                "step_time_s": step_time,
                "phase_shares": {"comm": {"mean": comm[0], "max": comm[1]}},
            }
        ),
        cores=cores,
        cpu_model="cpu",
        host="h",
        torch_version="2",
        git_revision="r",
        created_at="2026-11-22T00:00:00+00:00",
        error=None,
        spec=spec,
        deviations={},
        environment={},
        run_dir="d",
        disturbed=disturbed,
        evals=[
            Evaluation(
                epoch=i + 1,
                step=100 * (i + 1),
                samples=0,
                elapsed_s=t,
                compute_elapsed_s=t,
                metric=m,
                loss=1 - m,
            )
            for i, (t, m) in enumerate(evals)
        ],
    )


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 2, 3, 4, 100], 3.0),  # fastest and slowest dropped
        ([10, 12, 14], 12.0),
        ([2, 4], 3.0),  # fewer than 3: plain mean
        ([5], 5.0),
        ([1, math.inf, 3], 3.0),  # one non-converged run is dropped as the slowest
        ([1, math.inf, math.inf], math.inf),  # two are not: the point did not converge
        ([], math.nan),
    ],
)
def test_olympic_mean(values: list[float], expected: float) -> None:
    got = analysis.olympic_mean(values)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("t0", "n0", "t", "n", "mode", "expected"),
    [
        (10, 1, 10, 2, "weak", 1.0),  # same time per step at twice the workers: ideal
        (10, 1, 12.5, 4, "weak", 0.8),
        (10, 1, 5, 2, "strong", 1.0),  # half the time at twice the workers: ideal
        (12, 2, 4, 8, "strong", 0.75),  # baseline of 2 workers: 2·12 / (8·4)
        (10, 1, math.inf, 2, "strong", 0.0),  # never converged
        (10, 1, math.nan, 2, "weak", math.nan),
    ],
)
def test_efficiency_formulas(t0, n0, t, n, mode, expected) -> None:
    got = analysis.efficiency(t0, n0, t, n, mode)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def strong_runs() -> list[dict[str, Any]]:
    runs = [
        stored_run(f"a{s}", 1, tta=t, seed=s, global_batch=64, step_time=0.010)
        for s, t in enumerate([10.0, 12.0, 14.0])
    ]
    runs += [
        stored_run(f"b{s}", 2, tta=t, seed=s, global_batch=64, step_time=0.006)
        for s, t in enumerate([6.0, 7.0, None])
    ]
    runs.append(stored_run("c0", 2, tta=None, seed=3, global_batch=64, status="failed"))
    return runs


def test_scaling_table_aggregates_repeats_and_computes_strong_scaling() -> None:
    table = analysis.scaling_table(frames.runs_frame(strong_runs()), price=Price("p", 2.0))
    one, two = table.iloc[0], table.iloc[1]
    assert list(table["workers"]) == [1, 2]
    assert (one["runs"], one["converged"], two["runs"], two["finished"], two["converged"]) == (
        3,
        3,
        4,
        3,
        2,
    )
    assert one["tta_mean"] == pytest.approx(12.0) and one["tta_std"] == pytest.approx(2.0)
    assert two["tta_mean"] == pytest.approx(6.5)  # converged runs only
    assert two["tta_olympic"] == pytest.approx(7.0)  # [6, 7, inf]: inf dropped as slowest
    assert two["scaling"] == "strong" and two["baseline_workers"] == 1
    assert two["speedup_tta"] == pytest.approx(12 / 6.5)
    assert two["efficiency_tta"] == pytest.approx(12 / (2 * 6.5))
    assert two["efficiency_step"] == pytest.approx(0.010 / (2 * 0.006))
    assert two["speedup_throughput"] == pytest.approx(0.010 / 0.006)
    assert two["cost_to_target"] == pytest.approx(6.5 / 3600 * 2 * 2.0)
    assert two["comm_ratio_max"] == pytest.approx(0.2)


def test_a_price_costs_only_the_runs_on_the_device_it_is_for(tmp_path) -> None:
    """The report priced 512 A100s of an imported MLPerf run at a CPU machine's 0.19 USD
    an hour (3.25 USD to train ResNet-50); a price now says what a worker is, and runs
    on another device are left unpriced and named."""
    cpu = stored_run("cpu", 2, tta=3600.0)
    gpu = dataclasses.replace(
        stored_run("gpu", 8, tta=3600.0, sweep="g"),
        summary=RunSummary(device="NVIDIA A100-SXM4-40GB (400W)"),
    )
    local = dataclasses.replace(  # a CUDA run of this machine's: its host's GPU
        stored_run("cuda", 4, tta=3600.0, sweep="c"),
        summary=RunSummary(device="cuda:0"),
        gpus=["NVIDIA A100-SXM4-80GB"],
    )
    frame = frames.runs_frame([cpu, gpu, local])
    assert list(frame["device"]) == ["cpu", "NVIDIA A100-SXM4-40GB (400W)", "NVIDIA A100-SXM4-80GB"]
    builtin = load_prices()["gcp-n1-standard-4"]
    table = analysis.scaling_table(frame, price=builtin).set_index("sweep")
    assert table.loc["s", "cost_to_target"] == pytest.approx(2 * 0.19)
    assert table["cost_to_target"].drop("s").isna().all()
    note = analysis.unpriced_note(table, builtin)
    assert note is not None and "NVIDIA A100-SXM4-40GB (400W)" in note and "80GB" in note
    assert "prices a CPU machine" in note
    # it names the built-in entry that prices them (it said only --price or --prices)
    assert "--price aws-capacity-block-a100 (built in)" in note
    assert "(built in)" not in builtin.unpriced("Tesla V100-SXM2-16GB")  # none for a V100
    mine = tmp_path / "prices.yaml"
    mine.write_text("a100: {per_worker_hour: 4.0, device: a100}\n")
    a100 = load_prices(mine)["a100"]  # matched without regard to case
    table = analysis.scaling_table(frame, price=a100).set_index("sweep")
    assert table.loc["g", "cost_to_target"] == pytest.approx(8 * 4.0)
    assert table.loc["c", "cost_to_target"] == pytest.approx(4 * 4.0)
    assert math.isnan(table.loc["s", "cost_to_target"])
    anything = analysis.scaling_table(frame, price=Price("custom", 1.0))  # --price 1: any
    assert anything["cost_to_target"].notna().all()
    assert analysis.unpriced_note(anything, Price("custom", 1.0)) is None
    mine.write_text("a100: {per_worker_hour: 4.0, device: [a100]}\n")
    with pytest.raises(SpecError, match="device must be cpu or a part of an accelerator"):
        load_prices(mine)
    # the cost figure names only the variants it drew: v0.7's ResNet section listed all
    # six systems under three points, the V100s' left unpriced
    from dmlbench.report.breakdown_figures import cost

    v100 = dataclasses.replace(
        stored_run("v100", 2, tta=3600.0, exchange="ddp"), summary=RunSummary(device="V100")
    )
    table = analysis.scaling_table(frames.runs_frame([cpu, v100]), price=builtin)
    (legend,) = cost(table, "p", "t").legends  # below the axes, as every figure's
    assert [text.get_text() for text in legend.get_texts()] == ["exchange=allreduce"]


def test_weak_scaling_and_baseline_is_the_smallest_count() -> None:
    runs = [
        stored_run("a", 2, tta=10.0, step_time=0.01),
        stored_run("b", 4, tta=8.0, step_time=0.0125),
        stored_run("c", 8, tta=None),
    ]
    table = analysis.scaling_table(frames.runs_frame(runs))
    assert list(table["scaling"]) == ["weak"] * 3  # local batch fixed: inferred as weak
    assert list(table["baseline_workers"]) == [2, 2, 2]
    assert table["efficiency_step"].iloc[1] == pytest.approx(0.01 / 0.0125)
    assert table["efficiency_tta"].iloc[1] == pytest.approx(10 / 8)
    assert math.isnan(table["speedup_tta"].iloc[2])  # not converged: no speedup, shown as such
    assert table["converged"].iloc[2] == 0 and table["runs"].iloc[2] == 1


def test_recorded_scaling_mode_wins_over_inference() -> None:
    runs = [
        stored_run("a", 1, tta=10.0, scaling="strong", global_batch=32),
        stored_run("b", 2, tta=5.0, scaling="strong", global_batch=32),
    ]
    table = analysis.scaling_table(frames.runs_frame(runs))
    assert list(table["scaling"]) == ["strong", "strong"]
    assert table["efficiency_tta"].iloc[1] == pytest.approx(1.0)


def test_variants_separate_what_else_differs() -> None:
    runs = [
        stored_run(f"{e}{w}", w, tta=10.0 / w, exchange=e)
        for e in ("allreduce", "ddp")
        for w in (1, 2)
    ]
    frame = frames.runs_frame(runs)
    assert sorted(set(frame["variant"])) == ["exchange=allreduce", "exchange=ddp"]
    table = analysis.scaling_table(frame)
    assert len(table) == 4 and set(table["speedup_tta"]) == {1.0, 2.0}


def test_an_option_older_runs_lack_is_no_variant_at_its_default() -> None:
    """Runs stored before ``noise_scale`` existed lack the key: beside newer runs at its
    default they are one variant; a newer run that set it is another."""
    import dataclasses

    old = stored_run("old", 2, tta=5.0)
    new = stored_run("new", 2, tta=5.0, seed=1)
    new = dataclasses.replace(new, spec={**new.spec, "noise_scale": "auto"})
    assert set(frames.runs_frame([old, new])["variant"]) == {""}
    off = dataclasses.replace(new, run_id="off", spec={**new.spec, "noise_scale": False})
    labels = frames.runs_frame([old, new, off]).set_index("run_id")["variant"]
    assert labels["off"] == "noise_scale=false" and labels["old"] == "noise_scale=null"


def test_a_dask_fits_summary_says_its_workers_are_the_most_it_may_use() -> None:
    """`dask fit --max-workers 2` whose second worker never joined read "digits-mlp · 2
    workers" above "up to 1 worker"."""
    import dataclasses

    from dmlbench.cli.views.summary import run_summary

    fit = stored_run("fit", 2, tta=5.0, exchange="dask-centralised")
    summary = RunSummary.model_validate({"engine": "dask", "most_workers": 1})
    console = Console(width=200, record=True)
    console.print(run_summary(dataclasses.replace(fit, summary=summary)))
    assert "t · up to 2 workers · closed division" in console.export_text()
    console.print(run_summary(stored_run("torch", 2, tta=5.0)))
    assert "t · 2 workers · closed division" in console.export_text()
    grown = {"engine": "dask", "most_workers": 2, "throughput": 9e3, "largest_batch": 1437}
    summary = RunSummary.model_validate({**grown, "worker_s": 0.35})
    console.print(run_summary(dataclasses.replace(fit, summary=summary)))
    said = console.export_text()
    assert "batch 64 → 1,437, up to 2 workers); 0.35 worker-seconds asked of its cluster" in said
    # the fit's own notes (a lost worker, workers that never joined), the first three
    noted = RunSummary.model_validate({**grown, "notes": [f"update {i}: lost" for i in range(5)]})
    console.print(run_summary(dataclasses.replace(fit, summary=noted)))
    said = console.export_text()
    assert "update 2: lost" in said and "update 3: lost" not in said
    assert "and 2 more (`dmlbench results RUN --json`)" in said


def test_an_interrupted_runs_summary_says_how_far_it_got() -> None:
    """Ctrl-C in a sweep: the interrupted run's summary read "22.00 epochs, 484 steps, 0
    samples in —". Without a run_stop, how far it got is what its last evaluation saw."""
    from dmlbench.cli.views.summary import run_summary
    from dmlbench.results.events import Event
    from dmlbench.results.summary import summarize

    def event(key: str, value: Any = None, **metadata: Any) -> Event:
        return {"key": key, "value": value, "time_ms": 0, "metadata": metadata}

    last = {"epoch_num": 2.0, "step": 44, "samples_count": 2816, "eval_loss": 0.2}
    events = [
        event("run_start", global_batch=64, target=0.99),
        event("eval_accuracy", 0.95, **last, elapsed_s=0.7, compute_elapsed_s=0.6),
    ]
    run = dataclasses.replace(
        stored_run("stopped", 2, tta=None, status="interrupted"), summary=summarize(events)
    )
    run = dataclasses.replace(run, samples=2816, elapsed_s=0.7, epochs=2.0, steps=44)
    console = Console(width=200, record=True)
    console.print(run_summary(run))
    shown = console.export_text()
    assert "2.00 epochs, 44 steps, 2,816 samples in 0.700 s (at its last evaluation)" in shown
    console.print(run_summary(stored_run("done", 2, tta=5.0)))
    assert "(at its last evaluation)" not in console.export_text().split("done")[-1]


def test_a_one_step_run_s_summary_says_step_not_steps() -> None:
    """`--set max_epochs=0.001` trained one step: the summary read "1 steps" and "first 0
    steps excluded as warm-up" (and a worker alone, "over 1 ranks")."""
    from dmlbench.cli.views.summary import run_summary

    run = stored_run("short", 1, tta=None)
    phases = [{"forward": 1.0, "backward": 1.0, "comm": 0.0}]
    summary = run.summary.model_copy(
        update={"warmup_steps_excluded": 0, "throughput": 9e3, "phases_steady": phases}
    )
    run = dataclasses.replace(run, summary=summary, steps=1, samples=1, epochs=0.05)
    console = Console(width=200, record=True)
    console.print(run_summary(run))
    shown = console.export_text()
    assert "0.05 epochs, 1 step, 1 sample in" in shown
    assert "no step excluded as warm-up" in shown and "first 0" not in shown
    assert "phases mean/max over 1 rank " in shown
    # its status in words, as the results table words it (it read "target_not_reached"),
    # in the report's list of runs too
    assert "target not reached" in shown and "target_not_reached" not in shown
    from dmlbench.report.html_tables import runs_view

    (listed,) = runs_view(frames.runs_frame([run])).rows
    assert "target not reached" in listed.cells
    from dmlbench.report.html import render_html  # and its spec's heading, at the end

    page = render_html([], [run], store="s", budget_s=None, price=None)
    assert "seed 0 · target not reached</summary>" in page


def test_the_reports_runs_keep_a_variants_repeats_together() -> None:
    """v0.7's systems at 8 devices were listed by seed: A, B, A, B, ... ."""
    from dmlbench.report.html_tables import runs_view

    runs = [
        stored_run(name, 2, tta=1.0, seed=seed, exchange=exchange)
        for name, seed, exchange in (
            ("a0", 0, "allreduce"),
            ("d1", 1, "ddp"),
            ("a2", 2, "allreduce"),
        )
    ]
    listed = [row.cells[0].text for row in runs_view(frames.runs_frame(runs)).rows]
    assert listed == ["a0", "a2", "d1"]


def test_a_throughput_runs_step_and_batch_are_written_as_every_count_is() -> None:
    """ImageNet's step on a CPU read "2409.11 ms per step (global batch 4096", where
    every table writes 2,409.11 and 4,096."""
    from dmlbench.cli.views.summary import run_summary

    run = stored_run("slow", 1, tta=None, local_batch=4096, step_time=2.40911)
    summary = run.summary.model_copy(update={"warmup_steps_excluded": 5, "throughput": 1700.2})
    console = Console(width=200, record=True)
    console.print(run_summary(dataclasses.replace(run, summary=summary)))
    assert "1,700 samples/s, 2,409.11 ms per step (global batch 4,096;" in console.export_text()


def test_the_report_and_the_summary_star_the_same_runs_oversubscribed() -> None:
    """The report starred any run of more workers than one host's cores; the summary
    counted a node's. Two real nodes of 2 workers on 2-core hosts shared no core, and a
    GPU run's workers wait for their GPU, not a core: the report starred both."""
    from dmlbench.cli.views.summary import run_summary

    def on(run: RunRecord, **summary: Any) -> RunRecord:
        spec = {**run.spec, "nodes": 2, "nproc_per_node": 2}
        return dataclasses.replace(run, spec=spec, summary=RunSummary.model_validate(summary))

    two_nodes = on(stored_run("real", 4, tta=1.0), nodes=2, nproc_per_node=2)
    emulated = on(stored_run("emul", 4, tta=1.0), nodes=2, nproc_per_node=2, emulated_nodes=True)
    gpu = dataclasses.replace(
        stored_run("gpu", 4, tta=1.0), summary=RunSummary.model_validate({"device": "cuda:0"})
    )
    runs = [two_nodes, emulated, gpu]
    starred = frames.runs_frame(runs).set_index("run_id")["oversubscribed"].to_dict()
    assert starred == {"real": False, "emul": True, "gpu": False}
    for run in runs:
        console = Console(width=200, record=True)
        console.print(run_summary(run))
        assert ("oversubscribed" in console.export_text()) is starred[run.run_id]


def test_a_dask_fit_s_start_up_says_it_started_the_workers() -> None:
    """A Dask fit's start-up starts its cluster's workers and sends them the data; its
    summary called that "data load + model build", as a torch run's (whose workers
    were started before it)."""
    from dmlbench.cli.views.summary import run_summary

    def start_up(run: RunRecord) -> str:
        console = Console(width=200, record=True)
        console.print(run_summary(run))
        return next(line for line in console.export_text().splitlines() if "start-up" in line)

    run = stored_run("torch", 2, tta=1.0)
    run = dataclasses.replace(run, summary=run.summary.model_copy(update={"init_s": 3.0}))
    assert "data load + model build (before the clock starts)" in start_up(run)
    fit = run.summary.model_copy(update={"engine": "dask"})
    shown = start_up(dataclasses.replace(run, summary=fit))
    assert "Dask workers started, data sent, model built on them" in shown


def test_a_section_a_runs_spec_lacks_is_no_part_of_its_label() -> None:
    """A torch run beside a Dask fit read "delay=null factor=null engine=null ...": every
    key of the fit's ``dask`` section, which the torch run's spec has not."""
    import dataclasses

    torch_run = stored_run("torch", 2, tta=5.0)
    fit = stored_run("fit", 2, tta=6.0, seed=1, exchange="dask-centralised")
    dask = {"engine": "centralised", "damper": {"name": "GeoDamp", "delay": 2.0}}
    fit = dataclasses.replace(fit, spec={**fit.spec, "dask": dask})
    labels = frames.runs_frame([torch_run, fit]).set_index("run_id")["variant"]
    assert labels["torch"] == "exchange=allreduce"
    assert labels["fit"] == "exchange=dask-centralised"
    # two fits beside it: what tells the fits apart, not every key of their section
    # (each read "delay=... name=... engine=centralised" though only the damper differed)
    other = stored_run("other", 2, tta=7.0, seed=2, exchange="dask-centralised")
    constant = {"engine": "centralised", "damper": {"name": "Constant", "delay": None}}
    other = dataclasses.replace(other, spec={**other.spec, "dask": constant})
    labels = frames.runs_frame([torch_run, fit, other]).set_index("run_id")["variant"]
    assert labels["torch"] == "exchange=allreduce"
    assert labels["fit"] == "exchange=dask-centralised delay=2.0 name=GeoDamp"
    assert labels["other"] == "exchange=dask-centralised delay=null name=Constant"
    # a fit's spec names its global batch, a torch run's leaves it to follow (null): the
    # torch run read "exchange=allreduce global_batch=null"
    torch_run = dataclasses.replace(torch_run, spec={**torch_run.spec, "global_batch": None})
    labels = frames.runs_frame([torch_run, fit]).set_index("run_id")["variant"]
    assert labels["torch"] == "exchange=allreduce"


def test_disturbed_runs_are_left_out_of_timings_and_speedup_unless_asked() -> None:
    # the 1-worker baseline shared the machine: 5× slower steps, a fake 5× speedup
    runs = [
        stored_run("a0", 1, tta=50.0, step_time=0.05, disturbed=True),
        stored_run("b0", 2, tta=6.0, step_time=0.012),
        stored_run("b1", 2, tta=30.0, step_time=0.06, seed=1, disturbed=True),
        stored_run("c0", 4, tta=4.0, step_time=0.016),
    ]
    table = analysis.scaling_table(frames.runs_frame(runs))
    one, two = table.iloc[0], table.iloc[1]
    assert (one["disturbed"], one["timed_disturbed"]) == (1, True)
    assert one["tta_mean"] == pytest.approx(50.0)  # no quiet repeat: shown, daggered
    assert (two["disturbed"], two["timed_disturbed"]) == (1, False)
    assert two["tta_mean"] == pytest.approx(6.0) and two["runs"] == 2  # the quiet repeat
    assert table["speedup_tta"].isna().all() and table["efficiency_step"].isna().all()
    counted = analysis.scaling_table(frames.runs_frame(runs), include_disturbed=True)
    assert counted["tta_mean"].iloc[1] == pytest.approx(18.0)
    assert counted["speedup_tta"].iloc[2] == pytest.approx(50.0 / 4.0)
    # with a quiet baseline the quiet points get their speedup, the disturbed one none
    runs[0] = stored_run("a0", 1, tta=10.0, step_time=0.01)
    runs[3] = stored_run("c0", 4, tta=40.0, step_time=0.05, disturbed=True)
    table = analysis.scaling_table(frames.runs_frame(runs))
    assert table["speedup_tta"].iloc[1] == pytest.approx(10 / 6)
    assert math.isnan(table["speedup_tta"].iloc[2])
    from dmlbench.report.tables import disturbed_note

    assert "† disturbed: at 4 workers" in disturbed_note(table)
    assert disturbed_note(table[table["workers"] < 4]) is None


def test_accuracy_after_time_uses_only_evaluations_within_the_budget() -> None:
    runs = [
        stored_run("a", 1, tta=3.0, evals=[(1.0, 0.5), (2.0, 0.7), (3.0, 0.91)]),
        stored_run("b", 2, tta=None, evals=[(4.0, 0.6)]),
    ]
    evals = frames.evals_frame(runs)
    aat = analysis.accuracy_after_time(evals, 2.5)
    assert aat["a"] == pytest.approx(0.7) and math.isnan(aat["b"])
    table = analysis.scaling_table(frames.runs_frame(runs), budget_s=10, evals=evals)
    assert list(table["aat_mean"]) == pytest.approx([0.91, 0.6])


def test_oversubscription_is_read_from_the_recorded_cores() -> None:
    frame = frames.runs_frame([stored_run("a", 2, tta=1.0), stored_run("b", 4, tta=1.0)])
    assert list(frame["oversubscribed"]) == [False, True]
    assert isinstance(frame, pd.DataFrame)


def test_worker_counts_sort_as_numbers() -> None:
    runs = [stored_run(f"r{w}", w, tta=10.0, cores=64) for w in (16, 2, 4)]
    table = analysis.scaling_table(frames.runs_frame(runs))
    assert list(table["workers"]) == [2, 4, 16]  # as strings this would be 16, 2, 4
    assert list(table["baseline_workers"]) == [2, 2, 2]


def test_variants_sort_by_the_numbers_in_them() -> None:
    """A local-batch sweep (`bench curve`) listed 16 before 4 and 8."""
    runs = [stored_run(f"b{b}", 1, tta=1.0, local_batch=b) for b in (16, 4, 128, 8)]
    table = analysis.scaling_table(frames.runs_frame(runs))
    assert list(table["variant"]) == [f"global_batch={b} local_batch={b}" for b in (4, 8, 16, 128)]


def test_price_table_is_data_and_refuses_bad_entries(tmp_path) -> None:
    from dmlbench.errors import SpecError
    from dmlbench.prices import choose_price

    assert choose_price().name == "gcp-n1-standard-4"
    assert choose_price("0.5").per_worker_hour == 0.5
    assert choose_price("gcp-n1-standard-4-t4").per_worker_hour > choose_price().per_worker_hour
    with pytest.raises(SpecError, match="no price named 'aws-x'"):
        choose_price("aws-x")
    table = tmp_path / "prices.yaml"
    table.write_text("mine: {per_worker_hour: 1.25, currency: EUR}\n")
    assert choose_price(prices_file=table).label == "mine at 1.25 EUR/worker-hour"
    table.write_text("mine: {per_worker_hour: cheap}\n")
    with pytest.raises(SpecError, match="needs a numeric per_worker_hour"):
        choose_price(prices_file=table)
    table.write_text("mine: {per_worker_hour: 1.25, currenc: EUR}\n")  # costed in USD
    with pytest.raises(SpecError, match=r"'mine': unknown key 'currenc' \(did you mean 'currency'"):
        choose_price(prices_file=table)
    # issue 53: nan, -1 and inf were taken (and --json then printed a bare NaN)
    for bad in ("nan", "-1", "inf", "1e300"):
        with pytest.raises(SpecError, match=re.escape(f"--price: {float(bad):g} is no price")):
            choose_price(bad)
    table.write_text("mine: {per_worker_hour: .nan}\n")
    with pytest.raises(SpecError, match="entry 'mine': nan is no price"):
        choose_price(prices_file=table)


def test_one_number_format_for_every_table() -> None:
    from dmlbench.report import formats

    assert [formats.seconds(v) for v in (0.1234, 4.567, 1234.5, math.inf)] == [
        "0.123",
        "4.57",
        "1,234.5",
        "∞",
    ]
    assert formats.seconds(12.34, unit=True) == "12.3 s"
    assert formats.seconds(7200, unit=True) == "2.00 h"
    assert formats.seconds(2115.44, unit=True) == "2,115 s"  # no tenth below its figures
    assert formats.seconds(2115.44) == "2,115.4"
    for absent in (None, math.nan, pd.NA):
        assert formats.seconds(absent) == formats.fmt(absent) == formats.percent(absent) == "—"
    assert formats.mean_std(12.0, 2.0) == "12.0 ± 2.00" and formats.mean_std(12.0, None) == "12.0"
    assert formats.milliseconds(0.00123) == "1.23" and formats.percent(0.971) == "97.1%"
    assert [formats.microseconds(v) for v in (4.2e-6, 0.0845, 0.14163, 0.8407, 12.3456)] == [
        "4",
        "84,500",
        "142,000",
        "841,000",
        "12,300,000",
    ]
    assert [formats.plural(n, "worker") for n in (1, 2, 1024)] == [
        "1 worker",
        "2 workers",
        "1,024 workers",
    ]
    assert [formats.human_bytes(n) for n in (512, 1536, 2**28, 2**40)] == [
        "512 B",
        "1.5 KiB",
        "256 MiB",
        "1024 GiB",
    ]


def test_report_page_escapes_what_runs_recorded() -> None:
    """Autoescaped template: an error or a spec value cannot inject markup into a report."""
    from dataclasses import replace

    from dmlbench.report.html import render_html

    hostile = "<img src=x onerror=alert(1)>"
    run = replace(stored_run("r<1>", 1, tta=None), error=hostile, spec={"task": hostile})
    page = render_html([], [run], store="s&t", budget_s=None, price=None)
    assert hostile not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert 'id="run-r&lt;1&gt;"' in page and "<code>s&amp;t</code>" in page
    assert "<script" not in page and "No runs stored yet" in page


def test_runs_that_failed_or_were_interrupted_are_said_under_the_table() -> None:
    """A sweep stopped by Ctrl-C printed its point as `0/1` and a row of dashes, with
    nothing under the table to say why. Each table says which runs it counts and does
    not time, in number; the report adds that they are listed."""
    from dmlbench.report.html import build_sections

    def note(*statuses: str) -> str | None:
        runs = [stored_run("a", 1, tta=1.0)]
        runs += [stored_run(f"x{i}", 2, tta=None, status=s) for i, s in enumerate(statuses)]
        return notes.unfinished_note(frames.runs_frame(runs))

    assert note() is None
    assert note("target_not_reached") is None  # finished: timed, not converged
    interrupted = "1 run was interrupted; it counts as not reached (k/n) and not in the timings."
    assert note("interrupted") == interrupted
    assert note("failed", "failed").startswith("2 runs failed; they count")
    assert note("failed", "interrupted", "interrupted").startswith(
        "1 run failed and 2 were interrupted; they count"
    )
    runs = [stored_run("a", 1, tta=1.0), stored_run("b", 2, tta=None, status="interrupted")]
    row = analysis.scaling_table(frames.runs_frame(runs)).set_index("workers").loc[2]
    assert (row["runs"], row["finished"], row["converged"]) == (1, 0, 0)
    (section,) = build_sections(runs)
    assert f"{interrupted} It is listed below." in section.notes


def test_runs_still_running_are_not_counted_and_the_report_says_so() -> None:
    """A Slurm job array's task printed its sweep's table while the other task's run of
    a point was running: "conv 1/2", as if one of two had missed the target. A run still
    running is not a result yet: it is left out of the table and a note says so, and a
    section whose runs are all running renders with that note and no table."""
    from dmlbench.report.html import build_sections, render_html

    running = [stored_run(r, w, tta=None, status="running") for r, w in (("b", 1), ("c", 2))]
    runs = [stored_run("a", 1, tta=1.0), *running]
    frame = frames.runs_frame(runs)
    table = analysis.scaling_table(frame)
    assert list(table["workers"]) == [1] and list(table["runs"]) == [1]  # not 2, not a row at 2
    assert notes.running_note(frame) == "2 runs are still running and not counted yet."
    assert notes.running_note(frames.runs_frame(runs[:2])).startswith("1 run is still")
    assert notes.running_note(frames.runs_frame(runs[:1])) is None
    (section,) = build_sections(runs)
    assert "2 runs are still running and not counted yet." in section.notes
    assert not any("failed or" in note for note in section.notes)  # running is not failed
    (alone,) = build_sections(running)  # nothing finished yet
    assert alone.table.empty and not alone.figures
    page = render_html([alone], running, store="s", budget_s=None, price=None)
    assert "still running and not counted yet" in page and "Scaling table" not in page


def test_results_table_shows_the_network_when_a_run_had_one() -> None:
    from dataclasses import replace

    from rich.console import Console

    from dmlbench.cli.views.tables import runs_table

    def text(runs: list[RunRecord]) -> str:
        console = Console(width=100, record=True)
        console.print(runs_table(runs))
        return console.export_text()

    plain = stored_run("plain", 1, tta=1.0)
    assert "network" not in text([plain])  # nothing emulated: nothing to read
    assert text([plain]).split()[:3] == ["1", "stored", "run"]  # not "1 stored runs"
    wan = replace(stored_run("wan", 2, tta=9.0), network="wan-20ms · 100 Mbit/s, 20 ms")
    shown = text([plain, wan])
    assert "on wan-20ms" in shown and "100 Mbit/s" not in shown  # under the task
    assert "on NAME: under an emulated network" in shown
    missed = text([stored_run("miss", 1, tta=None)])
    assert "no target" in missed and "target_not_reached" not in missed  # fits 80 columns
    # a Dask fit: up to N workers, its batch as it grew (it read "2 32/32", as if fixed)
    dask = stored_run("grown", 2, tta=1.0)
    grown = dask.summary.model_copy(update={"engine": "dask", "largest_batch": 128})
    shown = text([plain, replace(dask, summary=grown)])
    assert "≤2 32/64→128" in shown and "a Dask fit, on up to N workers" in shown
    assert "≤" not in text([plain])


def test_compare_marks_a_dask_fit_as_results_does() -> None:
    """`compare` and the report read a Dask fit as "2 32/32", as if two workers had
    trained at a fixed batch, where `results` read "≤2 32/32→64"."""
    from dataclasses import replace

    from rich.console import Console

    from dmlbench.cli.views.tables import scaling_tables
    from dmlbench.report.tables import SCALING_COLUMNS

    torch_run = stored_run("torch", 2, tta=1.0, evals=[(1.0, 0.95)])
    fit = stored_run("fit", 2, tta=2.0, seed=1, exchange="dask-centralised", evals=[(2.0, 0.95)])
    grown = fit.summary.model_copy(update={"engine": "dask", "largest_batch": 128})
    fit = replace(fit, summary=grown)
    frame = frames.runs_frame([torch_run, fit])
    table = analysis.scaling_table(frame)
    console = Console(width=80, record=True)
    for rich_table in scaling_tables(table):
        console.print(rich_table)
    shown = console.export_text()
    assert "≤2" in shown and "32/64→128" in shown and "a Dask fit, on up to N" in shown
    cells = {title: fn for _, title, fn in SCALING_COLUMNS}  # the report's columns
    by_variant = table.set_index("variant")
    fitted = by_variant.loc["exchange=dask-centralised"]
    plain = by_variant.loc["exchange=allreduce"]
    assert (cells["N"](fitted), cells["b / B"](fitted)) == ("≤2", "32 / 64→128")
    assert (cells["N"](plain), cells["b / B"](plain)) == ("2", "32 / 64")
    from dmlbench.report.html_tables import runs_view  # the report's list of runs, too

    listed = {row.cells[0].text: row.cells[1] for row in runs_view(frame).rows}
    assert listed == {"torch": "2", "fit": "≤2"}
    from dmlbench.report.figures import curves  # and the curves' legend

    evals = frames.evals_frame([torch_run, fit]).merge(frame[["run_id", "variant"]])
    legend = {line.get_label() for line in curves(evals, table, 0.9, "t").axes[0].get_lines()}
    assert {"exchange=allreduce · 2 workers", "exchange=dask-centralised · ≤2 workers"} <= legend
    # a fit whose batch did not grow shows none
    still = fit.summary.model_copy(update={"largest_batch": 64})
    table = analysis.scaling_table(frames.runs_frame([replace(fit, summary=still)]))
    assert cells["b / B"](table.iloc[0]) == "32 / 64"


def test_results_table_keeps_every_column_at_80_columns_beside_imported_runs() -> None:
    """`dmlbench results > file` renders 80 columns. With MLPerf's imported runs (50-
    character names, 4-digit batches, a system as their "network") beside this
    machine's, the table cut figures short ("0.329…") and dropped its last column."""
    from dataclasses import replace

    from rich.console import Console

    from dmlbench.cli.views.tables import runs_table

    own = replace(stored_run("20261128-091818-50323c", 1, tta=0.329), task="digits-mlp")
    long_name = "mlperf-v0.7-nvidia-dgx2h_n32_ngc20.06_mxnet-resnet-0"
    imported = replace(
        stored_run(long_name, 512, tta=2115.4, local_batch=65),
        task="mlperf/resnet",
        network="32xNVIDIA DGX-2H",
        origin={"round": "v0.7"},
        epochs=56.0,
    )
    synthetic = replace(stored_run("20261128-092310-b13d39", 2, tta=None), status="throughput")
    console = Console(width=80, record=True)
    console.print(runs_table([own, imported, synthetic]))
    shown = console.export_text()
    assert all(len(line) <= 80 for line in shown.splitlines())
    assert "…" not in shown  # nothing cut short
    header = next(line for line in shown.splitlines() if line.startswith("run"))
    assert header.split() == ["run", "task", "N", "b/B", "status", "TTA", "best", "ep."]
    assert "20261128-091818-50323c" in shown and "0.329 s" in shown  # this machine's whole
    assert "2,115 s" in shown and "56.0" in shown and "65/33,280" in shown  # a count as every count
    assert "DGX-2H" not in shown  # an imported run's system is its name, not a network
    lines = shown.splitlines()
    width = header.index("task")  # the run column's, where it folds
    assert long_name in "".join(line[:width].strip() for line in lines[lines.index(header) :])
    # one more character (a 16-character task that missed its target, 3-digit N, a
    # 7-character TTA, a network): the statuses wrap, and this machine's ids stay whole
    crowded = [
        replace(own, task="cifar10-resnet20", status="target_not_reached", network="1gbit"),
        replace(imported, workers=768),
        replace(synthetic, status="failed"),
    ]
    console = Console(width=80, record=True)
    console.print(runs_table(crowded))
    shown = console.export_text()
    assert all(len(line) <= 80 for line in shown.splitlines()) and "…" not in shown
    header = next(line for line in shown.splitlines() if line.startswith("run"))
    assert header.split() == ["run", "task", "N", "b/B", "status", "TTA", "best", "ep."]
    assert "20261128-091818-50323c" in shown and "20261128-092310-b13d39" in shown
    assert "failed" in shown and "on 1gbit" in shown
    status = header.index("status")
    assert any(line[status:].startswith("no ") for line in shown.splitlines())
    wide = Console(width=120, record=True)  # a wide terminal: nothing wraps
    wide.print(runs_table(crowded, width=120))
    assert "no target" in wide.export_text()


def test_progress_counts_steps_before_the_first_epoch_ends() -> None:
    import io

    from rich.console import Console

    from dmlbench.cli.views.progress import RunProgress

    bar = RunProgress(Console(file=io.StringIO()), "t")
    bar([{"key": "run_start", "value": None, "metadata": {"step_limit": 300}}])
    bar([{"key": "train_progress", "value": 150, "metadata": {"epoch_num": 1}}])
    task = bar.progress.tasks[0]
    assert (task.completed, task.total, task.fields["steps"]) == (150, 300, "150/300 steps")
    bar([{"key": "run_stop", "value": None, "metadata": {"steps": 212}}])  # stopped early
    assert bar.progress.tasks[0].fields["steps"] == "212/212 steps"


def test_progress_shows_the_last_word_and_when_the_run_evaluates() -> None:
    """The bar shows rank 0's word (loss, tokens or samples a second, MFU, memory) and an
    evaluating state; an older log's word, with the step only, shows no figures."""
    import io

    from rich.console import Console

    from dmlbench.cli.views.progress import RunProgress

    bar = RunProgress(Console(file=io.StringIO()), "t")
    bar([{"key": "run_start", "value": None, "metadata": {"step_limit": 300}}])
    bar([{"key": "train_progress", "value": 5, "metadata": {"epoch_num": 1}}])
    assert bar.progress.tasks[0].fields["rate"] == ""
    word = {"train_loss": 2.3456, "samples_per_s": 812.25, "mfu": 0.123, "memory_bytes": 3 << 20}
    bar([{"key": "train_progress", "value": 10, "metadata": {"epoch_num": 1, **word}}])
    fields = bar.progress.tasks[0].fields
    assert fields["rate"] == "train loss 2.346 · 812.2 samples/s · MFU 12.3% · 3 MiB", fields
    words = {**word, "tokens_per_s": 104_000.0}
    bar([{"key": "train_progress", "value": 20, "metadata": {"epoch_num": 1, **words}}])
    assert "104,000 tokens/s" in bar.progress.tasks[0].fields["rate"]
    assert "samples/s" not in bar.progress.tasks[0].fields["rate"]
    bar([{"key": "eval_start", "value": None, "metadata": {"epoch_num": 1.0}}])
    assert bar.progress.tasks[0].fields["status"] == "evaluating"
    bar.progress.console.print(bar.progress.get_renderable())  # every column finds its fields


def test_progress_at_80_columns_keeps_the_title_the_steps_and_the_clock() -> None:
    """At 80 columns a GPT run's bar read "k… 640/1… loss 4.253 · … (best l…": rich
    cut every column to fit; then, wrapped in columns of their own, the word and the
    status took six lines. Now the title, steps and clock make a line, and the status
    and the word the lines below it, at the terminal's width."""
    import io

    from rich.console import Console

    from dmlbench.cli.views.progress import RunProgress

    out = io.StringIO()
    bar = RunProgress(Console(file=out, width=80), "kjv-gpt × 2")
    bar([{"key": "run_start", "value": None, "metadata": {"step_limit": 1234, "goal": "loss"}}])
    word = {"train_loss": 4.2531, "tokens_per_s": 14331.0, "mfu": 0.566, "memory_bytes": 9 << 24}
    bar([{"key": "train_progress", "value": 640, "metadata": {"epoch_num": 1, **word}}])
    bar([{"key": "eval_accuracy", "value": 0.3, "metadata": {"eval_loss": 4.331, "epoch_num": 1}}])
    bar.progress.console.print(bar.progress.get_renderable())
    text = out.getvalue()
    first = text.splitlines()[0]
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    assert first.startswith("kjv-gpt × 2") and "640/1,234 steps" in first
    assert first.rstrip().endswith("0:00:00")
    assert "14,331" in text and "4.331)" in text  # wrapped, not cut
    below = " ".join(line.strip() for line in text.splitlines()[1:])
    assert below.startswith("epoch 1: test loss 4.331 (best 4.331) · train loss 4.253 · ")
    assert len(text.splitlines()) <= 3, text
    # which loss is which: the word's is training's, the evaluation's is the test loss
    fields = bar.progress.tasks[0].fields
    assert fields["rate"].startswith("train loss 4.253 · ")
    assert fields["status"] == "epoch 1: test loss 4.331 (best 4.331)"


def test_progress_clock_runs_from_run_start_to_run_stop() -> None:
    """The bar's time is the run's: not start-up, and not frozen at the last step while
    the final evaluation runs (a 2:07 bar beside a 169.4 s summary)."""
    import io
    import time

    from rich.console import Console

    from dmlbench.cli.views.progress import RunProgress

    bar = RunProgress(Console(file=io.StringIO()), "t")
    time.sleep(0.3)  # start-up: data loading, workers starting
    bar([{"key": "run_start", "value": None, "metadata": {"step_limit": 10}}])
    bar.progress.console.print(bar.progress.get_renderable())  # every column finds its fields
    task = bar.progress.tasks[0]
    assert task.elapsed is not None and task.elapsed < 0.3
    bar([{"key": "train_progress", "value": 10, "metadata": {"epoch_num": 1}}])
    full = task.elapsed
    time.sleep(0.2)  # the last step is done; the final evaluation runs
    assert task.elapsed >= full + 0.2
    bar([{"key": "run_stop", "value": None, "metadata": {"steps": 10}}])
    stopped = task.elapsed
    time.sleep(0.1)
    assert task.elapsed == stopped  # frozen at the run's end


def _adhoc_runs() -> list[RunRecord]:
    """Ad-hoc runs of one task: two settings differing in many keys, one worker count,
    one evaluation each (as short runs have)."""
    runs = []
    for i, (exchange, epochs) in enumerate([("allreduce", 40.0), ("ddp", 3.0)]):
        run = stored_run(
            f"r{i}", 2, tta=5.0 + i, exchange=exchange, sweep=None, evals=[(5.0 + i, 0.95)]
        )
        spec = {
            **run.spec,
            "max_epochs": epochs,
            "stop_at_target": i == 0,
            "network": {"profile": "wan-20ms" if i else None},
        }
        network = "wan-20ms · 1gbit" if i else "none"
        runs.append(dataclasses.replace(run, spec=spec, network=network))
    return runs


def test_letters_past_z_are_named_as_spreadsheet_columns() -> None:
    """v0.7's 30 ResNet submissions: the 27th was `V27`, beside the 22nd, `V`."""
    labels = [f"system=a_long_system_name_{i:02d}" for i in range(30)]
    names = list(variants.short_labels(labels, longest=8).values())
    assert names[:3] == ["A", "B", "C"] and names[25:] == ["Z", "AA", "AB", "AC", "AD"]
    assert len(set(names)) == 30
    many = list(variants.short_labels([f"label number {i:04d}" for i in range(703)], 8).values())
    assert many[701:] == ["ZZ", "AAA"] and len(set(many)) == 703


def test_long_variant_labels_become_letters_with_a_legend_table() -> None:
    frame = frames.runs_frame(_adhoc_runs())
    assert list(frame["variant"]) == [
        "exchange=allreduce max_epochs=40.0 stop_at_target=true network=none",
        "exchange=ddp max_epochs=3.0 stop_at_target=false network=wan-20ms",
    ]  # the network's settings are one key, named by its profile
    assert list(variants.short_labels(frame["variant"]).values()) == ["A", "B"]
    legend = variants.variant_legend(frame["variant"])
    assert list(legend.columns) == [
        "variant",
        "exchange",
        "max_epochs",
        "stop_at_target",
        "network",
    ]
    assert list(legend["network"]) == ["none", "wan-20ms"]
    assert variants.variant_legend(["exchange=ddp", "exchange=allreduce"]).empty  # short


def test_pngs_of_figures_with_variant_letters_come_with_the_key(tmp_path: Path) -> None:
    """`report --png` for a paper: figures named "A" and "B" came without what A and B
    are, which only the HTML report's table said."""
    import csv

    from dmlbench.prices import choose_price
    from dmlbench.report.html import build_sections, save_pngs

    sections = build_sections(_adhoc_runs(), price=choose_price(None, None))
    written = save_pngs(sections, tmp_path / "png")
    (key,) = [path for path in written if path.suffix == ".csv"]
    assert key.name == f"{sections[0].slug}-variants.csv"
    rows = list(csv.DictReader(key.open()))
    assert [(r["variant"], r["exchange"], r["network"]) for r in rows] == [
        ("A", "allreduce", "none"),
        ("B", "ddp", "wan-20ms"),
    ]
    assert all(path.suffix == ".png" for path in written if path != key)
    # a value a spreadsheet would run as a formula is written as text, as export does
    notes = ("=HYPERLINK(1)", "plain")
    noted = [
        dataclasses.replace(run, spec={**run.spec, "note": note})
        for run, note in zip(_adhoc_runs(), notes, strict=True)
    ]
    sections = build_sections(noted, price=choose_price(None, None))
    (key,) = [p for p in save_pngs(sections, tmp_path / "x") if p.suffix == ".csv"]
    assert "'=HYPERLINK(1)" in key.read_text()


def test_report_figures_read_at_a_glance() -> None:
    """No speedup chart for one worker count, a single evaluation drawn as a point, a
    colour per variant, legends outside the plot area, units on the axes."""
    from matplotlib.colors import to_hex

    from dmlbench.prices import choose_price
    from dmlbench.report.html import build_sections

    (section,) = build_sections(_adhoc_runs(), price=choose_price(None, None))
    assert "speedup" not in section.figures and "efficiency" not in section.figures
    curves = section.figures["curves"]
    accuracy = curves.axes[0]
    lines = [line for line in accuracy.get_lines() if len(line.get_xdata()) == 1]
    assert len(lines) == 2 and all(line.get_marker() == "o" for line in lines)
    assert len({to_hex(line.get_color()) for line in lines}) == 2  # one colour per variant
    for name, fig in section.figures.items():
        assert all(ax.get_legend() is None for ax in fig.axes), name  # none over the data
        for ax in fig.axes:
            assert ax.get_ylabel(), name
    assert [t.get_text() for t in curves.legends[0].get_texts()][:2] == [
        "A · 2 workers",
        "B · 2 workers",
    ]
    assert section.figures["cost"].axes[0].get_ylabel() == "cost to target, USD"
    assert "%" in accuracy.get_ylabel()


def test_an_algorithm_sweep_plots_bytes_against_step_time() -> None:
    """Bytes per step on a log axis, a point per algorithm in its colour, labelled with
    its comm share; a report whose runs all send the same bytes has no such figure."""
    from dmlbench.report.html import build_sections

    algorithms = [
        ("allreduce", 40_000.0, 0.012, 0.6),
        ("topk", 800.0, 0.004, 0.2),
        ("signsgd", 1_300.0, 0.005, 0.3),
    ]
    runs = []
    for exchange, sent, step, share in algorithms:
        run = stored_run(
            exchange, 4, tta=5.0, exchange=exchange, step_time=step, comm=(share, share)
        )
        runs.append(
            dataclasses.replace(
                run, summary=run.summary.model_copy(update={"bytes_per_step": sent})
            )
        )
    (section,) = build_sections(runs, price=None)
    (ax,) = section.figures["bytes-vs-step-time"].axes
    assert ax.get_xscale() == "log" and "bytes" in ax.get_xlabel()
    points = sorted((line.get_xdata()[0], line.get_ydata()[0]) for line in ax.get_lines())
    assert points == [(800.0, 4.0), (1_300.0, 5.0), (40_000.0, 12.0)]  # ms per step
    assert sorted(t.get_text() for t in ax.texts) == ["20%", "30%", "60%"]
    assert ax.get_ylim()[1] > 12.0  # room above the slowest point
    fsdp = stored_run("fsdp", 4, tta=5.0, exchange="fsdp", step_time=0.006, comm=(0.1, 0.1))
    fsdp = dataclasses.replace(
        fsdp, summary=fsdp.summary.model_copy(update={"bytes_per_step": None})
    )
    (section,) = build_sections([*runs, fsdp], price=None)
    (ax,) = section.figures["bytes-vs-step-time"].axes
    assert len(ax.get_lines()) == 3 and "bytes not counted: exchange=fsdp" in [
        t.get_text() for t in ax.texts
    ]
    same = [
        dataclasses.replace(r, summary=r.summary.model_copy(update={"bytes_per_step": 100.0}))
        for r in runs
    ]
    (section,) = build_sections(same, price=None)
    assert "bytes-vs-step-time" not in section.figures
    # nor a weak sweep of one algorithm, whose single worker sends nothing
    weak = [stored_run(f"w{n}", n, tta=5.0) for n in (1, 2, 4)]
    weak = [
        dataclasses.replace(
            r,
            summary=r.summary.model_copy(update={"bytes_per_step": 0.0 if r.workers == 1 else 4e4}),
        )
        for r in weak
    ]
    (section,) = build_sections(weak, price=None)
    assert "speedup" in section.figures and "bytes-vs-step-time" not in section.figures


def test_an_algorithm_by_network_sweep_colours_algorithms_and_marks_networks() -> None:
    from dmlbench.report.html import build_sections

    runs = []
    for exchange, sent in [("allreduce", 40_000.0), ("topk", 800.0), ("signsgd", 1_300.0)]:
        for profile in ("none", "100mbit"):
            run = stored_run(f"{exchange}-{profile}", 4, tta=5.0, exchange=exchange)
            spec = {**run.spec, "network": {"profile": None if profile == "none" else profile}}
            summary = run.summary.model_copy(update={"bytes_per_step": sent})
            runs.append(dataclasses.replace(run, spec=spec, network=profile, summary=summary))
    (section,) = build_sections(runs, price=None)
    fig = section.figures["bytes-vs-step-time"]
    (legend,) = fig.legends
    assert sorted(t.get_text() for t in legend.get_texts()) == [
        "allreduce",
        "network=100mbit",
        "network=none",
        "signsgd",
        "topk",
    ]
    (ax,) = fig.axes
    colours = {line.get_xdata()[0]: line.get_color() for line in ax.get_lines()}
    assert len(set(map(str, colours.values()))) == 3  # one colour per algorithm
    assert len({line.get_marker() for line in ax.get_lines()}) == 2  # one marker per network


def test_best_of_keeps_each_worker_counts_fastest_variant() -> None:
    """mlbench's protocol: per worker count, the variant (here the exchange) that reaches
    the target first; speedup is then against the best at the fewest workers."""
    times = {
        ("allreduce", 1): [10.0, 11.0, 12.0],
        ("ddp", 1): [14.0, 15.0, 16.0],
        ("allreduce", 2): [9.0, 9.0, None],
        ("ddp", 2): [6.0, 7.0, 8.0],
    }
    runs = [
        stored_run(f"{e}{w}{s}", w, tta=t, seed=s, exchange=e)
        for (e, w), ts in times.items()
        for s, t in enumerate(ts)
    ]
    table = analysis.scaling_table(frames.runs_frame(runs))
    best = analysis.best_of(table, "time_to_accuracy", ["workers"])
    assert list(best["workers"]) == [1, 2]
    # 2 workers: allreduce's mean over its converged runs is 9, but one run missed: its
    # olympic mean is 9 (the miss dropped as slowest) against ddp's 7
    assert list(best["variant"]) == ["exchange=allreduce", "exchange=ddp"]
    assert best["speedup_tta"].iloc[1] == pytest.approx(11.0 / 7.0)
    most = analysis.best_of(table, "best_metric", ["workers"])
    assert list(most["workers"]) == [1, 2] and len(most) == 2
    everything = analysis.best_of(table, "time_to_accuracy", [])  # one per (task, sweep)
    assert len(everything) == 1 and everything["tta_olympic"].iloc[0] == pytest.approx(7.0)
    # a baseline timed by disturbed runs only gives no speedup here either (it did)
    busy = [dataclasses.replace(r, disturbed=r.workers == 1) for r in runs]
    table = analysis.scaling_table(frames.runs_frame(busy))
    assert table["speedup_tta"].isna().all()
    assert analysis.best_of(table, "time_to_accuracy", ["workers"])["speedup_tta"].isna().all()
    counted = analysis.scaling_table(frames.runs_frame(busy), include_disturbed=True)
    picked = analysis.best_of(counted, "time_to_accuracy", ["workers"], include_disturbed=True)
    assert picked["speedup_tta"].iloc[1] == pytest.approx(11.0 / 7.0)


def test_training_accuracy_and_a_target_loss_are_drawn_where_present() -> None:
    from dmlbench.report.figures import curves

    run = stored_run("r", 2, tta=5.0, evals=[(2.0, 0.8), (4.0, 0.95)])
    trained = dataclasses.replace(
        run,
        evals=[
            dataclasses.replace(e, train_metric=m)
            for e, m in zip(run.evals, (0.85, 0.99), strict=True)
        ],
    )
    frame = frames.runs_frame([trained])
    evals = frames.evals_frame([trained]).merge(frame[["run_id", "variant"]], on="run_id")
    table = analysis.scaling_table(frame)
    fig = curves(evals, table, 0.9, "t", target_loss=0.2828)
    accuracy, loss = fig.axes[:2]
    dotted = [line for line in accuracy.get_lines() if line.get_linestyle() == ":"]
    assert len(dotted) == 1 and list(dotted[0].get_ydata()) == [0.85, 0.99]
    assert [list(line.get_ydata()) for line in loss.get_lines()][-1] == [0.2828, 0.2828]
    assert any("target loss 0.2828" in text.get_text() for text in loss.texts)
    plain = curves(evals.assign(train_metric=None), table, 0.9, "t")
    assert not [line for line in plain.axes[0].get_lines() if line.get_linestyle() == ":"]
    assert len(plain.axes[1].get_lines()) == 1 and not plain.axes[1].texts
    # a run at 100% from its first evaluation: the axis read 96% to 104%
    perfect = stored_run("p", 1, tta=1.0, evals=[(1.0, 1.0)])
    frame = frames.runs_frame([perfect])
    evals = frames.evals_frame([perfect]).merge(frame[["run_id", "variant"]], on="run_id")
    top = curves(evals, analysis.scaling_table(frame), 0.95, "t").axes[0].get_ylim()[1]
    assert 1.0 < top <= 1.01


def test_a_variant_of_a_table_entry_names_the_table() -> None:
    runs = []
    for i, alpha in enumerate((25, 200)):
        run = stored_run(f"a{alpha}", 1, tta=5.0, seed=i)
        recipe = {**run.spec["recipe"], "schedule": {"alpha_by_workers": {"1": alpha}}}
        runs.append(dataclasses.replace(run, spec={**run.spec, "recipe": recipe}))
    labels = list(frames.runs_frame(runs)["variant"])
    assert labels == ["alpha_by_workers.1=25", "alpha_by_workers.1=200"]  # not "1=25"
    assert variants.variant_pairs(labels[0]) == {"alpha_by_workers.1": "25"}
    # an imported run's network is its system, with a space: the report's variants table
    # showed "1xNVIDIA" for "1xNVIDIA DGX-1"
    label = "system=dgx1_ngc20.06_mxnet nodes=1 network=1xNVIDIA DGX-1 local_batch=208"
    assert variants.variant_pairs(label) == {
        "system": "dgx1_ngc20.06_mxnet",
        "nodes": "1",
        "network": "1xNVIDIA DGX-1",
        "local_batch": "208",
    }


def test_throughput_runs_stay_out_of_time_to_accuracy_and_cost() -> None:
    """Issue 56, item 7: a throughput-mode run showed "∞" time to accuracy and a cost to
    finish; beside an accuracy run of the same task it now shows neither."""
    runs = [
        stored_run("acc", 2, tta=5.0),
        stored_run("thr", 4, tta=None, status="throughput"),
    ]
    table = analysis.scaling_table(frames.runs_frame(runs), price=Price("p", 1.0))
    accuracy, throughput = table.iloc[0], table.iloc[1]
    assert accuracy["tta_olympic"] == pytest.approx(5.0) and accuracy["cost_mean"] > 0
    assert throughput["throughput_only"] and math.isnan(throughput["tta_olympic"])
    assert math.isnan(throughput["cost_mean"]) and math.isnan(throughput["cost_to_target"])


def test_a_run_of_another_model_is_labelled_by_its_model_alone() -> None:
    """Issue 56, item 7: a vgg16 run beside ResNet-50's read "depth=null
    zero_init_residual=null options={}"."""
    runs = []
    for i, model in enumerate(
        [
            {"name": "imagenet-resnet", "options": {"depth": 50, "zero_init_residual": True}},
            {"name": "vgg16", "options": {}},
        ]
    ):
        run = stored_run(f"m{i}", 1, tta=5.0, seed=i)
        recipe = {**run.spec["recipe"], "model": model}
        runs.append(dataclasses.replace(run, spec={**run.spec, "recipe": recipe}))
    labels = list(frames.runs_frame(runs)["variant"])
    assert labels == ["model=imagenet-resnet depth=50 zero_init_residual=true", "model=vgg16"]


def test_a_run_of_another_exchange_is_labelled_without_the_others_options() -> None:
    """A report of all-reduce, a Dask fit and topk read "exchange=allreduce ratio=null"."""
    runs = []
    for i, (exchange, options) in enumerate(
        [("allreduce", {}), ("topk", {"ratio": 0.01}), ("powersgd", {"rank": 4})]
    ):
        run = stored_run(f"x{i}", 2, tta=5.0, seed=i, exchange=exchange)
        runs.append(dataclasses.replace(run, spec={**run.spec, "exchange_options": options}))
    labels = list(frames.runs_frame(runs)["variant"])
    assert labels == ["exchange=allreduce", "exchange=topk ratio=0.01", "exchange=powersgd rank=4"]


def _loss_goal(run: RunRecord, losses: list[float]) -> RunRecord:
    """``run`` of a task whose goal is a test loss of 3.9 (kjv-gpt's kind): its
    evaluations have these losses, each at a token accuracy of 16%."""
    pairs = zip(run.evals, losses, strict=True)
    evals = [dataclasses.replace(e, loss=x, metric=0.16) for e, x in pairs]
    spec = {**run.spec, "recipe": {**run.spec["recipe"], "goal": "loss", "target": 3.9}}
    return dataclasses.replace(run, spec=spec, target=3.9, best_metric=0.16, evals=evals)


def test_a_loss_goals_best_is_its_lowest_loss_in_every_view() -> None:
    """Issue 56, item 1: a task whose goal is a loss shows its lowest test loss as its
    best (not its token accuracy), compares on it (the least wins), and its figure
    without a converged run draws losses beside "target loss 3.9", not "target 390%"."""
    from dmlbench.cli.views.tables import runs_table
    from dmlbench.report import figures, tables

    evals = [(10.0, 0.1), (20.0, 0.1)]
    runs = [
        _loss_goal(stored_run("a", 1, tta=None, evals=evals), [4.6, 4.2]),
        _loss_goal(stored_run("b", 2, tta=None, evals=evals), [4.5, 4.4]),
    ]
    assert [run.best for run in runs] == [4.2, 4.4]
    assert [run.best_eval.loss for run in runs if run.best_eval] == [4.2, 4.4]
    accuracy = stored_run("c", 1, tta=1.0)
    assert accuracy.best == 0.91  # an accuracy goal: its best accuracy
    assert accuracy.best_eval is None  # no evaluation stored
    climbing = stored_run("d", 1, tta=None, evals=[(10.0, 0.7), (20.0, 0.5)])
    assert climbing.best_eval is climbing.evals[0]  # an accuracy goal's: the highest
    frame = frames.runs_frame(runs)
    table = analysis.scaling_table(frame)
    assert list(table["best_mean"]) == [4.2, 4.4] and set(table["goal"]) == {"loss"}
    (show,) = [show for key, _, show in tables.SCALING_COLUMNS if key == "best"]
    assert [show(row) for _, row in table.iterrows()] == ["4.200", "4.400"]
    chosen = analysis.best_of(table.assign(workers=1), "best_metric", ["workers"])
    assert list(chosen["best_mean"]) == [4.2]  # the least loss, not the most
    console = Console(width=200, record=True)
    console.print(runs_table(runs))
    shown = console.export_text()
    assert "4.200" in shown and "16.0%" not in shown
    figure = figures.time_to_accuracy(table, "t")
    texts = [t.get_text() for t in figure.legends[0].get_texts()]
    assert "target loss 3.9" in texts and not any("390%" in t for t in texts)
    labels = [t.get_text() for t in figure.axes[0].texts]
    assert labels[0].startswith("4.200")


def test_a_loss_goals_accuracy_after_time_is_its_least_loss_within_the_budget() -> None:
    """`report --budget` on kjv-gpt showed AAT 16.27%: the token accuracy, where the goal
    is a loss. Within the budget a loss goal's best is its least test loss, shown and
    compared as one, and the terminal legend says which the column holds."""
    from dmlbench.cli.views.tables import scaling_tables
    from dmlbench.report import tables

    evals = [(10.0, 0.1), (20.0, 0.1), (30.0, 0.1)]
    runs = [
        _loss_goal(stored_run("a", 1, tta=None, evals=evals), [4.6, 4.2, 3.0]),
        _loss_goal(stored_run("b", 2, tta=None, evals=evals), [4.5, 4.4, 4.1]),
        stored_run("c", 1, tta=None, evals=[(10.0, 0.5), (20.0, 0.7), (30.0, 0.9)]),
    ]
    aat = analysis.accuracy_after_time(frames.evals_frame(runs), 25.0)
    assert list(aat) == pytest.approx([4.2, 4.4, 0.7])  # not 3.0 (too late), not 0.16
    frame = frames.runs_frame(runs[:2])
    table = analysis.scaling_table(frame, budget_s=25, evals=frames.evals_frame(runs[:2]))
    (show,) = [show for key, _, show in tables.SCALING_COLUMNS if key == "aat"]
    assert [show(row) for _, row in table.iterrows()] == ["4.200", "4.400"]
    chosen = analysis.best_of(table.assign(workers=1), "accuracy_after_time", ["workers"])
    assert list(chosen["aat_mean"]) == [4.2]  # the least loss, not the most
    assert analysis.best_order(table, "accuracy_after_time") == "aat_mean, least"  # as said
    mixed = pd.concat([table, table.assign(goal="accuracy")])
    assert analysis.best_order(mixed, "best_metric") == "best_mean, most; a loss goal's least"
    assert analysis.best_order(table, "throughput") == "throughput_mean, most"
    console = Console(width=200, record=True)
    for rich_table in scaling_tables(table, budget_s=25):
        console.print(rich_table)
    assert "AAT: least test loss within 25 s" in console.export_text()
    assert tables.aat_note(table, None) is None


def test_a_run_of_another_model_is_titled_with_it() -> None:
    """Issue 56, item 4: a run of `imagenet-resnet50` with `recipe.model.name=vgg16`
    was titled as the task's own ResNet-50."""
    from dmlbench.cli.views.summary import run_summary
    from dmlbench.report.html import section_title

    own = stored_run("a", 1, tta=1.0)
    spec = {**own.spec, "recipe": {**own.spec["recipe"], "model": {"name": "vgg16"}}}
    changed = {"recipe.model.name": {"reference": "resnet", "actual": "vgg16"}}
    other = dataclasses.replace(own, run_id="b", spec=spec, deviations=changed)
    assert own.title == "t" and other.title == "t (model vgg16)"
    console = Console(width=200, record=True)
    console.print(run_summary(other))
    assert "t (model vgg16) · 1 worker" in console.export_text()
    assert section_title(frames.runs_frame([other])).startswith("t (model vgg16) · ")
    assert section_title(frames.runs_frame([own, other])).startswith("t · ")  # mixed


def test_a_sections_title_names_the_gpus_and_calls_imported_systems_systems() -> None:
    """A GPU run's section was titled with its host's CPU alone; MLPerf's imported runs
    (a system each, up to 96 nodes) read "6 hosts"."""
    from dmlbench.report.html import section_title

    cpu = stored_run("a", 1, tta=1.0)
    gpu = dataclasses.replace(
        cpu, run_id="b", summary=RunSummary.model_validate({"device": "cuda:0"}), gpus=["H200"]
    )
    assert section_title(frames.runs_frame([cpu])).endswith(
        " · cpu, 2 cores · " + cpu.created_at[:10]
    )
    assert " · H200 · cpu, 2 cores · " in section_title(frames.runs_frame([gpu]))
    elsewhere = dataclasses.replace(gpu, run_id="c", host="h2", gpus=["A100"])
    assert " · 2 kinds of GPU · 2 hosts · " in section_title(frames.runs_frame([gpu, elsewhere]))
    origin = {"source": "mlperf", "system": "dgx1"}
    imported = [
        dataclasses.replace(run, origin={**origin, "system": run.host}) for run in (gpu, elsewhere)
    ]
    assert " · 2 systems · " in section_title(frames.runs_frame(imported))


def test_the_memory_line_says_when_the_tuned_allocators_cache_is_in_the_peak() -> None:
    """Issue 56, item 2: 233 MiB measured against 114 MiB predicted, and nothing said."""
    from dmlbench.cli.views.memory import memory_text

    mib = 1 << 20
    account = {"parameters": 20 * mib, "gradients": 20 * mib, "optimizer_state": 20 * mib}

    def measured(peak: int, allocator: str) -> RunRecord:
        run = stored_run("a", 1, tta=1.0)
        summary = RunSummary.model_validate(
            {
                "memory_account": {**account, "activations": 40 * mib},
                "memory_start_bytes": [100 * mib],
                "training_peak_bytes": [100 * mib + peak],
                "cpu_allocator": allocator,
            }
        )
        return dataclasses.replace(run, summary=summary)

    high = memory_text(measured(233 * mib, "tuned (glibc keeps freed memory)"))
    assert "233 MiB per worker" in high and "allocator (tuned) keeps" in high
    jemalloc = memory_text(measured(233 * mib, "jemalloc 5.3.0 (keeps freed memory)"))
    assert "allocator (jemalloc) keeps" in jemalloc
    predicted = re.search(r"predicted (\d+) MiB", high)
    assert predicted and f"The {233 - int(predicted[1])} MiB above the prediction" in high
    assert "keeps" not in memory_text(measured(233 * mib, "returning (glibc gives back)"))
    close = memory_text(measured(int(predicted[1]) * mib, "tuned (glibc keeps freed memory)"))
    assert "keeps" not in close  # as predicted: nothing to explain
    # cifar10-resnet20 on jemalloc: 11.6 MiB measured, 51.1 MiB predicted, 55.7 MiB with
    # cpu_allocator=returning: the steps reused what loading the data had freed
    low = memory_text(measured(12 * mib, "jemalloc 5.3.0 (keeps freed memory)"))
    assert f"The {int(predicted[1]) - 12} MiB below the prediction" in low
    assert "allocator (jemalloc) kept from before the trainer started" in low
    assert "below" not in memory_text(measured(12 * mib, "returning (glibc gives back)"))
    assert "flight records" not in close  # the run counted none


def test_the_memory_line_says_how_many_flight_records_its_runtime_holds() -> None:
    from dmlbench.cli.views.memory import memory_text

    run = stored_run("a", 1, tta=1.0)
    account = {"parameters": 1e6, "gradients": 1e6, "runtime": 3e6, "flight_records": 1463}
    summary = RunSummary.model_validate(
        {
            "memory_account": account,
            "memory_start_bytes": [1e8],
            "training_peak_bytes": [1e8 + 6e6],
            "cpu_allocator": "returning",
        }
    )
    text = memory_text(dataclasses.replace(run, summary=summary))
    assert re.search(r"runtime [\d.]+ MiB with 1,463 flight records", text), text


def test_tables_show_a_noise_scale_only_from_runs_long_enough_to_advise_on() -> None:
    """The walk's report showed B_simple 2 for a 40-step run whose summary said it was
    too few steps to advise on; the tables now leave it out, as the summary and
    advise do (from MIN_ADVICE_STEPS steps)."""
    from dmlbench.noise import MIN_ADVICE_STEPS

    def measured(run_id: str, steps: int) -> RunRecord:
        run = stored_run(run_id, 2, tta=1.0)
        noise = {"b_simple": 2.0 if steps < MIN_ADVICE_STEPS else 120.0, "steps": steps}
        return dataclasses.replace(
            run, summary=run.summary.model_copy(update={"noise_scale": noise})
        )

    frame = frames.runs_frame([measured("short", 40), measured("long", MIN_ADVICE_STEPS)])
    scales = dict(zip(frame["run_id"], frame["noise_scale"], strict=True))
    assert math.isnan(scales["short"]) and scales["long"] == 120.0


def test_an_unmeasured_strategy_is_judged_as_the_measured_ones_are() -> None:
    """advise chose DDP on its bare prediction while ZeRO-1's run, whose measurement
    holds the allocator's cache, was over the budget: the unmeasured DDP now carries
    the most a measured strategy there exceeded its prediction."""
    from dmlbench.advise.memory import advise_memory
    from dmlbench.cli.views.memory import memory_advice_table

    mib = 1 << 20
    account = {
        "parameters": 20 * mib,
        "gradients": 20 * mib,
        "optimizer_state": 40 * mib,
        "activations": 40 * mib,
    }

    def run(run_id: str, exchange: str, workers: int, used: float | None) -> RunRecord:
        measured = {"memory_start_bytes": [0] * workers, "training_peak_bytes": [used] * workers}
        summary = RunSummary.model_validate(
            {"memory_account": account, "step_time_s": 0.01, **(measured if used else {})}
        )
        record = stored_run(run_id, workers, tta=1.0, exchange=exchange)
        return dataclasses.replace(record, summary=summary)

    accounting = run("a", "ddp", 1, None)
    bare = {f.name: f.predicted["total"] for f in advise_memory([accounting], "t", 1, 2, 32).fits}
    assert bare["zero1"] < bare["ddp"]  # the optimizer state is halved
    zero = run("z", "zero1", 2, bare["zero1"] + 30 * mib)  # 30 MiB of cache measured
    budget = int(bare["ddp"] + 15 * mib)
    advice = advise_memory([accounting, zero], "t", budget, 2, 32)
    fits = {f.name: f for f in advice.fits}
    assert fits["ddp"].allowance == 30 * mib and not fits["ddp"].fits
    assert fits["zero1"].allowance == 0 and fits["zero1"].fits
    assert advice.choice is fits["zero1"]
    assert advice.to_json()["strategies"][0]["allowance_bytes"] == 30 * mib
    console = Console(width=200, record=True)
    console.print(memory_advice_table(advice))
    assert "run it once to measure it" in " ".join(console.export_text().split())
    narrow = Console(width=80, record=True)  # what `advise … > file` renders
    narrow.print(memory_advice_table(advice))
    text = narrow.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    # the option whole, under the table: in its cell it folded "reshard_after_forwa|rd"
    assert "fsdp, kept gathered: exchange_options reshard_after_forward=false" in text
    alone = advise_memory([accounting], "t", budget, 2, 32)  # nothing measured at 2
    assert alone.choice is alone.fits[0] and alone.fits[0].allowance == 0


def test_bar_labels_stand_up_where_side_by_side_they_would_run_together() -> None:
    """Six variants' "not reached 0/1" labels, across their narrow bars, overlapped into
    "not nreached"; up their bars they stand apart, and two variants' stay across."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from dmlbench.report.drawing import HEIGHT, WIDTH, bar_label

    def labelled(variants: int) -> list:
        figure = Figure(figsize=(WIDTH, HEIGHT))
        ax = figure.subplots()
        width = 0.8 / variants  # as bar_positions spaces a group's bars
        bars = ax.bar([i * width for i in range(variants)], [1.0] * variants, width)
        ax.set_xlim(-0.5, 2.5)  # three worker counts
        for bar in bars:
            bar_label(ax, bar, "not reached\n0/2", 1.0, 3)
        FigureCanvasAgg(figure).draw()
        return list(ax.texts)

    six = labelled(6)
    assert {text.get_rotation() for text in six} == {90.0}
    boxes = [text.get_window_extent() for text in six]
    assert all(left.x1 <= right.x0 for left, right in itertools.pairwise(boxes))
    assert {text.get_rotation() for text in labelled(2)} == {0.0}


def test_the_tasks_table_never_folds_a_figure_from_its_unit_at_80_columns() -> None:
    """`dmlbench tasks` at 80 columns printed "budget 2.00" and, a line below, "h"."""
    from rich.console import Console

    from dmlbench.cli.views.catalogue import tasks_table
    from dmlbench.report.formats import seconds
    from dmlbench.tasks import all_tasks

    timed = [task for task in all_tasks() if task.recipe.time_budget_s]
    assert timed
    console = Console(width=80, record=True)
    console.print(tasks_table(timed))
    shown = console.export_text()
    for task in timed:
        budget = seconds(task.recipe.time_budget_s, unit=True)  # "2.00 h"
        assert budget in shown, f"{task.name}: {budget!r} folded"


def test_long_variant_labels_become_letters_where_a_row_would_not_fit() -> None:
    """mlbench's tuning sweep (`alpha_by_workers.1=12.5` and five more) printed every
    figure of `compare`'s 80 columns as "0.0…" and "194,…": the labels took the room.
    Letters stand in for them there, in the numbers' order, spelt out below; a wide
    terminal keeps them whole."""
    from dataclasses import replace

    from rich.console import Console

    from dmlbench.cli.views.tables import scaling_tables

    runs = []
    for alpha in (12.5, 25.0, 50.0, 100.0, 200.0, 400.0):
        for workers, seed in itertools.product((1, 2, 4), (0, 1)):  # TTA as mean±std
            tta = 0.061 + 0.02 * seed
            name, evals = f"{alpha}-{workers}-{seed}", [(tta, 0.95)]
            shape = {"local_batch": 8, "step_time": 0.0045}  # the walk's wine sweep's
            run = stored_run(name, workers, tta=tta, seed=seed, evals=evals, **shape)
            schedule = {"alpha_by_workers": {"1": alpha}}
            spec = {**run.spec, "recipe": {**run.spec["recipe"], "schedule": schedule}}
            runs.append(replace(run, spec=spec))
    table = analysis.scaling_table(frames.runs_frame(runs))
    assert "alpha_by_workers.1=100.0" in set(table["variant"])

    def shown(width: int, budget_s: float | None = None) -> str:
        console = Console(width=width, record=True)
        for rich_table in scaling_tables(table, budget_s, width=width):
            console.print(rich_table)
        return console.export_text()

    narrow = shown(80)
    assert "…" not in narrow and all(len(line) <= 80 for line in narrow.splitlines())
    spelt = [line.strip() for line in narrow.splitlines() if line[1:3] == ": "]
    alphas = ("12.5", "25.0", "50.0", "100.0", "200.0", "400.0")
    letters = zip("ABCDEF", alphas, strict=True)
    assert spelt == [f"{letter}: alpha_by_workers.1={alpha}" for letter, alpha in letters]
    wide = shown(200)
    assert "…" not in wide and " alpha_by_workers.1=100.0 " in wide and "A: " not in wide
    # `--budget` adds a column: letters alone still overran 80, so two titles fold
    budget = shown(80, budget_s=0.05)
    assert "…" not in budget and all(len(line) <= 80 for line in budget.splitlines())
    assert " AAT " in budget and "A: alpha_by_workers.1=12.5" in budget


def test_the_phases_figure_names_its_bars_by_letter_where_their_labels_would_overlap() -> None:
    """Six variants' labels (`comm 75%/75%` over `alpha_by_workers.1=25.0`) above bars a
    few characters wide ran into one another; each bar now carries a letter, spelt out
    in the legend. Two variants at two worker counts keep their labels and comm ratios."""
    from dataclasses import replace

    from dmlbench.report.breakdown_figures import phases

    def table(alphas: tuple[float, ...]) -> pd.DataFrame:
        runs = []
        for alpha in alphas:
            for workers in (1, 2, 4):
                run = stored_run(f"{alpha}-{workers}", workers, tta=0.06, evals=[(0.06, 0.95)])
                schedule = {"alpha_by_workers": {"1": alpha}}
                spec = {**run.spec, "recipe": {**run.spec["recipe"], "schedule": schedule}}
                runs.append(replace(run, spec=spec))
        return analysis.scaling_table(frames.runs_frame(runs))

    crowded = phases(table((12.5, 25.0, 50.0, 100.0, 200.0, 400.0)), "t")
    (ax,) = crowded.axes
    marks = [text.get_text() for text in ax.texts]
    assert sorted(set(marks)) == list("ABCDEF") and len(marks) == 18
    legend = [text.get_text() for text in crowded.legends[0].get_texts()]
    assert "A: alpha_by_workers.1=12.5" in legend and "F: alpha_by_workers.1=400.0" in legend
    two = [
        stored_run(f"{e}{n}", n, tta=0.06, exchange=e) for e in ("allreduce", "ddp") for n in (1, 2)
    ]
    (ax,) = phases(analysis.scaling_table(frames.runs_frame(two)), "t").axes
    assert "comm 10%/20%\nexchange=allreduce" in {text.get_text() for text in ax.texts}


def test_the_curves_legend_follows_the_numbers_in_the_labels() -> None:
    """`alpha_by_workers.1=100.0` was listed before `...=12.5`: the legend sorted as text."""
    from dataclasses import replace

    from dmlbench.report.figures import curves

    runs = []
    for alpha in (12.5, 100.0):
        run = stored_run(f"r{alpha}", 1, tta=0.06, evals=[(0.06, 0.95)])
        spec = {**run.spec, "recipe": {**run.spec["recipe"], "schedule": {"alpha": alpha}}}
        runs.append(replace(run, spec=spec))
    frame = frames.runs_frame(runs)
    evals = frames.evals_frame(runs).merge(frame[["run_id", "variant"]])
    table = analysis.scaling_table(frame)
    labels = [line.get_label() for line in curves(evals, table, 0.9, "t").axes[0].get_lines()]
    assert labels[:2] == ["alpha=12.5 · 1 worker", "alpha=100.0 · 1 worker"]


def test_one_key_that_varies_heads_the_variant_column_where_labels_would_not_fit() -> None:
    """Seven exchanges at 80 columns were letters spelt below (`A: exchange=allreduce`):
    where the variants differ in one key, it heads the column over its values."""
    from rich.console import Console

    from dmlbench.cli.views.tables import scaling_tables

    exchanges = ("allreduce", "ddp", "fp16", "topk", "signsgd", "local-sgd", "powersgd")
    shape = {"local_batch": 16, "step_time": 0.003}  # the walk's sweep on synthetic-mlp
    runs = [
        stored_run(f"{e}{n}", n, tta=0.2, exchange=e, **shape)
        for e, n in itertools.product(exchanges, (2, 4))
    ]
    table = analysis.scaling_table(frames.runs_frame(runs))
    console = Console(width=80, record=True)
    for rich_table in scaling_tables(table, width=80):
        console.print(rich_table)
    shown = console.export_text()
    assert "…" not in shown and all(len(line) <= 80 for line in shown.splitlines())
    header = next(line for line in shown.splitlines() if line.lstrip().startswith("N "))
    assert header.split()[:2] == ["N", "exchange"] and " local-sgd " in shown
    assert "A: " not in shown and "exchange=" not in shown


def test_labels_longer_than_the_terminal_are_letters_spelt_below() -> None:
    """v0.7's whole repository in `compare --task mlperf/resnet`: every variant label
    (`division=closed submitter=Dell EMC system=C4140 nodes=1 ...`) was longer than the
    terminal, so each stood as a letter, and nothing said which submission a letter was."""
    from dataclasses import replace

    from rich.console import Console

    from dmlbench.cli.views.tables import scaling_tables

    runs = []
    systems = {"dgxa100_ngc20.06_mxnet": "NVIDIA Corporation", "C4140": "Dell EMC Corporation"}
    for system, submitter in systems.items():
        run = stored_run(system, 8, tta=0.06, evals=[(0.06, 0.95)])
        schedule = {
            "system_name_of_the_submission": system,
            "submitter_of_the_whole_system": submitter,
        }
        spec = {**run.spec, "recipe": {**run.spec["recipe"], "schedule": schedule}}
        runs.append(replace(run, spec=spec))
    table = analysis.scaling_table(frames.runs_frame(runs))
    assert min(len(label) for label in table["variant"]) > 80
    console = Console(width=80, record=True)
    for rich_table in scaling_tables(table, width=80):
        console.print(rich_table)
    shown = " ".join(console.export_text().split())  # the key's lines fold at 80
    assert "A: " in shown and "B: " in shown
    for system in systems:
        assert f"system_name_of_the_submission={system}" in shown


def test_the_bytes_figure_keeps_its_legend_inside_the_figure() -> None:
    """Seven exchanges' legend, in four columns of `exchange=allreduce`, ran past both
    edges of the figure; it takes as many columns as fit, as the other figures' do. And
    the two worker counts of an exchange, unlabelled past eight points, looked alike."""
    from dataclasses import replace

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dmlbench.report.breakdown_figures import bytes_and_step_time

    exchanges = ("allreduce", "ddp", "fp16", "topk", "signsgd", "local-sgd", "powersgd")
    runs = []
    for i, (exchange, n) in enumerate(itertools.product(exchanges, (2, 4))):
        run = stored_run(f"{exchange}{n}", n, tta=0.2, exchange=exchange)
        sent = run.summary.model_copy(update={"bytes_per_step": 1000.0 * (i + 1)})
        runs.append(replace(run, summary=sent))
    figure = bytes_and_step_time(analysis.scaling_table(frames.runs_frame(runs)), "t")
    FigureCanvasAgg(figure).draw()
    (legend,) = figure.legends
    box = legend.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= figure.bbox.width
    # unlabelled past eight points, each worker count has a marker of its own
    keys = [text.get_text() for text in legend.get_texts()]
    assert len(keys) == 9 and keys[-2:] == ["N=2", "N=4*"]
    (ax,) = figure.axes
    assert {line.get_marker() for line in ax.get_lines() if len(line.get_xdata())} == {"o", "s"}


def test_the_cost_figure_marks_worker_counts_where_their_labels_would_crowd() -> None:
    """Seven exchanges at two worker counts wrote 14 `N=` labels into one another; past
    eight points each count has a marker of its own, named in the legend."""
    from dmlbench.prices import Price
    from dmlbench.report.breakdown_figures import cost

    exchanges = ("allreduce", "ddp", "fp16", "topk", "signsgd", "local-sgd", "powersgd")
    price = Price("p", 1.0)

    def figure(names: tuple[str, ...]) -> Any:
        runs = [
            stored_run(f"{e}{n}", n, tta=0.2 + 0.01 * i, exchange=e)
            for i, (e, n) in enumerate(itertools.product(names, (2, 4)))
        ]
        table = analysis.scaling_table(frames.runs_frame(runs), price=price)
        return cost(table, "p", "t")

    crowded = figure(exchanges)
    (ax,) = crowded.axes
    assert not [text for text in ax.texts if text.get_text().startswith("N=")]
    legend = [text.get_text() for text in crowded.legends[0].get_texts()]
    assert {"N=2", "N=4*"} <= set(legend)  # 4 workers on the 2 cores stored_run records
    (ax,) = figure(exchanges[:2]).axes  # four points keep their labels
    assert sorted(text.get_text() for text in ax.texts) == ["N=2", "N=2", "N=4*", "N=4*"]
    # a Dask fit may use up to its count, and its point says so, as the tables do
    fit = stored_run("fit", 2, tta=0.3, exchange="dask-centralised")
    fit = dataclasses.replace(fit, summary=RunSummary.model_validate({"engine": "dask"}))
    runs = [stored_run("a2", 2, tta=0.2), fit]
    table = analysis.scaling_table(frames.runs_frame(runs), price=price)
    (ax,) = cost(table, "p", "t").axes
    assert sorted(text.get_text() for text in ax.texts) == ["N=2", "N≤2"]


def test_a_dask_fit_costs_the_worker_hours_it_scaled_its_cluster_to() -> None:
    """A fit of up to 4 workers that reached its target in 10 s, holding fewer most of
    the time, was priced as 4 workers × 10 s: now as the 14 worker-seconds it held."""
    from dmlbench.prices import Price

    fit = stored_run("fit", 4, tta=10.0, exchange="dask-centralised")
    held = {"engine": "dask", "worker_s": 18.0, "worker_s_to_target": 14.0}
    fit = dataclasses.replace(fit, summary=RunSummary.model_validate(held))
    (row,) = analysis.scaling_table(frames.runs_frame([fit]), price=Price("p", 3600.0)).iloc
    assert (row["cost_to_target"], row["cost_mean"]) == (pytest.approx(14.0), pytest.approx(18.0))
    # stored before fits counted their worker-seconds: every worker, the whole time
    fit = dataclasses.replace(fit, summary=RunSummary.model_validate({"engine": "dask"}))
    (row,) = analysis.scaling_table(frames.runs_frame([fit]), price=Price("p", 3600.0)).iloc
    assert row["cost_to_target"] == pytest.approx(40.0)
    assert row["cost_mean"] == pytest.approx(4 * fit.elapsed_s)


def test_upright_bar_labels_and_long_y_labels_stay_off_the_titles() -> None:
    """Seven exchanges' upright "1/1 reached" over the tallest bar ran out of the axes
    into the titles; and their tall legend made the figure taller, so the y label, wrapped
    to a share of the figure's height, ran up into the title too."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dmlbench.report.drawing import TITLE_GID, fit_labels
    from dmlbench.report.figures import time_to_accuracy

    exchanges = ("allreduce", "ddp", "fp16", "topk", "signsgd", "local-sgd", "powersgd")
    runs = [
        stored_run(f"{e}{n}", n, tta=0.2 + 0.3 * (e == "powersgd") + 0.1 * (n == 4), exchange=e)
        for e, n in itertools.product(exchanges, (2, 4))
    ]
    figure = fit_labels(time_to_accuracy(analysis.scaling_table(frames.runs_frame(runs)), "t"))
    FigureCanvasAgg(figure).draw()
    (ax,) = figure.axes
    top = ax.get_window_extent().y1
    labels = [text for text in ax.texts if text.get_text().endswith("reached")]
    assert len(labels) == 14 and all(text.get_rotation() == 90 for text in labels)
    assert all(text.get_window_extent().y1 <= top + 1 for text in labels)
    (title,) = [t for t in figure.texts if t.get_gid() == TITLE_GID]
    assert ax.yaxis.label.get_window_extent().y1 <= title.get_window_extent().y0


def test_accuracy_bars_keep_their_upright_labels_inside_and_no_tick_past_100() -> None:
    """Where no run reached the target, the bars show the best accuracy: their upright
    labels ran out of the axes, which the layout then squashed under them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dmlbench.report.figures import time_to_accuracy

    exchanges = ("allreduce", "ddp", "fp16", "topk", "signsgd", "local-sgd", "powersgd")
    runs = [
        stored_run(f"{e}{n}", n, tta=None, exchange=e)
        for e, n in itertools.product(exchanges, (2, 4))
    ]
    figure = time_to_accuracy(analysis.scaling_table(frames.runs_frame(runs)), "t")
    FigureCanvasAgg(figure).draw()
    (ax,) = figure.axes
    labels = [text for text in ax.texts if text.get_text().endswith("reached")]
    assert len(labels) == 14 and all(text.get_rotation() == 90 for text in labels)
    assert all(text.get_window_extent().y1 <= ax.get_window_extent().y1 + 1 for text in labels)
    assert max(ax.get_yticks()) <= 1.0  # the axis runs higher for the labels, its ticks not
    # the target's line ran through the labels under it: they stand over it, on white
    (target,) = [line for line in ax.get_lines() if line.get_label().startswith("target")]
    assert all(text.get_zorder() > target.get_zorder() for text in labels)
    assert all(text.get_bbox_patch().get_facecolor()[:3] == (1, 1, 1) for text in labels)


def test_a_whole_rounds_times_stand_on_a_log_axis_in_bars_as_wide_as_their_group() -> None:
    """v0.7's ResNet submissions, 23 s to 19 h, each system at one or two worker counts:
    every bar but the slowest lay flat on a linear axis, each a thirtieth of its group
    wide (the group split among every variant, present or not), under a heap of
    upright "5/5 reached"."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dmlbench.report.drawing import GROUP_WIDTH
    from dmlbench.report.figures import time_to_accuracy

    times = {8: (68_000.0, 4_100.0, 2_000.0), 64: (270.0,), 4096: (28.0, 29.0)}
    times[8] += tuple(2_500.0 + 100 * i for i in range(9))  # twelve systems at 8 workers
    runs = [
        stored_run(f"system{n}-{i}", n, tta=tta, exchange=f"system{n}-{i}")
        for n, ttas in times.items()
        for i, tta in enumerate(ttas)
    ]
    figure = time_to_accuracy(analysis.scaling_table(frames.runs_frame(runs)), "t")
    FigureCanvasAgg(figure).draw()
    (ax,) = figure.axes
    assert ax.get_yscale() == "log" and "log scale" in ax.get_ylabel()
    bars = {round(bar.get_x() + bar.get_width() / 2, 6): bar for bar in ax.patches}
    widths = sorted({round(bar.get_width(), 6) for bar in bars.values()})
    assert widths == [round(GROUP_WIDTH / k, 6) for k in (12, 2, 1)]  # present ones share
    low, _ = ax.get_ylim()
    fastest = min(bars.values(), key=lambda bar: bar.get_y() + bar.get_height())
    assert fastest.get_y() + fastest.get_height() == pytest.approx(28.0)
    assert low < 28.0 / 1.5  # the fastest bar stands clear of the axis' foot
    # twelve bars in one group: their counts would overlap; said once on the axis
    counted = [t for t in ax.texts if re.fullmatch(r"\d+/\d+", t.get_text())]  # "5/5"
    assert len(counted) == 3  # on a log axis the count alone: upright, it is short
    assert "n/m: runs that reached the target; none shown: all did" in ax.get_xlabel()
    label = ax.xaxis.label.get_window_extent()
    assert figure.bbox.x0 <= label.x0 and label.x1 <= figure.bbox.x1
    top = ax.get_window_extent().y1
    assert all(text.get_window_extent().y1 <= top + 1 for text in counted)
    # fifteen variants and ten colours: no two alike in colour and pattern both
    looks = [(bar.get_facecolor(), (bar.get_hatch() or "").replace("//", "")) for bar in ax.patches]
    assert len(set(looks)) == 15 and {hatch for _, hatch in looks} == {"", ".."}
    few = [stored_run(f"r{n}", n, tta=100.0 * n) for n in (1, 2)]  # 100 s and 200 s
    (ax,) = time_to_accuracy(analysis.scaling_table(frames.runs_frame(few)), "t").axes
    assert ax.get_yscale() == "linear" and "log" not in ax.get_ylabel()


def test_the_reports_scaling_table_marks_oversubscribed_only_where_a_row_is() -> None:
    """The report's caption said "* oversubscribed." under tables whose rows had no star."""
    from dmlbench.report.html_tables import scaling_view

    fits = [stored_run(f"f{n}", n, tta=1.0) for n in (1, 2)]
    view = scaling_view(analysis.scaling_table(frames.runs_frame(fits)), None)
    assert "oversubscribed" not in view.caption and not any("*" in r.cells[0] for r in view.rows)
    over = [*fits, stored_run("f4", 4, tta=1.0)]  # 4 workers on 2 cores
    view = scaling_view(analysis.scaling_table(frames.runs_frame(over)), None)
    assert "* oversubscribed." in view.caption and view.rows[-1].cells[0] == "4*"


def test_a_table_grouped_without_workers_keeps_its_oversubscribed_caption() -> None:
    """Grouped by another column than the worker count (`compare --by exchange`), the
    caption that counted oversubscribed workers had no worker count to read."""
    from rich.console import Console

    from dmlbench.cli.views.tables import scaling_tables

    runs = [stored_run(f"{e}{n}", n, tta=0.2, exchange=e) for e in ("fp16", "ddp") for n in (4, 8)]
    table = analysis.scaling_table(frames.runs_frame(runs), by=("exchange",))
    assert "workers" not in table
    assert list(table["exchange"]) == ["ddp", "fp16"]  # in the order of its groups, not the runs
    console = Console(width=120, record=True)
    for rich_table in scaling_tables(table, width=120, by=("exchange",)):
        console.print(rich_table)
    shown = console.export_text()
    assert "* oversubscribed: more workers than 2 cores" in shown
    cells = [
        line.split()[0] for line in shown.splitlines() if line.split()[:1] in (["ddp*"], ["fp16*"])
    ]
    assert cells == ["ddp*", "fp16*"]  # the rows the caption speaks of are starred
    header = next(line for line in shown.splitlines() if line.lstrip().startswith("exchange"))
    assert "conv" in header and " N " not in header


def test_runs_group_by_their_model_network_and_precision() -> None:
    """`run --model mlp,linear` sweeps models, and `compare --by model` was refused
    ("choose from workers, …, device"): the runs frame had no model column, and the
    refusal did not name network, which it had."""
    from dataclasses import replace

    def ran(run_id: str, model: str, precision: str) -> RunRecord:
        run = stored_run(run_id, 2, tta=1.0)
        recipe = {**run.spec["recipe"], "model": {"name": model}, "precision": precision}
        return replace(run, spec={**run.spec, "recipe": recipe})

    runs = [ran("a", "mlp", "fp32"), ran("b", "linear", "fp32"), ran("c", "mlp", "bf16")]
    frame = frames.runs_frame(runs)
    assert list(frame["model"]) == ["mlp", "linear", "mlp"]
    assert list(frame["precision"]) == ["fp32", "fp32", "bf16"]
    for column, values in (("model", {"mlp", "linear"}), ("precision", {"fp32", "bf16"})):
        assert set(analysis.scaling_table(frame, by=(column,))[column]) == values
    for column in ("network", "model", "precision"):
        assert column in frame and f" {column}," in frames.GROUPABLE


def test_a_disturbed_row_grouped_without_workers_is_daggered_and_said_once() -> None:
    """`compare --by exchange` of a sweep with a disturbed run ended in pandas's KeyError:
    'workers' (the dagger's note counted the disturbed rows' workers), and its variant
    column said `exchange=topk` beside the exchange column's `topk`."""
    from rich.console import Console

    from dmlbench.cli.views.tables import scaling_tables

    runs = [stored_run(e, 2, tta=0.2, exchange=e, disturbed=e == "topk") for e in ("ddp", "topk")]
    table = analysis.scaling_table(frames.runs_frame(runs), by=("exchange",))
    assert list(table["variant"]) == ["exchange=ddp", "exchange=topk"]
    console = Console(width=120, record=True)
    for rich_table in scaling_tables(table, width=120, by=("exchange",)):
        console.print(rich_table)
    lines = console.export_text().splitlines()
    assert [line.split()[0] for line in lines if line.split()[:1] in (["ddp"], ["topk†"])] == [
        "ddp",
        "topk†",
    ]
    assert not any("exchange=" in line for line in lines)  # the group says it
    said = " ".join(lines)
    assert "† disturbed: only runs whose workers waited" in said
    assert "no speedup" not in said  # a table without worker counts gives none anyway


def test_a_row_of_several_worker_counts_costs_each_run_at_its_own_and_says_its_batches() -> None:
    """`compare --by exchange` puts 1 and 4 workers in one row: its cost was every run at
    the first run's worker count, and its b/B the first run's alone."""
    from dmlbench.report.tables import batch_text

    runs = [stored_run("a1", 1, tta=10.0), stored_run("a4", 4, tta=4.0)]
    price = Price("p", 3600.0)  # a worker-second costs 1
    (row,) = analysis.scaling_table(frames.runs_frame(runs), by=("exchange",), price=price).iloc
    assert row["cost_to_target"] == pytest.approx((1 * 10.0 + 4 * 4.0) / 2)
    assert row["cost_mean"] == pytest.approx((1 * 10.0 + 4 * 4.0) / 2)
    assert batch_text(row) == "32 / 32–128"
    by_workers = analysis.scaling_table(frames.runs_frame(runs), price=price)
    assert list(by_workers["cost_to_target"]) == [pytest.approx(10.0), pytest.approx(16.0)]
    assert [batch_text(r) for _, r in by_workers.iterrows()] == ["32 / 32", "32 / 128"]


def test_curves_of_runs_far_apart_in_length_are_drawn_on_a_log_time_axis() -> None:
    """A whole round's curves, 23 s to 19 h, pressed every fast run against the axis;
    and past ten variants a curve's colour repeated another's with the same marker."""
    from dataclasses import replace

    from dmlbench.report.figures import curves

    def drawn(lengths: list[float]):
        runs = []
        for i, length in enumerate(lengths):
            evals = [(length / 2, 0.5), (length, 0.95)]
            run = stored_run(f"r{i}", 8, tta=length, evals=evals)
            spec = {**run.spec, "recipe": {**run.spec["recipe"], "schedule": {"system": i}}}
            runs.append(replace(run, spec=spec))
        frame = frames.runs_frame(runs)
        evals = frames.evals_frame(runs).merge(frame[["run_id", "variant"]])
        return curves(evals, analysis.scaling_table(frame), 0.9, "t").axes[0]  # accuracy

    ax = drawn([25.0 + i for i in range(10)] + [68_000.0])  # eleven systems
    assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
    looks = [(line.get_color(), line.get_marker()) for line in ax.get_lines()[:11]]
    assert len(set(looks)) == 11 and looks[0][0] == looks[10][0]  # colour alike, marker not
    ax = drawn([100.0, 800.0])
    assert ax.get_xscale() == "linear" and "log" not in ax.get_xlabel()


def test_throughput_over_repeats_agrees_with_their_mean_step_time() -> None:
    """Two repeats at 1 and 9 ms a step of 32 samples were shown as 5 ms a step beside
    17,778 samples/s (the mean of their rates), which is 1.8 ms a step: the rate is now
    the harmonic mean, the rate of the mean step, and speedup follows it."""
    runs = [
        stored_run(f"a{s}", 1, tta=1.0, seed=s, step_time=t) for s, t in enumerate([1e-3, 9e-3])
    ]
    runs += [stored_run(f"b{s}", 2, tta=1.0, seed=s, step_time=2e-3) for s in range(2)]
    one, two = analysis.scaling_table(frames.runs_frame(runs)).itertuples(index=False)
    assert one.step_time_mean == pytest.approx(5e-3)
    assert one.throughput_mean == pytest.approx(32 / 5e-3)
    assert two.speedup_throughput == pytest.approx((64 / 2e-3) / (32 / 5e-3))


def test_a_run_that_a_resumed_sweep_redid_is_no_repeat_that_missed() -> None:
    """A sweep interrupted by Ctrl-C, then resumed: its point was run again to the
    target, yet the table read 3/4 reached and the note counted the interrupted run."""
    point = {"sweep": "s", "run_key": "k2"}
    runs = [
        dataclasses.replace(stored_run("a", 1, tta=1.0), run_key="k1"),
        dataclasses.replace(stored_run("b0", 2, tta=None, status="interrupted"), **point),
        dataclasses.replace(stored_run("b1", 2, tta=0.6), **point),
        dataclasses.replace(stored_run("c", 2, tta=None, seed=1, status="failed"), run_key="k3"),
    ]
    frame = frames.runs_frame(runs)
    assert list(frame["redone"]) == [False, True, False, False]
    two = analysis.scaling_table(frame).iloc[1]
    assert (two["runs"], two["converged"]) == (2, 1)  # b1 and c; b0 was redone
    assert notes.unfinished_note(frame) == (
        "1 run failed; it counts as not reached (k/n) and not in the timings. "
        "1 interrupted run, since redone, is left out."
    )
    from dmlbench.report.html_tables import runs_view

    listed = runs_view(frame)  # the report lists it, and says why the tables do not count it
    assert [c for row in listed.rows for c in row.cells if c == "interrupted, redone"]
    assert "Redone: a later run of the same point replaced it" in listed.caption
    # the latest attempt stands, whatever it is: a run redone that failed again counts once
    again = [
        *runs[:2],
        dataclasses.replace(stored_run("b2", 2, tta=None, status="failed"), **point),
    ]
    assert list(frames.runs_frame(again)["redone"]) == [False, True, False]
    # `--rerun always`: a finished point finished again counts once, the later run
    twice = [runs[0], dataclasses.replace(stored_run("a2", 1, tta=2.0), run_key="k1")]
    frame = frames.runs_frame(twice)
    assert list(frame["redone"]) == [True, False]
    assert analysis.scaling_table(frame).iloc[0]["tta_mean"] == 2.0
    assert notes.unfinished_note(frame) == "1 finished run, since redone, is left out."
