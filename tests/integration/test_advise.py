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
    inside("run", "synthetic-mlp", "--workers", "2", "--store", store)
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
    assert "median B_simple of 1 run" in out["sources"]["noise_scale"]
    runs = json.loads(inside("results", "--json", "--store", store).stdout)
    if len({bool(r["disturbed"]) for r in runs}) == 1:
        assert "fitted b=16, 64 at 1 worker" in out["sources"]["compute"]
    else:  # a busy moment disturbed some runs: advise prefers the others, by design
        assert "b=16" in out["sources"]["compute"]
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
