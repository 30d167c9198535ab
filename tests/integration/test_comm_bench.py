"""The all-reduce micro-benchmark: sizes, definitions, a real gloo run, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers import cli, inside


@pytest.mark.multiprocess
def test_allreduce_benchmark_runs_on_real_gloo_workers(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    done = cli(
        "bench",
        "allreduce",
        "--workers",
        "2",
        "--max-bytes",
        "65536",
        "--repeats",
        "3",
        "--warmup",
        "1",
        "--json",
        "--store",
        store,
    )
    (run,) = json.loads(done.stdout)
    assert run["status"] == "success" and run["workers"] == 2 and run["network"] == "none"
    # its sizes as its table writes them ("65,536 bytes …" wrapped its "…" at 80 columns)
    assert "8 sizes up to 64 KiB …" in done.stderr
    sizes = [r["bytes"] for r in run["results"]]
    assert sizes == [4, 16, 64, 256, 1024, 4096, 16384, 65536]
    for row in run["results"]:
        assert 0 < row["latency_min_s"] <= row["latency_s"] <= row["latency_max_s"] < 5
        assert row["busbw"] == pytest.approx(row["algbw"])  # 2(n-1)/n = 1 at 2 workers
        assert row["algbw"] == pytest.approx(row["bytes"] / row["latency_s"])
        assert row["repeats"] == 3 and row["iterations"] >= 1
    listed = inside("results", "--store", store).stdout
    (line,) = [line for line in listed.splitlines() if run["run_id"] in line]
    assert line.split()[1:] == ["allreduce", "gloo", "2", "none", "success"]
    assert "1 communication micro-benchmark" in listed and "stored run" not in listed
    one = json.loads(inside("results", run["run_id"][-6:], "--json", "--store", store).stdout)
    assert one["results"] == run["results"]
    report = inside("report", "--store", store, "--out", str(tmp_path / "r.html")).stdout
    assert "1 figure," in report
    page = (tmp_path / "r.html").read_text()
    assert "Communication micro-benchmarks" in page and run["run_id"] in page
    inside("export", "--out", str(tmp_path / "tables"), "--format", "csv", "--store", store)
    comm = pd.read_csv(tmp_path / "tables" / "comm.csv")
    assert list(comm["bytes"]) == sizes and set(comm["run_id"]) == {run["run_id"]}
    assert (tmp_path / "tables" / "runs.csv").is_file()  # no training runs: an empty table


@pytest.mark.multiprocess
def test_allreduce_over_mpi(tmp_path: Path) -> None:
    done = cli(
        "bench",
        "allreduce",
        "--backend",
        "mpi",
        "--workers",
        "2",
        "--max-bytes",
        "4096",
        "--repeats",
        "3",
        "--json",
        "--store",
        str(tmp_path / "s"),
    )
    (run,) = json.loads(done.stdout)
    assert run["status"] == "success" and run["backend"] == "mpi"
    assert [r["bytes"] for r in run["results"]] == [4, 16, 64, 256, 1024, 4096]
    for row in run["results"]:
        assert 0 < row["latency_min_s"] <= row["latency_s"] < 1
    log = (tmp_path / "s" / "runs" / run["run_id"] / "logs" / "mpirun.log").read_text()
    assert "Traceback" not in log
