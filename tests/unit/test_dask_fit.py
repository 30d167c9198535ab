"""`dmlbench dask fit`: a registered task trained by the Dask estimator on a real
LocalCluster and stored beside torch.distributed runs, and its refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import COLUMNS
from typer.testing import CliRunner

from dmlbench.cli.app import app
from dmlbench.dask.dampers import Constant, GeoDamp, make_damper
from dmlbench.dask.run import (
    DaskFit,
    HeldWorkers,
    first_rate,
    short_of_workers,
    stored_spec,
)
from dmlbench.errors import SpecError
from dmlbench.resolve import resolve_spec


def dmlbench(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "dmlbench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": COLUMNS},
    )
    if check and done.returncode != 0:
        raise AssertionError(f"dmlbench {' '.join(args)} failed:\n{done.stderr}")
    return done


def test_dampers_are_built_from_their_name_and_the_options_given() -> None:
    assert make_damper("GeoDamp", 64, {"delay": 2, "factor": 3, "rate": None}) == GeoDamp(
        64, delay=2, factor=3
    )
    assert make_damper("constant", 16, {"max_batch_size": None}) == Constant(16)
    with pytest.raises(SpecError, match=r"PadaDamp does not take --delay \(it takes "):
        make_damper("padadamp", 32, {"delay": 2.0})
    with pytest.raises(SpecError, match="unknown damper 'geo': choose constant, geodamp"):
        make_damper("geo", 32, {})
    with pytest.raises(SpecError, match="factor ≥ 1"):
        make_damper("geodamp", 32, {"factor": 0.5})


def test_the_stored_spec_says_how_the_dask_fit_differs() -> None:
    spec = resolve_spec("digits-mlp", config={}, overrides=[])
    fit = DaskFit(GeoDamp(64, delay=1, factor=2), grads_per_worker=16, max_workers=3)
    stored = stored_spec(spec, fit)
    assert (stored["workers"], stored["global_batch"], stored["recipe"]["local_batch"]) == (
        3,
        64,
        16,
    )
    assert stored["exchange"] == "dask-centralised"
    assert stored["dask"]["damper"] == {
        "name": "GeoDamp",
        "initial": 64,
        "delay": 1,
        "factor": 2,
        "max_batch_size": None,
    }
    assert first_rate(spec, 64) == pytest.approx(2 * first_rate(spec, 32))  # the recipe's scaling


def test_a_fit_says_where_the_workers_it_asked_for_never_took_part() -> None:
    """examples/dask_regressor.py's last four epochs asked for 2 workers and ran on 1 (a
    LocalCluster worker takes seconds to start), priced for 2, with nothing saying why."""

    def epoch(*updates: tuple[int | None, int, int]) -> dict[str, object]:
        return {"updates": [{"target_workers": t, "tasks": k, "workers": w} for t, k, w in updates]}

    history = [epoch((1, 1, 1)), epoch((2, 2, 1), (2, 2, 2)), epoch((2, 4, 1))]
    (said,) = short_of_workers(history)
    assert said.startswith("2 of 3 epochs ran on fewer workers than they asked the cluster for")
    assert "(up to 2 asked, 1 took part)" in said
    # all there: none; more asked than tasks (--min-workers 2 at batch 32): none; unscaled: none
    assert short_of_workers([epoch((2, 2, 2)), epoch((2, 1, 1)), epoch((None, 4, 1))]) == []


def test_a_fit_is_billed_for_the_workers_it_asked_its_cluster_for() -> None:
    """Each update at the workers it asked for, the rest of an epoch (evaluation) at what
    its last update asked; a cluster that could not be scaled says nothing (None)."""

    def update(asked: int | None, wall: float) -> dict[str, float | int | None]:
        return {"target_workers": asked, "wall_s": wall}

    held = HeldWorkers(since=10.0)
    held.add([update(1, 2.0), update(2, 3.0)], now=16.0)  # 1 s between: at 2
    assert held.worker_s == pytest.approx(1 * 2 + 2 * 3 + 2 * 1)
    held.add([update(4, 1.0)], now=17.0)  # nothing between
    assert held.worker_s == pytest.approx(14.0)
    held.add([update(None, 1.0)], now=18.0)
    assert held.worker_s is None
    held.add([update(1, 1.0)], now=19.0)  # once unknown, it stays so
    assert held.worker_s is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["synthetic-logreg"], "classification tasks with cross-entropy; synthetic-logreg uses"),
        (["--damper", "geodamp", "--rate", "3"], "GeoDamp does not take --rate"),
        # the options it names are the command's: --max-batch, not the damper's field
        (["--delay", "3"], "Constant does not take --delay (it takes --max-batch)"),
        (["--device", "gpu"], "device must be 'cpu', 'cuda', 'cuda:N' or 'auto'"),
        (["--engine", "gossip"], "engine must be one of centralised, ddp"),
        (["--min-workers", "3", "--max-workers", "2"], "--min-workers 3 is above --max-workers"),
        (["--set", "workers=2"], "workers=2 (give --min-workers/--max-workers)"),
        # each was trained without, and stored as if it had been, without a word
        (["--set", "exchange=ddp"], 'exchange="ddp" (give --engine (centralised or ddp))'),
        (["--set", "network=1gbit"], "not train with network: drop it, or train with `dml"),
        (["--set", "recipe.precision=bf16", "--set", "channels_last=true"], "them, or"),
        # 2.6 TiB of weights: the out-of-memory killer took the driver and said nothing
        (["--set", "hidden=[10000000000]"], "the driver and 2 local workers hold at least"),
    ],
)
def test_impossible_fits_are_refused_in_one_line_before_anything_starts(
    dmlbench, tmp_path: Path, args: list[str], message: str
) -> None:
    code, _, err = dmlbench("dask", "fit", *args, "--store", str(tmp_path / "store"))
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "store" / "runs").exists() or not any(
        (tmp_path / "store" / "runs").iterdir()
    )


def test_dask_fit_is_listed_in_the_help() -> None:
    result = CliRunner().invoke(app, ["dask", "fit", "--help"])
    assert result.exit_code == 0
    assert "--damper" in result.output and "--scheduler" in result.output
