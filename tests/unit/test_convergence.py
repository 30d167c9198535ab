"""Steps to target against the global batch (McCandlish et al.'s form), and the
published workloads the MLPerf replay describes (issue 54, items 4 and 5)."""

from __future__ import annotations

import pytest
import torch

from dmlbench.errors import SpecError
from dmlbench.perfmodel.convergence import fit
from dmlbench.perfmodel.workloads import WORKLOADS, bert_large_parameters


def test_two_batches_give_mccandlishs_line_exactly() -> None:
    # E = E_min (1 + B / B_noise) with E_min = 30 epochs, B_noise = 4,000
    scaling = fit([(1000, 30 * 1.25), (8000, 30 * 3.0)])
    assert scaling.e_min == pytest.approx(30) and scaling.b_noise == pytest.approx(4000)
    assert scaling.predict(4000) == pytest.approx(60)
    assert scaling.degrees_of_freedom == 0  # no scatter to judge a band by


def test_the_band_widens_away_from_the_fitted_batches() -> None:
    points = [(1000, 37.0), (1200, 38.5), (3000, 41.0), (3300, 41.5), (30000, 56.0)]
    scaling = fit(points)
    inside = scaling.band(3000)
    outside = scaling.band(300_000)
    assert inside[0] < scaling.predict(3000) < inside[1]
    assert outside[1] - outside[0] > 3 * (inside[1] - inside[0])
    assert not scaling.extrapolates(3000) and scaling.extrapolates(300_000)
    # scatter of points about a line is in the band: a point it was not fitted on
    assert scaling.band(2000)[0] < 40 < scaling.band(2000)[1]


def test_a_measured_noise_scale_pulls_the_fit_toward_it() -> None:
    points = [(1000, 40.0), (2000, 44.0), (4000, 47.0)]
    plain = fit(points)
    prior = fit(points, noise_scale=20_000)
    assert abs(prior.b_noise - 20_000) < abs(plain.b_noise - 20_000)


def test_one_batch_cannot_say_how_training_grows_with_it() -> None:
    with pytest.raises(SpecError, match="two or more global batches"):
        fit([(1000, 37.0), (1000, 38.0)])
    with pytest.raises(SpecError, match="above 0"):
        fit([(1000, 37.0), (2000, float("nan"))])


def test_bert_large_has_googles_parameter_count() -> None:
    # google-research/bert's README: BERT-Large, 24 layers, 1,024 hidden, 16 heads, 340M
    assert bert_large_parameters() == 335_141_888
    assert WORKLOADS["bert"].gradient_bytes == 2 * 335_141_888


def test_resnet50s_count_is_the_network_dmlbench_builds() -> None:
    from dmlbench.models import build_model
    from dmlbench.tasks import get_task

    task = get_task("imagenet-resnet50")
    with torch.device("meta"):
        model = build_model(task.recipe.model, task.input_shape, task.num_outputs)
    assert sum(p.numel() for p in model.parameters()) == WORKLOADS["resnet"].parameters


def _run(batch: int, samples: int, noise: float | None = None):
    from dmlbench.results.records import RunRecord, RunSummary

    summary = RunSummary(noise_scale={"b_simple": noise} if noise else None)
    return RunRecord(
        run_id=f"r{batch}-{samples}",
        task="t",
        status="success",
        division="closed",
        created_at="",
        workers=1,
        local_batch=batch,
        global_batch=batch,
        seed=0,
        exchange="allreduce",
        spec={},
        deviations={},
        environment={},
        run_dir="",
        samples=samples,
        summary=summary,
    )


def test_a_measured_noise_scale_in_the_runs_is_the_fits_prior() -> None:
    from dmlbench.perfmodel.cluster import add_time_to_train

    runs = [_run(64, 40_000), _run(256, 44_000), _run(1024, 47_000)]
    rows = [{"global_batch": 512, "samples_per_s": 1000.0}]
    plain_rows, prior_rows = [dict(r) for r in rows], [dict(r) for r in rows]
    plain = add_time_to_train(plain_rows, [*runs, _run(64, 40_000)], "t")
    measured = [*runs, _run(64, 40_000, noise=20_000.0)]  # the same points, one measured
    prior = add_time_to_train(prior_rows, measured, "t")
    assert plain["noise_scale_prior"] is None
    assert prior["noise_scale_prior"] == 20_000.0
    assert abs(prior["b_noise"] - 20_000) < abs(plain["b_noise"] - 20_000)
    assert prior_rows[0]["time_to_train_s"] != plain_rows[0]["time_to_train_s"]


def test_a_note_that_asks_for_converge_from_names_the_published_runs_the_store_has() -> None:
    """`simulate-cluster imagenet-resnet50` on a store holding MLPerf's imported runs
    said "give --converge-from" without naming them: they sit under their own task
    names (mlperf/resnet). Only published runs at two batches or more are named."""
    from dataclasses import replace

    from dmlbench.cli.cluster import _fittable_elsewhere

    def published(task: str, batch: int) -> object:
        return replace(_run(batch, 40_000 + batch), task=task, origin={"round": "v0.7"})

    runs = [published("mlperf/resnet", 1664), published("mlperf/resnet", 3264)]
    runs += [published("mlperf/bert", 256), _run(64, 1000), _run(128, 1200)]  # bert: 1
    assert _fittable_elsewhere(runs) == " (published runs in the store: mlperf/resnet)"
    assert _fittable_elsewhere(runs[2:]) == ""  # one batch, and this machine's own runs
