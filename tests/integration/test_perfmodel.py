"""The performance model on hand-computed cases, its calibration, and `dmlbench simulate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import inside


@pytest.mark.multiprocess
def test_simulate_from_a_real_store(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    missing = inside("simulate", "synthetic-mlp", "--store", store, check=False)
    assert missing.returncode == 2 and "no results store" in missing.stderr
    inside("run", "synthetic-mlp", "--workers", "1", "--json", "--store", store)
    no_bench = inside("simulate", "synthetic-mlp", "--store", store, check=False)
    assert no_bench.returncode == 2 and "bench allreduce" in no_bench.stderr
    inside(
        "bench",
        "allreduce",
        "--workers",
        "2",
        "--max-bytes",
        str(2**22),
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
            "simulate",
            "synthetic-mlp",
            "--workers",
            "1,2,8",
            "--network",
            "1gbit,100mbit",
            "--algorithm",
            "ring,ps",
            "--json",
            "--store",
            store,
        ).stdout
    )
    rows = out["predictions"]
    assert len(rows) == 2 * 2 * 3
    assert out["calibration"]["gradient_bytes"] > 0
    for group in _groups(rows).values():
        assert [r["workers"] for r in group] == [1, 2, 8]
        assert group[0]["speedup"] == 1.0 and group[0]["comm_s"] == 0.0
        assert group[1]["comm_s"] < group[2]["comm_s"]
        assert group[0]["epochs_measured"] is True  # the 1-worker run reached the target
    slow = _groups(rows)[("100mbit", "ring")][2]["comm_s"]
    fast = _groups(rows)[("1gbit", "ring")][2]["comm_s"]
    size = out["calibration"]["gradient_bytes"]  # only the bandwidth term differs:
    hosts = out["calibration"]["comm"]["2"]["host_busbw"]
    slow_bw, fast_bw = min(11.875e6, hosts), min(118.75e6, hosts)  # 95% of each link
    assert slow - fast == pytest.approx(14 / 8 * size * (1 / slow_bw - 1 / fast_bw))
    page = tmp_path / "report.html"
    inside("report", "--store", store, "--out", str(page))
    assert "synthetic-mlp · predicted scaling" in page.read_text()  # saved, then drawn
    bad = inside(
        "simulate", "synthetic-mlp", "--algorithm", "gossip", "--store", store, check=False
    )
    assert bad.returncode == 2
    assert "choose ring, halving-doubling, tree, ps or hierarchical" in bad.stderr
    two = json.loads(
        inside(
            "simulate",
            "synthetic-mlp",
            "--nodes",
            "1,2,4",
            "--nproc-per-node",
            "4,2,1",
            "--network",
            "100mbit",
            "--algorithm",
            "ring,hierarchical",
            "--json",
            "--store",
            store,
        ).stdout
    )["predictions"]
    assert [(r["nodes"], r["workers"]) for r in two] == [(1, 4), (2, 4), (4, 4)] * 2
    flat = {r["nodes"]: r["comm_s"] for r in two if r["algorithm"] == "ring"}
    levels = {r["nodes"]: r["comm_s"] for r in two if r["algorithm"] == "hierarchical"}
    # a flat ring is as slow as its slowest hop: from 2 nodes on, every step crosses one
    assert flat[1] < flat[2] == pytest.approx(flat[4])
    assert levels[2] < flat[2]  # two levels: one stream per node crosses, fewer times
    # a list of worker counts beside layouts was dropped without a word: refused
    both = ("--workers", "1,8", "--nodes", "1,2")
    refused = inside("simulate", "synthetic-mlp", *both, "--store", store, check=False)
    assert refused.returncode == 2 and "--workers or --nodes/--nproc-per-node" in refused.stderr


def _groups(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["network"], row["algorithm"]), []).append(row)
    return groups


@pytest.mark.multiprocess
def test_bench_curve_measures_a_devices_step_by_local_batch_and_reuses_its_runs(
    tmp_path: Path,
) -> None:
    """Issue 54, item 2, in one command: a synthetic one-worker run at each local batch,
    stored, and the curve file simulate-cluster reads, which says where it was measured."""
    store, out = str(tmp_path / "store"), tmp_path / "curve.json"
    args = ("bench", "curve", "cifar10-resnet20", "--local-batch", "2,8", "--steps", "2")
    first = inside(*args, "--warmup", "1", "--out", str(out), "--store", store)
    assert "2 to run" in first.stdout
    assert "no cluster profile has this device" in first.stdout  # a CPU's curve
    written = json.loads(out.read_text())
    assert (written["task"], written["precision"]) == ("cifar10-resnet20", "fp32")
    assert [batch for batch, _ in written["points"]] == [2, 8]
    assert len(written["runs"]) == 2 and written["device"]
    stored = json.loads(inside("results", "--json", "--store", store).stdout)
    steps = {run["local_batch"]: run["summary"]["step_time_s"] for run in stored}
    assert {b: s for b, s in written["points"]} == pytest.approx(steps)
    assert all(run["status"] == "throughput" and run["workers"] == 1 for run in stored)
    again = inside(*args, "--warmup", "1", "--out", str(out), "--store", store, "--json")
    assert "2 already in" in again.stderr and "0 to run" in again.stderr
    assert json.loads(again.stdout) == written
    assert written["kind"] == "cpu"
    cluster = ("--cluster", "dgx-h200", "--nodes", "1", "--local-batch", "4")
    refused = inside(
        "simulate-cluster", "cifar10-resnet20", *cluster, "--curve", str(out), check=False
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1  # a CPU's, on an H200
    assert ", a CPU; NVIDIA H200" in refused.stderr and "kind: cpu" in refused.stderr
    # an older file, which does not say its kind, is used as measured and said apart
    unsaid = tmp_path / "unsaid.json"
    unsaid.write_text(json.dumps({k: v for k, v in written.items() if k != "kind"}))
    used = inside(
        "simulate-cluster", "cifar10-resnet20", *cluster, "--curve", str(unsaid), "--json"
    )
    source = json.loads(used.stdout)["efficiency_source"]
    assert source.startswith("measured at local batch 2–8 on ")
    assert "not measured on this profile's NVIDIA H200" in source
    assert "note: the --curve was measured on " in used.stderr
    # another --set under the same sweep name is another curve: its runs alone (the
    # medians mixed both settings' runs)
    second = tmp_path / "other.json"
    changed = ("--set", "channels_last=false", "--out", str(second))
    other = inside(*args, "--warmup", "1", *changed, "--store", store)
    assert "2 to run" in other.stdout
    mine = json.loads(second.read_text())
    assert len(mine["runs"]) == 2 and not set(mine["runs"]) & set(written["runs"])
