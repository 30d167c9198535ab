"""`dmlbench advise`: the compute line, the epochs model, the ranking and the guidelines
(unit tier, in memory), and the command on a real store (multi-process tier)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import inside


@pytest.mark.multiprocess
def test_advise_from_a_real_store(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    inside("run", "synthetic-mlp", "--workers", "1", "--store", store)
    no_bench = inside("advise", "synthetic-mlp", "--store", store, check=False)
    assert no_bench.returncode == 2 and "bench allreduce" in no_bench.stderr
    # 2 epochs of 64 steps: enough for advice on the noise scale (100 steps or more)
    full = ("--set", "stop_at_target=false", "--set", "recipe.max_epochs=2")
    inside("run", "synthetic-mlp", "--workers", "2", *full, "--store", store)
    inside(
        "run", "synthetic-mlp", "--workers", "1", "--set", "recipe.local_batch=64", "--store", store
    )
    inside(
        "bench",
        "allreduce",
        "--workers",
        "2",
        "--max-bytes",
        str(2**20),
        "--factor",
        "16",
        "--repeats",
        "2",
        "--warmup",
        "1",
        "--store",
        store,
    )
    out = json.loads(
        inside(
            "advise",
            "synthetic-mlp",
            "--max-workers",
            "4",
            "--network",
            "100mbit",
            "--workers",
            "4",
            "--json",
            "--store",
            store,
        ).stdout
    )
    assert out["noise_scale"] > 0  # the 2-worker run measured it
    assert "median B_simple of 1 run:" in out["sources"]["noise_scale"]
    runs = json.loads(inside("results", "--json", "--store", store).stdout)
    # compute comes from the undisturbed runs (all of them when every run was
    # disturbed) at their fewest workers: on a quiet machine b=16 and 64 at 1 worker; a
    # busy moment may leave only some of them, by design
    quiet = [r for r in runs if not r["disturbed"]] or runs
    fewest = min(r["workers"] for r in quiet)
    batches = sorted({r["local_batch"] for r in quiet if r["workers"] == fewest})
    expected = f"b={', '.join(map(str, batches))} at {fewest} worker"
    assert expected in out["sources"]["compute"], (expected, out["sources"]["compute"])
    if not any(r["disturbed"] for r in runs):
        assert "fitted b=16, 64 at 1 worker" in out["sources"]["compute"]
    best = out["recommended"]
    assert best["workers"] in (1, 2, 4) and best["tta_s"] > 0
    assert all(best["tta_s"] <= r["tta_s"] for r in out["runners_up"])
    assert out["current"]["workers"] == 4 and out["current"]["local_batch"] == 16
    page = inside(
        "advise", "synthetic-mlp", "--max-workers", "2", "--network", "none", "--store", store
    ).stdout
    assert "ranked by predicted time to target" in page and "from:" in page
    assert "learning rate: the recipe's rule" in page
    unknown = inside("advise", "no-such-task", "--store", store, check=False)
    assert unknown.returncode == 2 and "\n" not in unknown.stderr.strip()
