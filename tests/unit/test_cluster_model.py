"""Hardware profiles, the DDP overlap model and the cluster scaling table, on known
numbers; the published replays within their goal (no processes)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from dmlbench.errors import SpecError
from dmlbench.perfmodel.cluster import (
    TaskCost,
    ddp_buckets,
    ddp_step,
    scale,
    simulate_cluster,
    task_cost,
)
from dmlbench.perfmodel.hardware import DEFAULT_EFFICIENCY, compute_step_s, load_hardware
from dmlbench.perfmodel.replays import (
    DDP_CLUSTER,
    GOYAL_TASK,
    ddp_benchmark,
    goyal,
    median_abs_error,
    mlbench_2a,
    published_points,
)
from dmlbench.results.records import RunSummary


def test_every_shipped_profile_cites_its_source_and_resolves() -> None:
    hardware = load_hardware()
    assert {"p100-sxm2", "v100-sxm2", "a100-sxm4-80gb", "h100-sxm5"} <= set(hardware.accelerators)
    assert {"nvlink1", "nvlink4", "pcie4", "ib-edr", "ib-hdr", "ib-ndr"} <= set(
        hardware.interconnects
    )
    assert {"10gbe-tcp", "25gbe-tcp", "50gbe-tcp", "100gbe-tcp", "100gbe-roce"} <= set(
        hardware.interconnects
    )
    for section in (hardware.accelerators, hardware.interconnects, hardware.clusters):
        assert all(entry.source.strip() for entry in section.values())
    for key in hardware.clusters:
        cluster = hardware.cluster(key)
        inter, intra = cluster.links()
        assert inter.bandwidth > 0 and intra.bandwidth >= inter.bandwidth / 8
    h100 = hardware.accelerators["h100-sxm5"]
    assert h100.peak_flops("bf16") == pytest.approx(989.5e12)  # dense, not the sparse 1,979
    with pytest.raises(SpecError, match="no fp8 peak"):
        hardware.accelerators["p100-sxm2"].peak_flops("fp8")


def test_a_users_file_adds_and_replaces_entries(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "interconnects:\n"
        "  400gbe-roce: {name: 400 GbE, gbit_per_s: 400, latency_us: 2, message_cost_us: 2,"
        " source: my switch's sheet}\n"
        "clusters:\n"
        "  mine: {name: my cluster, accelerator: h100-sxm5, devices_per_node: 4,"
        " intra: nvlink4, inter: 400gbe-roce, nics_per_node: 4, source: our rack}\n"
    )
    hardware = load_hardware(mine)
    assert hardware.cluster("mine").devices_per_node == 4
    assert "dgx-h100" in hardware.clusters  # the shipped ones stay
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "clusters:\n  x: {name: x, accelerator: tpu, devices_per_node: 1,"
        " intra: nvlink4, inter: ib-hdr, source: s}\n"
    )
    with pytest.raises(SpecError, match="unknown accelerator of cluster x 'tpu'"):
        load_hardware(bad)
    # a value of one's own entry is named with one's file, not the shipped profiles
    bad.write_text(
        "clusters:\n  x: {name: x, accelerator: h100-sxm5, devices_per_node: 1,"
        " intra: nvlink4, inter: ib-hdr, allreduce: tree, source: s}\n"
    )
    with pytest.raises(
        SpecError, match=rf"^hardware file {re.escape(str(bad))}: clusters.x.allreduce"
    ):
        load_hardware(bad)
    with pytest.raises(SpecError, match=r"unknown cluster profile 'dgx-h10'.*did you mean"):
        load_hardware().cluster("dgx-h10")
    odd = tmp_path / "odd.yaml"
    odd.write_text("acelerators: {}\n")
    with pytest.raises(SpecError, match=r"unknown section 'acelerators' \(did you mean 'acc"):
        load_hardware(odd)


def test_a_hardware_file_is_read_within_bounds_and_never_echoed(dmlbench, tmp_path: Path) -> None:
    """Issue 53: `--hardware /etc/shadow` printed a line of it back; a device or a named
    pipe was said not to exist; a peak of 1e308 TFLOP/s printed `inf TFLOP/s`; --nodes
    10²¹ and --devices-per-node 10⁸ were taken; the unknown-cluster hint named a command
    that does not exist."""
    import os

    shadow = tmp_path / "shadow"
    shadow.write_text("root:$y$j9T$secretsalt$hash:20228:0:99999:7:::\ndaemon:*:20228:0::::\n")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    huge = tmp_path / "huge.yaml"
    huge.write_text(
        "accelerators:\n  x: {name: x, peak_tflops: {fp32: 1e308}, memory_gb: 80,"
        " memory_bandwidth_gbs: 2000, source: s}\n"
    )
    cases = [
        (("--hardware", str(shadow)), "2 top-level keys that are no section"),
        (("--hardware", str(pipe)), "is a named pipe, not a regular file"),
        (("--hardware", "/dev/null"), "is a device, not a regular file"),
        (("--hardware", str(huge)), "at most 1,000,000"),
        (("--nodes", "1" + "0" * 21), "node counts of at most 1,048,576"),
        # a step of more examples than an epoch has: predicted, it took less than a step
        (("--nodes", "1,65536"), "--nodes 65536: a global batch of 16,777,216 is larger than"),
        (("--cluster", "nope"), "see `dmlbench simulate-cluster --cluster list`"),
    ]
    for args, message in cases:
        cluster = () if "--cluster" in args else ("--cluster", "dgx-a100")
        code, out, err = dmlbench("simulate-cluster", GOYAL_TASK, *cluster, *args)
        assert code == 2 and message in err, (args, err)
        assert "secretsalt" not in out + err and len(err.strip().splitlines()) == 1, err
    code, _, err = dmlbench(
        "simulate-cluster", GOYAL_TASK, "--cluster", "dgx-a100", "--devices-per-node", "100000000"
    )
    assert code == 2 and "1024" in err and "Traceback" not in err  # typer's usage error


def test_an_epoch_the_task_cannot_time_says_why(dmlbench) -> None:
    """Issue 56, item 7: kjv-gpt's epoch showed "—" with no reason."""
    code, out, err = dmlbench("simulate-cluster", "kjv-gpt", "--cluster", "dgx-h100")
    assert code == 0, err
    assert "epoch: — because kjv-gpt declares no training-set size" in " ".join(out.split())
    code, out, _ = dmlbench("simulate-cluster", GOYAL_TASK, "--cluster", "dgx-a100")
    assert code == 0 and "epoch: —" not in out


def test_compute_comes_from_flops_peak_and_efficiency() -> None:
    a100 = load_hardware().accelerators["a100-sxm4-80gb"]
    assert compute_step_s(312e12, a100, "bf16", 0.5) == pytest.approx(2.0)
    with pytest.raises(SpecError, match=r"efficiency 1\.5"):
        compute_step_s(1.0, a100, "bf16", 1.5)


def test_ddp_buckets_and_overlap() -> None:
    mib = 2**20
    assert ddp_buckets(60 * mib) == [1 * mib, 25 * mib, 25 * mib, 9 * mib]
    assert ddp_buckets(0.5 * mib) == [0.5 * mib]
    # all-reduce far faster than backward: only the last bucket's is exposed
    step, comm, exposed = ddp_step(1.0, 2.0, [1, 1], lambda size: 0.1)
    assert comm == pytest.approx(0.2) and exposed == pytest.approx(0.1)
    assert step == pytest.approx(3.1)
    # far slower: everything past backward's share is exposed, one bucket at a time
    step, comm, exposed = ddp_step(1.0, 2.0, [1, 1], lambda size: 5.0)
    assert exposed == pytest.approx(1.0 + 5.0 + 5.0 - 2.0)
    # no backward to hide behind (a linear model's step): the whole all-reduce shows
    assert ddp_step(1.0, 0.0, [1], lambda size: 0.5)[2] == pytest.approx(0.5)


def test_weak_scaling_over_a_cluster_loses_only_to_exposed_communication() -> None:
    cluster = load_hardware().cluster("dgx-a100")
    cost = TaskCost("t", 32, 1e12, 100e6, 1_000_000)
    rows = scale(cluster, cost, [1, 2, 16], efficiency=0.5)
    assert [r["workers"] for r in rows] == [8, 16, 128]
    assert rows[0]["speedup"] == 1.0 and rows[0]["efficiency"] == 1.0
    for row in rows:
        assert row["compute_s"] == pytest.approx(1e12 / (19.5e12 * 0.5))
        assert row["step_s"] == pytest.approx(row["compute_s"] + row["exposed_comm_s"])
        assert row["efficiency"] == pytest.approx(rows[0]["step_s"] / row["step_s"])
    assert rows[2]["allreduce_s"] > rows[0]["allreduce_s"]  # the nodes' links join in
    slow = load_hardware().cluster("v100-25gbe")
    spread = scale(slow, cost, [1, 64], efficiency=0.5)
    assert spread[1]["efficiency"] < rows[2]["efficiency"]  # 25 GbE TCP hides less


def test_a_tasks_step_is_counted_on_the_meta_device() -> None:
    cost = task_cost(GOYAL_TASK)
    assert cost.local_batch == 32
    assert cost.gradient_bytes == pytest.approx(4 * 25_557_032)  # ResNet-50's weights
    per_image = cost.flops_per_step / 32
    assert 3 * 8.0e9 < per_image < 3 * 8.5e9  # 3 × forward's ~4.1 GMACs
    with pytest.raises(SpecError, match="declares no input shape"):
        task_cost("digits-mlp")


def test_simulate_cluster_says_where_its_efficiency_came_from() -> None:
    result = simulate_cluster(GOYAL_TASK, "goyal2017-bigbasin", [1, 32])
    assert result.efficiency == DEFAULT_EFFICIENCY
    assert result.efficiency_source.startswith("assumed")
    assert [p["workers"] for p in published_points(GOYAL_TASK, "goyal2017-bigbasin")] == [256, 352]
    assert published_points(GOYAL_TASK, "dgx-h100") == []
    given = simulate_cluster(GOYAL_TASK, "dgx-h100", [1, 2], 4, efficiency=0.3, dtype="bf16")
    assert given.efficiency_source == "given (--efficiency)"
    assert [r["workers"] for r in given.rows] == [4, 8]
    with pytest.raises(SpecError, match="--nodes"):
        simulate_cluster(GOYAL_TASK, "dgx-h100", [])


def test_the_published_replays_are_within_their_goal() -> None:
    cells, inputs = goyal(load_hardware(), task_cost(GOYAL_TASK))
    assert [c.workers for c in cells] == [256, 352, 256, 352]
    assert median_abs_error(cells) <= 0.15 and all(abs(c.error) <= 0.25 for c in cells)
    assert 0 < inputs["achieved_tflops"] < 10.6  # under the P100's fp32 peak
    # the communication-free null beside every cell; what the model charges for
    # communication moves each cell towards the published figure
    assert all(c.comm_free is not None for c in cells)
    assert all(abs(c.error) < abs(c.comm_free_error or 0) for c in cells)
    cells, inputs = mlbench_2a()
    rows = {row["workers"]: row for row in inputs["rows"]}
    assert [c.workers for c in cells] == [4, 8, 16, 32, 64]
    assert rows[2]["share"] == pytest.approx(0.117)  # the calibration point, by construction
    assert all(math.isfinite(c.error) for c in cells)
    assert rows[64]["share"] > rows[8]["share"] > rows[2]["share"]
    # a fixed cost per call (measured on its own) flattens the growth with log2 N that the
    # message steps alone predict: every cell's share is lower than without it
    assert rows[2]["comm_s"] > inputs["call_cost_us"] * 1e-6 > 0
    without = inputs["errors_without_the_call_cost"]
    assert all(c.error < without[c.workers] for c in cells)
    assert median_abs_error(cells) <= 0.15


def test_the_ddp_benchmark_replay_predicts_every_cell_from_the_one_gpu_step() -> None:
    """40 cells: 4 models × 1–16 GPUs × two bucket sizes; the one-GPU step without DDP is
    the compute, so comm is the only difference between the cells of a model."""
    cells, inputs = ddp_benchmark(load_hardware())
    assert len(cells) == 40 and {c.workers for c in cells} == {1, 2, 4, 8, 16}
    assert median_abs_error(cells) <= 0.15 and all(abs(c.error) <= 0.25 for c in cells)
    # its null, communication free, is printed beside it (issue 54)
    assert all(c.comm_free is not None and c.comm_free <= c.predicted + 1e-12 for c in cells)
    rows = [r for r in inputs["rows"] if r["model"] == "resnext101_32x8d"]
    # 1 GPU: no all-reduce at all, only DDP's own copies: 314 tensors into buckets and
    # back at 3.8 µs each, and 355 MB read and written twice at the V100's 900 GB/s
    own = 2 * 314 * 3.8e-6 + 4 * 355.2e6 / 900e9
    assert rows[0]["ddp_own_s"] == pytest.approx(own, rel=0.01)
    assert rows[0]["step_s"] == pytest.approx(0.415 + rows[0]["ddp_own_s"])
    assert rows[4]["allreduce_s"] > rows[3]["allreduce_s"] > 0  # 16 GPUs cross InfiniBand
    one_mb = [r for r in rows if r["bucket_mb"] == 1]
    assert one_mb[4]["allreduce_s"] > rows[4]["allreduce_s"]  # 1 MB buckets: more messages
    # a V100's fp32 peak is 15.7 TFLOP/s: each model's one-GPU step stays under it
    assert all(0 < m["achieved_tflops"] < 15.7 for m in inputs["models"].values())
    points = published_points(GOYAL_TASK, DDP_CLUSTER)
    assert [p["workers"] for p in points] == [8, 16] and points[1]["speedup"] == 2.0


def test_the_simulate_command_on_a_cluster_profile(dmlbench, tmp_path: Path) -> None:
    png = tmp_path / "scaling.png"
    code, out, err = dmlbench(
        "simulate-cluster",
        GOYAL_TASK,
        "--cluster",
        "goyal2017-bigbasin",
        "--nodes",
        "1,32",
        "--efficiency",
        "0.3",
        "--png",
        str(png),
    )
    assert code == 0, err
    assert "given (--efficiency)" in out and "published: 256 devices" in out
    assert png.stat().st_size > 10_000
    code, out, _ = dmlbench(
        "simulate-cluster", GOYAL_TASK, "--cluster", "dgx-a100", "--nodes", "1,2", "--json"
    )
    result = json.loads(out)
    assert [row["workers"] for row in result["rows"]] == [8, 16]
    assert result["efficiency_source"].startswith("assumed") and result["published"] == []
    code, out, _ = dmlbench("simulate-cluster", GOYAL_TASK, "--cluster", "list")
    assert code == 0 and "dgx-h100" in out and "goyal2017-bigbasin" in out
    code, listed, _ = dmlbench("simulate-cluster", "--cluster", "list")  # no task needed
    assert code == 0 and listed == out
    code, listed, _ = dmlbench("simulate-cluster", "list")  # was "Missing option '--cluster'"
    assert code == 0 and listed == out
    code, _, err = dmlbench("simulate-cluster", GOYAL_TASK)
    assert code == 2 and "which cluster? --cluster PROFILE" in err and err.count("\n") == 1
    code, _, err = dmlbench("simulate-cluster", "--cluster", "dgx-a100")
    assert code == 2 and "which task?" in err and err.count("\n") == 1
    code, _, err = dmlbench("simulate-cluster", GOYAL_TASK, "--cluster", "dgx-h10")
    assert code == 2 and err.count("\n") == 1 and "did you mean 'dgx-h100'" in err  # a usage error
    code, _, err = dmlbench(
        "simulate-cluster", GOYAL_TASK, "--cluster", "dgx-a100", "--dtype", "fp4"
    )
    assert code == 2 and "no fp4 peak" in err and err.count("\n") == 1


def test_the_profile_list_shows_each_name_whole_on_a_narrow_terminal() -> None:
    """`--cluster list` cut "goyal2017-bigb…" at 80 columns: the name --cluster takes."""
    from rich.console import Console

    from dmlbench.cli.views.clusters import hardware_table

    hardware = load_hardware()
    console = Console(width=60, record=True)
    console.print(hardware_table(hardware))
    lines = [line.strip() for line in console.export_text().splitlines()]
    assert all(name in lines for name in hardware.clusters)
    assert "all-reduce: hierarchical, halving-doubling between nodes" in " ".join(lines)


def test_a_run_on_the_device_lends_its_share_of_the_data_sheets_peak() -> None:
    from dmlbench.perfmodel.cluster import efficiency_from_runs
    from dmlbench.results.records import RunRecord

    def run(run_id: str, gpu: str, precision: str, flops_per_s: float) -> RunRecord:
        return RunRecord(
            run_id=run_id,
            task=GOYAL_TASK,
            status="success",
            division="open",
            created_at="2026-11-26",
            workers=1,
            local_batch=256,
            global_batch=256,
            seed=0,
            exchange="allreduce",
            spec={"recipe": {"precision": precision}},
            deviations={},
            environment={"gpus": [gpu]},
            run_dir="d",
            target=None,
            network="none",
            summary=RunSummary(finished=True, flops_per_s=flops_per_s),
        )

    h200 = load_hardware().accelerators["h200-sxm"]
    runs = [  # as measured on an H200 (BENCHMARKS.md): 72.6 fp32 (TF32 convolutions), 105 bf16
        run("a", "NVIDIA H200", "fp32", 72.6e12),
        run("b", "NVIDIA H200", "bf16", 105e12),
        run("c", "NVIDIA H100 80GB HBM3", "fp32", 50e12),  # another device
    ]
    small = [dataclasses.replace(run("d", "NVIDIA H200", "fp32", 42.6e12), local_batch=32)]
    share, source = efficiency_from_runs(runs, h200, "fp32")  # type: ignore[misc]
    assert share == pytest.approx(72.6 / 67) and "1 fp32 run " in source and "(a)" in source
    assert efficiency_from_runs(runs, h200, "bf16")[0] == pytest.approx(105 / 989.5)  # type: ignore[index]
    assert efficiency_from_runs(runs, h200, "tf32")[0] == pytest.approx(72.6 / 494.5)  # type: ignore[index]
    assert efficiency_from_runs(runs, h200, "fp8") is None
    assert (
        efficiency_from_runs(runs[:2], load_hardware().accelerators["a100-sxm4-80gb"], "fp32")
        is None
    )
    too_fast = [dataclasses.replace(run("e", "NVIDIA H200", "fp32", 72.6e12), local_batch=32)]
    with pytest.raises(SpecError, match=r"reached 108% of its fp32 peak.*--dtype tf32"):
        simulate_cluster(GOYAL_TASK, "dgx-h200", [1], runs=too_fast)
    assert efficiency_from_runs(runs + small, h200, "fp32", 256)[0] == pytest.approx(72.6 / 67)  # type: ignore[index]
    # simulate takes the runs at the recipe's batch (32 images): launch-bound, 8.6%
    measured = simulate_cluster(GOYAL_TASK, "dgx-h200", [1, 2], runs=runs + small, dtype="tf32")
    assert measured.efficiency == pytest.approx(42.6 / 494.5)
    assert measured.efficiency_source.startswith("measured: 1 tf32 run at 32 a device")


def test_a_measured_curve_gives_the_compute_at_any_local_batch() -> None:
    """Issue 54, item 2: at scale the per-device batch shrinks, and a step's fixed part
    (launches, the host) does not. A curve measured on the device (12 ms + 0.18 ms a
    sample) gives the compute at the simulated local batch in place of --efficiency."""
    curve = [[32, 0.012 + 32 * 0.00018], [256, 0.012 + 256 * 0.00018]]
    result = simulate_cluster(GOYAL_TASK, "dgx-h200", [1, 4], local_batch=64, curve=curve)
    assert result.local_batch == 64
    assert result.rows[0]["compute_s"] == pytest.approx(0.012 + 64 * 0.00018)
    assert "measured at local batch 32–256: 23.5 ms a step at 64" in result.efficiency_source
    one = simulate_cluster(GOYAL_TASK, "dgx-h200", [1], local_batch=64, samples_per_s=3200)
    assert one.rows[0]["compute_s"] == pytest.approx(64 / 3200)
    assert one.efficiency_source.startswith("measured")


@pytest.mark.parametrize(
    ("text", "says"),
    [("{", "not JSON"), ("[[32, -1]]", "pairs above 0"), ('[["a", 1]]', "pairs above 0")],
)
def test_a_bad_curve_file_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    from helpers import inside

    path = tmp_path / "curve.json"
    path.write_text(text)
    args = ("simulate-cluster", GOYAL_TASK, "--cluster", "dgx-h200", "--curve", str(path))
    done = inside(*args, check=False)
    assert done.returncode != 0 and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_goyals_errors_are_printed_against_each_assumed_constant() -> None:
    """Issue 54, item 6: the replay's agreement rests on assumed TCP constants; the
    sensitivity says how far, constant by constant."""
    from dmlbench.perfmodel.replays import goyal_sensitivity

    hardware = load_hardware()
    cost = task_cost(GOYAL_TASK)
    base = {f"{c.workers} {c.unit or 'eff'}": c.error for c in goyal(hardware, cost)[0]}
    rows = goyal_sensitivity(hardware, cost)
    at_profile = [r for r in rows if r["value"] == r["profile"]]
    assert at_profile and all(r["errors"] == pytest.approx(base) for r in at_profile)
    latency = {r["value"]: r["errors"]["352 s"] for r in rows if r["constant"] == "latency_us"}
    assert latency[5.0] < latency[25.0] < latency[100.0]
    # all-reduced as their section 4.1 says (summed inside each server, then 2·log2 32 =
    # 10 message steps between the servers, 14 among 44), no assumed constant of the TCP
    # link moves a cell by 2 points over its range; a flat ring's 510 steps moved them
    # by up to 97
    for constant in ("latency_us", "message_cost_us"):
        moved = [r["errors"] for r in rows if r["constant"] == constant]
        for cell in base:
            assert max(e[cell] for e in moved) - min(e[cell] for e in moved) < 0.02


def test_the_two_level_algorithm_on_a_cluster_hides_the_flat_rings_latency() -> None:
    """At 768 devices a flat ring pays 2·767 message steps a bucket; the two-level
    algorithm (NCCL's shape on NVLink and InfiniBand) pays 2·7 inside and 2·95 between.
    A profile all-reduces as its collective library does unless asked otherwise: a DGX's
    NCCL hierarchically, Goyal et al.'s Gloo hierarchically with halving and doubling
    between the servers (their section 4.1)."""
    flat = simulate_cluster(GOYAL_TASK, "dgx-a100", [96], dtype="bf16", algorithm="ring")
    two = simulate_cluster(GOYAL_TASK, "dgx-a100", [96], dtype="bf16")
    assert (flat.algorithm, two.algorithm) == ("ring", "hierarchical")
    assert two.rows[0]["allreduce_s"] < flat.rows[0]["allreduce_s"] / 3
    goyal_servers = simulate_cluster(GOYAL_TASK, "goyal2017-bigbasin", [32])
    assert goyal_servers.algorithm == "hierarchical, halving-doubling between nodes"
    assert goyal_servers.cluster["allreduce"] == goyal_servers.algorithm
    with pytest.raises(SpecError, match="ring or hierarchical"):
        simulate_cluster(GOYAL_TASK, "dgx-a100", [2], algorithm="ps")
