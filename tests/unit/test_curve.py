"""One device's step against its local batch (issue 54, item 2): the curve file, how
the model reads it at any batch, and the curve drawn from stored runs (no processes;
`bench curve`'s real runs are in the integration lane)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from dmlbench.errors import SpecError
from dmlbench.perfmodel.cluster import simulate_cluster
from dmlbench.perfmodel.curve import Curve, curve_from_runs, read_curve, step_line
from dmlbench.perfmodel.replays import GOYAL_TASK
from dmlbench.results.records import RunRecord, RunSummary

# The shape an H200 measured for ResNet-50 in bf16 (BENCHMARKS.md): flat to 64 images
# (launch-bound), linear beyond.
H200 = [[8, 0.0254], [32, 0.0268], [64, 0.0332], [128, 0.0356], [256, 0.0599]]


def test_the_curve_is_read_as_measured_between_its_batches() -> None:
    """At a measured batch the step is the measured one, not a line's through them all
    (the line misses the H200's 128 images by 15%); between two, on the segment."""
    curve = Curve.of(H200)
    for batch, seconds in H200:
        assert curve.step_at(batch)[0] == pytest.approx(seconds)
    fixed, slope = step_line(curve)
    assert abs(fixed + slope * 128 - 0.0356) / 0.0356 > 0.1
    between, says = curve.step_at(96)
    assert between == pytest.approx((0.0332 + 0.0356) / 2)
    assert says.startswith("measured at local batch 8–256") and "extrapolated" not in says


def test_past_its_ends_the_curve_follows_its_end_segments_within_physical_bounds() -> None:
    curve = Curve.of(H200)
    # beyond: the last segment's slope (190 µs an image), the marginal cost there
    beyond, says = curve.step_at(512)
    assert beyond == pytest.approx(0.0599 + (0.0599 - 0.0356) / 128 * 256)
    assert "extrapolated beyond 256" in says
    # below: the first segment, flat (the launch floor); never below the per-sample
    # time at the smallest batch measured
    assert curve.step_at(4)[0] == pytest.approx(0.0254 - (0.0268 - 0.0254) / 24 * 4)
    steep = Curve.of([[8, 0.008], [16, 0.032]])  # a segment steeper than proportion
    assert steep.step_at(4)[0] == pytest.approx(0.004)  # in proportion, not 0 or less
    # a last segment that falls (noise) is pooled flat and extends flat; one that rises
    # faster than in proportion grows only in proportion
    noisy = Curve.of([[32, 0.0113], [64, 0.0102]])
    assert noisy.step_at(128)[0] == pytest.approx((0.0113 + 0.0102) / 2)
    assert noisy.step_at(128, monotone=False)[0] == pytest.approx(0.0102)
    assert steep.step_at(32)[0] == pytest.approx(0.064)
    # one point: in proportion
    assert Curve.of([[32, 0.01]]).step_at(64)[0] == pytest.approx(0.02)


def test_a_step_that_falls_as_the_batch_grows_is_pooled_away() -> None:
    """The H200's bf16 ResNet-50 measured 29.4 ms at 16 images and 26.8 at 32: noise
    (leases differed by up to 40% at small batches). The reading pools the two to their
    mean, so a larger local batch never reads faster; the file keeps what was measured."""
    curve = Curve.of([[8, 0.0254], [16, 0.0294], [32, 0.0268], [64, 0.0332]])
    assert [b for b, _ in curve.monotone()] == [8, 16, 32, 64]
    assert [s for _, s in curve.monotone()] == pytest.approx([0.0254, 0.0281, 0.0281, 0.0332])
    steps = [curve.step_at(b)[0] for b in range(4, 200, 4)]
    assert steps == sorted(steps)
    assert curve.step_at(32, monotone=False)[0] == pytest.approx(0.0268)
    assert curve.points[2] == (32.0, 0.0268)


def test_repeated_batches_count_as_their_median_and_bad_points_are_refused() -> None:
    curve = Curve.of([[32, 0.03], [8, 0.01], [32, 0.02], [32, 0.07]])
    assert curve.points == ((8.0, 0.01), (32.0, 0.03))
    with pytest.raises(SpecError, match="pairs above 0"):
        Curve.of([[8, 0.0]])


def test_a_curve_file_says_where_it_was_measured_and_a_bare_list_still_reads(
    tmp_path: Path,
) -> None:
    written = Curve.of(H200, task="imagenet-resnet50", device="NVIDIA H200", precision="bf16")
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(written.to_json()))
    assert read_curve(path) == written
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(H200))
    assert read_curve(bare) == Curve.of(H200)
    assert read_curve(bare).device is None
    # a batch whose run failed: the file says so, and a script can tell partial from whole
    partial = Curve.of(H200[:-1], task="imagenet-resnet50", missing=(256,))
    path.write_text(json.dumps(partial.to_json()))
    assert json.loads(path.read_text())["missing"] == [256]
    assert read_curve(path) == partial and "missing" not in written.to_json()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"format": "something else", "version": 1, "points": H200}, "not a dmlbench step curve"),
        ({"format": "dmlbench step curve", "version": 2, "points": H200}, "of version 1"),
        ({"format": "dmlbench step curve", "version": 1, "points": []}, "pairs above 0"),
        (
            {"format": "dmlbench step curve", "version": 1, "device": 7, "points": H200},
            "device is not a short text",
        ),
        (
            {"format": "dmlbench step curve", "version": 1, "missing": ["x"], "points": H200},
            "missing batches are not a list of counts",
        ),
        ([[8, float("inf")]], "pairs above 0"),  # written 1e999, which Python reads as inf
        ("[[8, 0.01]", "not JSON"),
    ],
)
def test_a_bad_curve_file_is_refused_in_one_line(tmp_path: Path, data: object, says: str) -> None:
    path = tmp_path / "curve.json"
    text = data if isinstance(data, str) else json.dumps(data).replace("Infinity", "1e999")
    path.write_text(text)
    with pytest.raises(SpecError, match=says) as error:
        read_curve(path)
    assert "\n" not in str(error.value)


def test_a_curve_given_as_an_argument_is_named_without_an_option(tmp_path: Path) -> None:
    """benchmarks/curve_reading.py takes curves as arguments: its errors name no --curve."""
    path = tmp_path / "curve.json"
    path.write_text("[[8, 0.01]")
    with pytest.raises(SpecError, match=r"^\S*curve.json is not JSON") as error:
        read_curve(path, option="")
    assert "--curve" not in str(error.value)
    with pytest.raises(SpecError, match=r"curve file .* does not exist"):
        read_curve(tmp_path / "absent.json", option="")


@pytest.mark.parametrize(
    ("device", "profile"),
    [
        ("NVIDIA H200", "dgx-h200"),
        ("NVIDIA A100-SXM4-40GB", "dgx-a100-40gb"),  # before the 80 GB one's "A100"
        ("NVIDIA A100-SXM4-80GB", "dgx-a100"),
        ("AMD EPYC", None),
    ],
)
def test_bench_curve_names_the_profile_of_the_device_it_measured(
    device: str, profile: str | None
) -> None:
    """It said `--cluster PROFILE` whatever the device, and a CPU's curve on a GPU
    profile is that CPU's step times on, say, an A100 cluster."""
    from dmlbench.cli.bench import _curve_use
    from dmlbench.perfmodel.hardware import load_hardware

    kind = "gpu" if device.startswith("NVIDIA") else "cpu"
    said = _curve_use("imagenet-resnet50", Path("c.json"), device, kind)
    if profile is None:
        assert load_hardware().clusters_of(device) == []
        assert said.startswith(f"curve: c.json, {device}'s steps: no cluster profile has")
        assert "--hardware FILE" in said and "of kind: cpu" in said  # else it is refused
    else:
        assert load_hardware().clusters_of(device)[0] == profile
        assert f"--cluster {profile} --curve c.json" in said


def test_a_curve_from_another_device_or_precision_is_used_but_said() -> None:
    """The MLPerf replay moves a curve between devices on purpose; a user who does so
    by mistake is told, in the line that says where the compute came from. A bare list
    of points, which names no device, was taken as any profile's without a word."""
    h200 = Curve.of(H200, device="NVIDIA H200", precision="bf16")
    same = simulate_cluster(GOYAL_TASK, "dgx-h200", [1], local_batch=64, curve=h200, dtype="bf16")
    assert same.rows[0]["compute_s"] == pytest.approx(0.0332)
    assert "not measured on" not in same.efficiency_source
    assert "on NVIDIA H200 (bf16)" in same.efficiency_source
    other = simulate_cluster(GOYAL_TASK, "dgx-a100", [1], local_batch=64, curve=h200)
    assert other.rows[0]["compute_s"] == pytest.approx(0.0332)
    assert "not measured on this profile's NVIDIA A100" in other.efficiency_source
    assert "the peak here is fp32's" in other.efficiency_source
    # and in a note of its own, which the commands print apart from the table
    assert same.notes == [] and other.notes == [
        "the --curve was measured on NVIDIA H200, not on NVIDIA A100 SXM4 80 GB (2020): its "
        "step times are that device's, used as they are"
    ]
    # a bare list of points says no device: taken as the profile's, and said so
    bare = simulate_cluster(GOYAL_TASK, "dgx-a100", [1], local_batch=64, curve=Curve.of(H200))
    assert bare.rows[0]["compute_s"] == pytest.approx(0.0332)
    assert "the curve names no device, taken as NVIDIA A100" in bare.efficiency_source
    assert bare.notes == [
        "the --curve names no device: its step times are taken as NVIDIA A100 SXM4 80 GB "
        "(2020)'s (`dmlbench bench curve` writes a curve that says where it was measured)"
    ]
    another_task = Curve.of(H200, task="cifar10-resnet20")
    with pytest.raises(SpecError, match="measured on cifar10-resnet20's step, not"):
        simulate_cluster(GOYAL_TASK, "dgx-a100", [1], curve=another_task)


def test_the_shipped_curves_say_where_they_were_measured() -> None:
    """The H200 curves that BENCHMARKS.md and the docs use were bare lists: one given on
    an A100 profile (the docs' own `advise-cluster` example did) was read as an A100's
    steps without a word. Each now says its task, device, kind and precision, and a
    profile of another device is told so."""
    from helpers import REPO

    shipped = sorted((REPO / "benchmarks/results").rglob("*-curve.json"))
    assert len(shipped) >= 4
    for path in shipped:
        curve = read_curve(path)
        assert None not in (curve.task, curve.device, curve.kind, curve.precision), path
        assert curve.task is not None and path.name.startswith(curve.task), path
        assert f"-{curve.precision}-" in path.name, path
        if curve.kind == "gpu":  # a CPU's is refused on a GPU's profile (below)
            on_a100 = simulate_cluster(curve.task, "dgx-a100", [1], curve=curve, dtype="bf16")
            assert on_a100.notes and "not on NVIDIA A100" in on_a100.notes[0], path


def test_a_curve_of_another_kind_of_device_is_refused_in_one_line(tmp_path: Path) -> None:
    """A CPU's curve on a GPU profile was used as measured, with a note: a CPU's step
    taken for an H200's is off a hundredfold. Now refused, naming both and what to do;
    a CPU profile of one's own (kind: cpu) takes it, and a curve that does not say its
    kind (written before) is used with the note, as before."""
    from dmlbench.perfmodel.hardware import Accelerator, load_hardware

    cpu = Curve.of(H200, device="AMD EPYC 9654", precision="fp32", kind="cpu")
    with pytest.raises(SpecError, match="measured on AMD EPYC 9654, a CPU; NVIDIA H200") as error:
        simulate_cluster(GOYAL_TASK, "dgx-h200", [1], local_batch=64, curve=cpu)
    assert "\n" not in str(error.value) and "kind: cpu" in str(error.value)
    epyc = Accelerator(
        name="AMD EPYC 9654",
        peak_tflops={"fp32": 5.0},
        memory_gb=384,
        memory_bandwidth_gbs=460,
        matches=["EPYC 9654"],
        kind="cpu",
        source="a user's own",
    )
    seconds, source, notes = epyc.step_from(cpu, "fp32", 64)
    assert seconds == pytest.approx(0.0332) and notes == [] and "not measured" not in source
    unsaid = dataclasses.replace(cpu, kind=None)
    h200 = load_hardware().cluster("dgx-h200").accelerator
    assert h200.step_from(unsaid, "fp32", 64)[2]  # the note, as before
    # the file says it, and reads it back; a kind it does not know is refused
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(cpu.to_json()))
    assert read_curve(path).kind == "cpu"
    path.write_text(json.dumps({**cpu.to_json(), "kind": "tpu"}))
    with pytest.raises(SpecError, match="its kind is 'tpu', not one of gpu, cpu"):
        read_curve(path)


def _run(run_id: str, batch: int, step: float, **changes: object) -> RunRecord:
    values: dict[str, object] = {
        "run_id": run_id,
        "task": "imagenet-resnet50",
        "status": "throughput",
        "division": "open",
        "created_at": f"2026-11-28T06:00:{run_id}",
        "workers": 1,
        "local_batch": batch,
        "global_batch": batch,
        "seed": 0,
        "exchange": "allreduce",
        "spec": {"recipe": {"precision": "bf16"}},
        "deviations": {},
        "environment": {},
        "gpus": ["NVIDIA H200"],
        "run_dir": "d",
        "network": "none",
        "summary": RunSummary(finished=True, step_time_s=step, device="cuda:0"),
    }
    values.update(changes)
    return RunRecord(**values)  # type: ignore[arg-type]


def test_the_curve_of_stored_runs_takes_the_newest_runs_device_and_medians() -> None:
    runs = [
        _run("01", 8, 0.025),
        _run("02", 8, 0.027),
        _run("03", 8, 0.040),
        _run("04", 64, 0.033),
        _run("05", 64, 0.5, gpus=["NVIDIA A100-SXM4-80GB"]),  # older, other
        _run("06", 32, 0.2, status="failed"),  # did not end as planned
        _run("07", 32, 0.2, workers=2),  # not one device's
        _run("08", 16, 0.2, spec={"recipe": {"precision": "fp32"}}),  # another precision
        _run("09", 16, 0.1, summary=RunSummary(finished=True, step_time_s=0.1, device="cpu")),
        _run("10", 128, 0.036),
        _run("11", 128, 0.090, disturbed=True),  # other processes took its cores
        _run("12", 256, 0.070, disturbed=True),  # the only run at 256: it counts
    ]
    curve, elsewhere = curve_from_runs(runs, "bf16")
    assert curve.points == ((8.0, 0.027), (64.0, 0.033), (128.0, 0.036), (256.0, 0.070))
    assert (curve.device, curve.precision, curve.task) == ("NVIDIA H200", "bf16", runs[0].task)
    assert curve.kind == "gpu" and curve.to_json()["kind"] == "gpu"
    assert curve.runs == ("01", "02", "03", "04", "10", "12")
    assert curve_from_runs([runs[8]])[0].kind == "cpu"  # run 09 stepped on the CPU
    assert elsewhere == 2  # the A100's and the CPU's
    with pytest.raises(SpecError, match="no finished one-worker run"):
        curve_from_runs(runs[5:8], "bf16")
    # compiled with CUDA graphs, the newest: a curve of its own, said so in the file
    graphs = {"recipe": {"precision": "bf16"}, "compile": "reduce-overhead"}
    compiled = [_run("13", 8, 0.011, spec=graphs), _run("14", 64, 0.02, spec=graphs)]
    curve, elsewhere = curve_from_runs([*runs, *compiled], "bf16")
    assert curve.points == ((8.0, 0.011), (64.0, 0.02)) and curve.compiled == "reduce-overhead"
    assert elsewhere == 9 and curve.to_json()["compiled"] == "reduce-overhead"  # the eager 9
    assert "(bf16, compiled: reduce-overhead)" in curve.measured_on()


def test_bench_curve_refuses_before_any_run_what_it_could_not_finish(
    dmlbench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown task, a bad batch list, a default output name that is taken by a
    folder, or a --set of what the curve sets itself: one line each, and no run is
    started (the store is not even made)."""
    monkeypatch.chdir(tmp_path)
    store = str(tmp_path / "store")
    (tmp_path / "curve-cifar10-resnet20-bf16.json").mkdir()
    for args, says in [
        (("no-such-task",), "unknown task"),
        (("cifar10-resnet20", "--local-batch", "8,x"), "--local-batch '8,x'"),
        (("cifar10-resnet20", "--precision", "../../x"), "one of fp32, tf32, bf16"),
        (("cifar10-resnet20", "--precision", "bf16"), "is a folder"),
        # ran every batch on 4 workers, then found no one-worker run to draw a curve from
        (("cifar10-resnet20", "--set", "workers=4"), "drop workers=4 from --set"),
        (("cifar10-resnet20", "--set", "max_steps=9"), "drop max_steps=9 from --set"),
        (("cifar10-resnet20", "--set", "network=1gbit"), "drop network from --set"),
    ] + [(("cifar10-resnet20", "--device", "cuda"), "sees no CUDA device on this host")] * (
        not torch.cuda.is_available()
    ):
        code, _, err = dmlbench("bench", "curve", *args, "--store", store)
        assert code == 2 and says in err, err
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "store").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a CUDA device")
def test_a_run_on_cuda_where_there_is_none_is_refused_before_anything_starts(
    dmlbench, tmp_path: Path
) -> None:
    """It failed inside the worker with torch's AttributeError (`_cuda_setDevice`)."""
    store = tmp_path / "store"
    code, _, err = dmlbench("run", "synthetic-mlp", "--set", "device=cuda", "--store", str(store))
    assert code == 2 and "device=cuda: torch" in err and "device=auto or cpu" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not list(store.glob("runs/*"))


def test_a_falling_line_through_a_curve_is_said_to_be_noise() -> None:
    """Two noisy steps printed "least-squares line: 41.59 ms fixed + -864 µs a sample"."""
    from rich.console import Console

    from dmlbench.cli.views.clusters import curve_table

    def said(points: list[list[float]]) -> str:
        console = Console(width=200, record=True)
        console.print(curve_table(Curve.of(points, task="t"), 0))
        return console.export_text()

    assert "ms fixed + 500 µs a sample" in said([[8, 0.006], [16, 0.010]])
    falling = said([[8, 0.048], [16, 0.041]])
    assert "falling 875 µs a sample, which is noise: time more --steps" in falling
    assert "+ -" not in falling


def test_each_device_model_measures_its_own_curve_in_a_shared_store() -> None:
    """One store shared by two machines: a batch the H200 measured is not taken as
    measured on the A100 (the sweep, the resume key, names the device's model)."""
    from dmlbench.perfmodel.curve import curve_sweep

    h200 = curve_sweep("imagenet-resnet50", "NVIDIA H200", "bf16", 30, 10)
    a100 = curve_sweep("imagenet-resnet50", "NVIDIA A100-SXM4-40GB", "bf16", 30, 10)
    assert h200 != a100 and h200 == "curve-imagenet-resnet50-nvidia-h200-bf16-30x10"
    cpu = curve_sweep("digits-mlp", "AMD EPYC 7B13 64-Core Processor", "fp32", 30, 10)
    assert re.fullmatch(r"curve-digits-mlp-[a-z0-9-]+-fp32-30x10", cpu)
    assert curve_sweep("t", "../..//", "fp32", 1, 0) == "curve-t-device-fp32-1x0"  # data only
