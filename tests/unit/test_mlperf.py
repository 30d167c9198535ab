"""MLPerf Training's result logs as stored runs (issue 54, item 1): generated logs in
MLPerf's layout and format, a real SQLite store, and the compact copies the repository
keeps of v0.7's published logs, scored against MLPerf's published table."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, inside

from dmlbench.errors import StoreError
from dmlbench.results import ResultsStore
from dmlbench.results.mlperf import read_result
from dmlbench.results.mlperf_system import Devices

T0 = 1_600_000_000_000  # ms


def _line(key, value=None, at=0.0, rank=None, **metadata):
    event = {"namespace": "", "time_ms": T0 + at * 1000, "event_type": "POINT_IN_TIME"}
    event.update({"key": key, "value": value, "metadata": {"file": "x.py", **metadata}})
    return (f"{rank}: " if rank is not None else "") + ":::MLLOG " + json.dumps(event)


def write_log(
    path: Path,
    seconds: float,
    status="success",
    batch=256,
    rank=None,
    blocks=3,
    benchmark="resnet",
    quality=lambda i: 0.5 + 0.1 * i,
    platform="2xAcme Box",
    accumulation=None,
    accumulation_key="opt_gradient_accumulation_steps",
    division="closed",
    **drop,
):
    """A ResNet-like log: init, run_start, ``blocks`` blocks of 4 epochs with an
    evaluation of 10 s each (the ``i``-th logs ``quality(i)``), run_stop after
    ``seconds``; launcher output between the MLLOG lines."""
    lines = ["+ exec python train.py --batch-size 32", "some launcher output"]
    events = [
        ("init_start", None, -20.0, {}),
        ("submission_benchmark", benchmark, -19.0, {}),
        ("submission_org", "Acme", -19.0, {}),
        ("submission_division", division, -19.0, {}),
        ("submission_platform", platform, -19.0, {}),
        ("seed", 7, -18.0, {}),
        ("global_batch_size", batch, -18.0, {}),
        *([(accumulation_key, accumulation, -18.0, {})] if accumulation is not None else []),
        ("init_stop", None, -1.0, {}),
        ("run_start", None, 0.0, {}),
        ("train_samples", 1000, 0.0, {}),
    ]
    block = (seconds - 5) / blocks
    for i in range(blocks):
        start = 5 + i * block
        events += [
            ("block_start", None, start, {"first_epoch_num": 1 + 4 * i, "epoch_count": 4}),
            ("eval_start", None, start + block - 10, {"epoch_num": 4 * (i + 1)}),
            ("eval_stop", None, start + block, {"epoch_num": 4 * (i + 1)}),
            ("eval_accuracy", quality(i), start + block, {"epoch_num": 4 * (i + 1)}),
            ("block_stop", None, start + block, {"first_epoch_num": 1 + 4 * i}),
        ]
    events.append(("run_stop", None, seconds, {"status": status}))
    for key, value, at, metadata in events:
        if key in drop:
            continue
        lines.append(_line(key, value, at, rank, **metadata))
        if rank is not None:  # another rank's copy: never read
            lines.append(_line(key, "wrong" if value else value, at, rank + 1, **metadata))
        lines.append("[1,0]<stdout>: loss 2.3 step 120")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def submission(
    root: Path,
    times=(100.0, 110.0, 120.0, 130.0, 140.0),
    status=None,
    name="box_n2",
    nodes=2,
    batch=256,
    blocks=3,
    benchmark="resnet",
    division="closed",
    **described,
) -> Path:
    """``root/training_results_v0.7/Acme``: system ``box_n2`` (2 nodes × 4), five runs;
    ``described`` replaces fields of the system's description (None: leaves one out)."""
    sub = root / "training_results_v0.7" / "Acme"
    system = {
        "submitter": "Acme",
        "division": "closed",
        "system_name": name,
        "number_of_nodes": str(nodes),
        "accelerators_per_node": "4",
        "accelerator_model_name": "Acme X1",
        "host_networking": "2x 100Gb",
        "framework": "PyTorch",
        **described,
    }
    system = {key: value for key, value in system.items() if value is not None}
    (sub / "systems").mkdir(parents=True, exist_ok=True)
    (sub / "systems" / f"{name}.json").write_text(json.dumps(system))
    for i, seconds in enumerate(times):
        run_status = (status or {}).get(i, "success")
        path = sub / f"results/{name}/{benchmark}" / f"result_{i}.txt"
        write_log(
            path, seconds, run_status, batch, blocks=blocks, benchmark=benchmark, division=division
        )
    return sub


def test_a_log_is_scored_as_mlperf_scores_it(tmp_path: Path) -> None:
    sub = submission(tmp_path, times=(200.0,))
    run = read_result(sub / "results/box_n2/resnet/result_0.txt")
    assert (run.devices.nodes, run.devices.per_node, run.workers) == (2, 4, 8)
    assert run.status == "success" and run.global_batch == 256
    assert run.time_to_train_s == pytest.approx(200.0)
    assert run.eval_s == pytest.approx(30.0)  # three evaluations of 10 s
    assert run.epochs == 12 and run.samples == 12_000
    assert run.throughput == pytest.approx(12_000 / 170.0)
    assert run.startup_s == pytest.approx(5.0) and run.init_s == pytest.approx(20.0)
    assert [e.metric for e in run.evals] == pytest.approx([0.5, 0.6, 0.7])
    assert run.target == 0.759  # v0.7's ResNet quality target
    assert run.origin["round"] == "v0.7" and run.origin["submitter"] == "Acme"
    assert run.origin["path"] == "Acme/results/box_n2/resnet/result_0.txt"


def _timed_log(path: Path, benchmark: str, events: list[tuple[str, float, dict]]) -> Path:
    """A log of ``events`` (key, seconds after run_start, metadata) between a header and
    run_stop at 100 s; eval_accuracy logs 0.5."""
    head = [("submission_benchmark", benchmark, -2.0, {}), ("global_batch_size", 256, -2.0, {})]
    head += [("train_samples", 1000, -1.0, {}), ("run_start", None, 0.0, {})]
    body = [(k, 0.5 if k == "eval_accuracy" else None, at, meta) for k, at, meta in events]
    tail = [("run_stop", None, 100.0, {"status": "success"})]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(_line(k, v, at, **meta) for k, v, at, meta in head + body + tail))
    return path


def test_evaluation_is_taken_out_only_where_nothing_trains_beside_it(tmp_path: Path) -> None:
    """Google's DLRM on TPUs logs each block as evaluated, start to end: taking that out
    left 1.5 s of a 72 s run and 3.3 billion samples/s. Mask R-CNN's next epoch starts
    while the last evaluation runs; an evaluation inside an epoch pauses it (NVIDIA's
    DLRM evaluates every 0.05 epochs)."""
    sub = submission(tmp_path, times=())
    log = sub / "results/box_n2/resnet/result_0.txt"

    def evaluated(start: float, stop: float) -> list[tuple[str, float, dict]]:
        score = ("eval_accuracy", stop, {"epoch_num": 4})
        return [("eval_start", start, {}), score, ("eval_stop", stop, {})]

    spanned = [("block_start", 0.0, {}), *evaluated(0.01, 49.9), ("block_stop", 50.0, {})]
    spanned += [("block_start", 50.0, {}), *evaluated(50.0, 99.8), ("block_stop", 99.8, {})]
    assert read_result(_timed_log(log, "resnet", spanned)).eval_s == 0.0
    after = [("block_start", 0.0, {}), *evaluated(40.0, 50.0), ("block_stop", 50.0, {})]
    assert read_result(_timed_log(log, "resnet", after)).eval_s == pytest.approx(10.0)
    overlapped = [("epoch_start", 0.0, {}), ("epoch_stop", 40.0, {}), *evaluated(40.0, 70.0)]
    overlapped += [("epoch_start", 60.0, {}), ("epoch_stop", 100.0, {})]
    assert read_result(_timed_log(log, "resnet", overlapped)).eval_s == pytest.approx(20.0)
    paused = [("epoch_start", 0.0, {}), *evaluated(30.0, 35.0), ("epoch_stop", 100.0, {})]
    assert read_result(_timed_log(log, "resnet", paused)).eval_s == pytest.approx(5.0)


def test_an_imported_run_is_dated_when_it_ran(tmp_path: Path) -> None:
    """Imported runs were dated when they were imported: a report of MLPerf's v0.7 round
    (2020) said it was run today. HugeCTR's logs give some times in seconds."""
    from dmlbench.results.mlperf_clock import started_at

    sub = submission(tmp_path, times=(100.0,))
    store = tmp_path / "store"
    inside("results", "--store", str(store), "--import-mlperf", str(sub))
    (run,) = ResultsStore(store).runs()
    assert run.created_at == "2020-09-13T12:26:20+00:00"  # T0 - 20 s: init_start's
    hugectr = [{"time_ms": 1592985147}, {"time_ms": 1592669537412}]  # seconds, then ms
    assert started_at(hugectr) == "2020-06-20T16:12:17+00:00"
    assert started_at(hugectr[:1]) is None  # no date: the store dates it when imported


def test_dlrms_epochs_are_its_evaluations_share_of_an_epoch(tmp_path: Path) -> None:
    """DLRM is evaluated every 0.05 epochs; NVIDIA's logs say 1 + the epochs trained
    (1.05, ...), Google's the evaluation's number (1, 2, ...): 1.9 and 18 epochs for
    0.9 of one, 20 times the samples it trained."""
    sub = submission(tmp_path, times=())
    log = sub / "results/box_n2/dlrm/result_0.txt"
    for first in (1.05, 1):
        numbers = [first + (0.05 if first != 1 else 1) * i for i in range(18)]
        evals = [("eval_accuracy", 5.0 * (i + 1), {"epoch_num": n}) for i, n in enumerate(numbers)]
        run = read_result(_timed_log(log, "dlrm", evals))
        assert run.epochs == pytest.approx(0.9) and run.samples == 900
        assert [e.epoch for e in run.evals][:2] == pytest.approx([0.05, 0.1])


def test_only_rank_zeros_lines_are_read(tmp_path: Path) -> None:
    sub = submission(tmp_path, times=())
    path = write_log(sub / "results/box_n2/resnet/result_0.txt", 90.0, rank=0)
    run = read_result(path)
    assert run.global_batch == 256 and run.seed == 7  # rank 1 logged "wrong"


def test_import_stores_every_run_and_prints_the_olympic_score(tmp_path: Path) -> None:
    sub = submission(tmp_path, status={4: "aborted"})
    store = tmp_path / "store"
    done = inside("results", "--store", str(store), "--import-mlperf", str(sub))
    # the aborted run counts as the slowest: the olympic mean drops it and the fastest
    assert "imported 5 MLPerf runs" in done.stdout
    assert "4/5 converged; olympic score 2.00 min" in done.stdout  # MLPerf's unit
    runs = ResultsStore(store).runs()
    assert sorted(r.status for r in runs) == ["success"] * 4 + ["target_not_reached"]
    assert all(r.external and r.task == "mlperf/resnet" and r.workers == 8 for r in runs)
    assert {r.origin["path"] for r in runs} == {
        f"Acme/results/box_n2/resnet/result_{i}.txt" for i in range(5)
    }
    again = inside("results", "--store", str(store), "--import-mlperf", str(sub))
    assert "imported 0 MLPerf runs" in again.stdout and "(5 already there)" in again.stdout
    assert len(ResultsStore(store).runs()) == 5
    shown = inside("results", "--store", str(store), runs[0].run_id)
    assert "imported, read-only" in shown.stdout and "MLPerf Training v0.7" in shown.stdout
    # a start of five ids: which, not "no single run matches"
    several = inside("results", "--store", str(store), "mlperf-v0.7-acme", check=False)
    assert several.returncode == 2 and "5 runs start or end with 'mlperf-v0.7-acme'" in " ".join(
        several.stderr.split()
    )
    assert "give more of one's id" in " ".join(several.stderr.split())
    assert "8 devices (2 nodes × 4)" in shown.stdout
    one = submission(tmp_path / "one", times=(90.0,), name="box", nodes=1)
    inside("results", "--store", str(store), "--import-mlperf", str(one))
    alone = next(r for r in ResultsStore(store).runs() if r.nodes == 1)
    shown = inside("results", "--store", str(store), alone.run_id)
    assert "4 devices (1 node × 4)" in shown.stdout


def test_imported_runs_compare_beside_each_other(tmp_path: Path) -> None:
    store = tmp_path / "store"
    inside("results", "--store", str(store), "--import-mlperf", str(submission(tmp_path)))
    done = inside("compare", "--store", str(store), "--task", "mlperf/resnet", "--json")
    rows = json.loads(done.stdout)
    assert len(rows) == 1  # five repeats of one submission: one row
    assert rows[0]["runs"] == 5 and rows[0]["tta_olympic"] == pytest.approx(120.0)
    # an update's time, as this machine's runs report it: compare's "step ms" was "—"
    for run in ResultsStore(store).runs():
        assert run.summary.step_time_s == pytest.approx(256 / run.throughput)
    assert rows[0]["step_time_mean"] > 0
    shown = inside("compare", "--store", str(store), "--task", "mlperf/resnet").stdout
    words = " ".join(shown.split())  # the legend wraps where the terminal ends
    assert "olympic" in words and "a run short of the target counts as ∞" in words
    # no price asked: no cost column, and no note on what the example price leaves out
    header = next(line for line in shown.splitlines() if line.lstrip().startswith("N "))
    assert "cost" not in header and "No cost" not in words
    # --price: the terminal's table shows the cost --json has had all along (it had none)
    from dmlbench.report.formats import money

    asked = ("compare", "--store", str(store), "--task", "mlperf/resnet", "--price", "3600")
    (row,) = json.loads(inside(*asked, "--json").stdout)
    shown = inside(*asked).stdout
    header = next(line for line in shown.splitlines() if line.lstrip().startswith("N "))
    cells = next(line for line in shown.splitlines() if line.lstrip().startswith("8 ")).split()
    assert header.split()[-1] == "cost" and cells[-1] == money(row["cost_to_target"])
    assert row["cost_to_target"] == pytest.approx(8 * row["tta_mean"])  # a worker-second: 1
    assert "cost: USD to the target" in " ".join(shown.split())


def test_a_report_of_imported_systems_draws_only_what_their_logs_hold(tmp_path: Path) -> None:
    """Two MLPerf systems, each at one node count: the report drew a speedup of each
    over itself against a linear line to 16×, an empty phases figure and an empty loss
    panel (the logs hold accuracy only)."""
    from dmlbench.report.html import build_sections

    store = tmp_path / "store"
    for name, nodes in (("box_n2", 2), ("box_n32", 32)):
        sub = submission(tmp_path / name, name=name, nodes=nodes)
        inside("results", "--store", str(store), "--import-mlperf", str(sub))
    runs = ResultsStore(store).runs()
    assert sorted({r.workers for r in runs}) == [8, 128]
    (section,) = build_sections(runs, price=None)
    assert {"speedup", "efficiency", "phases"}.isdisjoint(section.figures)
    assert "time-to-accuracy" in section.figures
    (panel,) = section.figures["curves"].axes  # accuracy alone
    assert panel.get_ylabel() == "top-1 accuracy, %"  # the benchmark's own quality


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("no run_start", "has no run_start"),
        ("batch as text", "global_batch_size is '256'"),
        ("no system", "system description"),
        ("fifo", "not a regular file"),
        ("device", "not a regular file"),
        ("no mllog", "holds no MLLOG line"),
        ("absent", "does not exist"),
    ],
)
def test_a_damaged_log_is_one_line_and_nothing_is_stored(
    tmp_path: Path, damage: str, says: str
) -> None:
    sub = submission(tmp_path, times=())
    path = sub / "results/box_n2/resnet/result_0.txt"
    path.parent.mkdir(parents=True)
    if damage == "no run_start":
        write_log(path, 100.0, run_start=True)
    elif damage == "batch as text":
        write_log(path, 100.0, batch="256")
    elif damage == "no system":
        write_log(path, 100.0)
        (sub / "systems" / "box_n2.json").unlink()
    elif damage == "fifo":
        os.mkfifo(path)
    elif damage == "device":
        path.symlink_to("/dev/zero")
    elif damage == "absent":
        pass  # a typo in the path: said as such, not as a layout
    else:
        path.write_text("launcher output only\n")
    store = tmp_path / "store"
    done = inside("results", "--store", str(store), "--import-mlperf", str(path), check=False)
    assert done.returncode != 0 and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not store.exists()  # refused before the first write: no store was made


def test_a_damaged_log_in_a_folder_is_skipped_and_the_rest_stored(tmp_path: Path) -> None:
    sub = submission(tmp_path, times=(100.0, 110.0, 120.0))
    write_log(sub / "results/box_n2/resnet/result_1.txt", 110.0, run_stop=True)
    store = tmp_path / "store"
    done = inside("results", "--store", str(store), "--import-mlperf", str(sub))
    assert "imported 2 MLPerf runs" in done.stdout
    assert "result_1.txt" in done.stderr and "has no run_stop" in done.stderr
    assert len(ResultsStore(store).runs()) == 2
    # a file that cannot be read at all is said by its own error, naming it once
    unreadable = sub / "results/box_n2/resnet/result_3.txt"
    os.mkfifo(unreadable)
    again = inside("results", "--store", str(store), "--import-mlperf", str(sub))
    (line,) = [line for line in again.stderr.splitlines() if "result_3.txt" in line]
    assert line.startswith("skipped: ") and "not a regular file" in line
    assert line.count("result_3.txt") == 1


def test_published_variants_of_the_format_are_read(tmp_path: Path) -> None:
    """What v0.7's whole repository holds beside NVIDIA's ResNet and BERT: Mask R-CNN's
    evaluations log box and mask AP at once, Dell EMC spelled ``number of nodes``, and
    Intel's systems trained on their Xeons (no accelerator). Each was skipped as
    damaged, 145 logs in all."""
    both = {"quality": lambda i: {"BBOX": 0.2 + 0.1 * i, "SEGM": 0.1 + 0.1 * i}}
    sub = submission(tmp_path / "mask", times=(), benchmark="maskrcnn")
    mask = sub / "results/box_n2/maskrcnn/result_0.txt"
    masked = write_log(mask, 90.0, benchmark="maskrcnn", **both)
    run = read_result(masked)
    assert [e.metric for e in run.evals] == pytest.approx([0.2, 0.3, 0.4])  # box AP
    assert run.target == 0.377  # v0.7's box AP target, on the curve's own quality
    other = write_log(sub / "results/box_n2/ssd/result_0.txt", 90.0, benchmark="ssd", **both)
    with pytest.raises(StoreError, match="eval_accuracy holds BBOX, SEGM: which one is ssd's"):
        read_result(other)
    dell = {"number_of_nodes": None, "number of nodes": "4", "submitter": "Dell EMC"}
    sub = submission(tmp_path / "dell", times=(), name="c4140", **dell)
    unset = "4xSUBMISSION_PLATFORM_PLACEHOLDER"  # the reference code's, left as it was
    log = sub / "results/c4140/resnet/result_0.txt"
    log = write_log(log, 90.0, platform=unset, accumulation=0)  # Google's TPU logs say 0
    run = read_result(log)
    assert run.devices.nodes == 4 and run.gradient_accumulation == 1
    # from v1.0 the closed rules name it gradient_accumulation_steps (mlperf-logging)
    newer = write_log(log, 90.0, accumulation=3, accumulation_key="gradient_accumulation_steps")
    assert read_result(newer).gradient_accumulation == 3
    # the log names the organisation whose code it ran ("Acme"), the system its submitter
    assert run.origin["submitter"] == "Dell EMC" and run.origin["platform"] is None
    xeon = {"accelerators_per_node": "0", "accelerator_model_name": "N/A"}
    xeon |= {"host_processors_per_node": "8", "host_processor_model_name": "Xeon 8380H"}
    sub = submission(tmp_path / "intel", times=(90.0,), name="cpx", nodes=1, **xeon)
    store = tmp_path / "store"
    done = inside("results", "--store", str(store), "--import-mlperf", str(sub))
    assert "1 Xeon 8380H" not in done.stdout and "8 Xeon 8380H × batch 256" in done.stdout
    (cpu,) = ResultsStore(store).runs()
    assert cpu.workers == 8 and cpu.summary.device == "Xeon 8380H"
    assert cpu.environment["gpus"] == []  # no GPU to list
    xeon["host_processors_per_node"] = None
    sub = submission(tmp_path / "none", times=(90.0,), name="cpx", nodes=1, **xeon)
    with pytest.raises(StoreError, match="host_processors_per_node is None"):
        read_result(sub / "results/cpx/resnet/result_0.txt")


def test_logs_skipped_for_one_reason_are_said_once_per_folder(tmp_path: Path) -> None:
    """A whole round's import skipped each of minigo's 80 logs (no global batch) in a
    line of its own, naming the file twice."""
    sub = submission(tmp_path, times=(100.0,))
    for i in range(3):
        write_log(sub / f"results/box_n2/minigo/result_{i}.txt", 90.0, global_batch_size=True)
    write_log(sub / "results/box_n2/ssd/result_0.txt", 90.0, run_stop=True)
    store = tmp_path / "store"
    done = inside("results", "--store", str(store), "--import-mlperf", str(sub))
    assert "imported 1 MLPerf run " in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2
    (minigo,) = [line for line in lines if "minigo" in line]
    (ssd,) = [line for line in lines if "ssd" in line]
    assert minigo.startswith("skipped 3 logs in ") and minigo.count("minigo") == 1
    assert "logs no global_batch_size" in minigo
    assert ssd.count("result_0.txt") == 1 and "has no run_stop" in ssd


def test_the_replay_leaves_out_what_the_import_skips_and_refuses_no_round_in_a_line(
    tmp_path: Path,
) -> None:
    """The held-out check runs the replay on a later round's whole folder, where minigo's
    logs (no global batch) stopped it with a traceback."""
    sub = submission(tmp_path, times=(100.0,))
    for i in range(2):
        write_log(sub / f"results/box_n2/minigo/result_{i}.txt", 90.0, global_batch_size=True)
    replay = [sys.executable, str(REPO / "benchmarks" / "replay_mlperf.py"), "--results"]
    done = subprocess.run([*replay, str(sub)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (minigo,) = [line for line in done.stdout.splitlines() if "minigo" in line]
    assert minigo.startswith("left out: skipped 2 logs in ") and "global_batch_size" in minigo
    assert "left out: box_n2 resnet: no profile for the family box" in done.stdout
    missing = subprocess.run(
        [*replay, str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().endswith("does not exist: give an MLPerf result file or folder")
    assert len(missing.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("system", "per_node", "model", "profile"),
    [
        ("dgx1_ngc20.06_mxnet", 8, "NVIDIA V100-SXM2-16GB (300W)", "dgx1-v100-edr"),
        ("dgx2h_n32_ngc20.06_mxnet", 16, "NVIDIA V100-SXM3-32GB (450W)", "dgx2h-v100"),
        ("dgxa100_n2_ngc20.06_mxnet", 8, "NVIDIA A100-SXM4-40GB (400W)", "dgx-a100-40gb"),
        ("dgxa100_n2_ngc21.05_mxnet", 8, "NVIDIA A100-SXM4-80GB (400W)", "dgx-a100"),
        ("dgxa100_n2_x", 4, "NVIDIA A100-SXM4-40GB (400W)", None),
        ("DSS8440", 8, "Nvidia Tesla V100S-PCIe-32GB", None),  # a V100, but no DGX-1
    ],
)
def test_the_replay_takes_a_systems_hardware_from_its_family_and_description(
    system: str, per_node: int, model: str, profile: str | None
) -> None:
    """A family's name no longer decides the profile alone, which called every
    ``dgxa100_…`` system a 40 GB one: a later round's 80 GB DGX A100 is one of those."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        replay = importlib.import_module("replay_mlperf")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    devices = Devices(nodes=2, per_node=per_node, model=model, accelerators=True)
    found, why = replay.profile_for(system, devices, replay.load_hardware())
    assert found == profile and bool(why) == (profile is None)
    if system == "dgxa100_n2_x":
        assert why == f"no dgxa100 profile has 4 × {model} a node"


def test_a_checkout_under_another_name_is_shown_without_a_round(tmp_path: Path) -> None:
    """A repository cloned into a folder of another name: its round is unknown, and the
    run's summary said "MLPerf Training None" and "log None Acme/results/..."."""
    sub = submission(tmp_path, times=(90.0,))
    moved = sub.parents[1] / "results07" / "Acme"
    sub.parent.rename(moved.parent)
    store = tmp_path / "store"
    inside("results", "--store", str(store), "--import-mlperf", str(moved))
    (run,) = ResultsStore(store).runs()
    shown = inside("results", "--store", str(store), run.run_id).stdout
    assert "None" not in shown and "MLPerf Training (round unknown)" in shown
    assert "Acme/results/box_n2/resnet/result_0.txt" in shown


def test_the_reports_terminal_table_lists_systems_in_the_numbers_order(tmp_path: Path) -> None:
    """`report` printed `tpu-v4-128` before `tpu-v4-16`, as text sorts, where its
    letters and figures follow the numbers (16 before 128)."""
    store = tmp_path / "store"
    for name, nodes in (("box_n16", 16), ("box_n128", 128)):
        sub = submission(tmp_path / name, times=(90.0,), name=name, nodes=nodes)
        inside("results", "--store", str(store), "--import-mlperf", str(sub))
    done = inside("report", "--store", str(store), "--out", str(tmp_path / "r.html"))
    rows = [line for line in done.stdout.splitlines() if "system=box_n1" in line]
    assert len(rows) == 2 and "box_n16 " in rows[0] and "box_n128 " in rows[1]


def test_imported_systems_are_listed_by_their_scale_not_their_names(tmp_path: Path) -> None:
    """v0.7's ResNet-50 systems read 8, 512, 16, 16, 768, 8 devices down `compare`'s
    table: their labels began with the system's name (dgx1, dgx2h_n32, dgx2h, ...),
    whose digits ordered them."""
    store = tmp_path / "store"
    for name, nodes in (("a9_big", 32), ("z1_small", 1), ("m5_mid", 4)):
        sub = submission(tmp_path / name, times=(90.0,), name=name, nodes=nodes)
        inside("results", "--store", str(store), "--import-mlperf", str(sub))
    shown = inside("compare", "--store", str(store), "--task", "mlperf/resnet").stdout
    rows = [line.split() for line in shown.splitlines() if line.lstrip()[:1].isdigit()]
    assert [int(row[0]) for row in rows] == [4, 16, 128]  # devices: 4 a node
    legend = [line for line in shown.splitlines() if "system=" in line]
    assert [line.split("system=")[1].split()[0] for line in legend] == [
        "z1_small",
        "m5_mid",
        "a9_big",
    ]


def test_compare_by_a_long_value_folds_it_and_cuts_no_figure(tmp_path: Path) -> None:
    """`compare --by device` of v0.7's BERT systems at 80 columns cut every figure short
    ("2,972.1±149…", "20/5,1…") to make room for "NVIDIA A100-SXM4-40GB (400W)"."""
    store = tmp_path / "store"
    for name, nodes, gpu in (("big_n32", 32, "A100-SXM4-40GB (400W)"), ("one", 1, "V100")):
        sub = submission(
            tmp_path / name,
            times=(2972.1, 3120.5),
            name=name,
            nodes=nodes,
            batch=5120,
            accelerator_model_name=f"NVIDIA {gpu}",
        )
        inside("results", "--store", str(store), "--import-mlperf", str(sub))
    from rich.console import Console

    from dmlbench.cli.views.tables import scaling_tables
    from dmlbench.report import analysis, frames

    frame = frames.runs_frame(ResultsStore(store).runs())
    console = Console(width=80, record=True)
    for table in scaling_tables(analysis.scaling_table(frame, by=["device"]), by=["device"]):
        console.print(table)
    shown = console.export_text()
    lines = shown.splitlines()
    assert "…" not in shown and all(len(line) <= 80 for line in lines), shown
    assert shown.count("3,046.3±104.9") == 2 and "40/5,120" in shown and "1,280/5,120" in shown
    rows = [line for line in lines if line[:1].isalnum() and "·" not in line]
    rows = rows[1 : rows.index(next(r for r in rows if r.startswith("conv:")))]  # below titles
    assert len(rows) > 2 and "A100-SXM4" in "".join(r.split()[0] for r in rows)  # folded


def test_compare_by_another_column_than_workers_prints_a_table(tmp_path: Path) -> None:
    """`compare --by nodes` printed pandas' dump of the table: fifty columns, folded."""
    store = tmp_path / "store"
    for name, nodes in (("box_n2", 2), ("box_n32", 32)):
        sub = submission(tmp_path / name, times=(90.0, 100.0, 110.0), name=name, nodes=nodes)
        inside("results", "--store", str(store), "--import-mlperf", str(sub))
    shown = inside("compare", "--store", str(store), "--by", "nodes").stdout
    assert "tta_mean" not in shown and "throughput_only" not in shown
    header = next(line for line in shown.splitlines() if line.lstrip().startswith("nodes "))
    assert header.split()[:2] == ["nodes", "variant"] and "olympic" in header
    rows = [line.split() for line in shown.splitlines() if "system=box_n" in line]
    assert sorted(row[0] for row in rows) == ["2", "32"]
    assert all("100.0±10.0" in row for row in rows)  # each system's three runs


def test_compare_keeps_each_submitters_fastest_system(tmp_path: Path) -> None:
    """`--by submitter` was refused, though a round is read submitter by submitter."""
    store = tmp_path / "store"
    for name, times, who in (
        ("a1", (90.0,), "Acme"),
        ("a2", (50.0,), "Acme"),
        ("z", (70.0,), "Zeta"),
    ):
        sub = submission(tmp_path / name, times=times, name=name, nodes=1, submitter=who)
        inside("results", "--store", str(store), "--import-mlperf", str(sub))
    asked = ("--by", "submitter", "--best-by", "time_to_accuracy", "--json")
    rows = json.loads(inside("compare", "--store", str(store), *asked).stdout)
    assert sorted((r["submitter"], r["tta_mean"]) for r in rows) == [("Acme", 50.0), ("Zeta", 70.0)]


def test_an_imported_runs_name_as_a_task_says_what_to_give_instead() -> None:
    """`simulate-cluster mlperf/resnet` said "unknown task" and pointed at plugins."""
    done = inside("simulate-cluster", "mlperf/resnet", "--cluster", "dgx-a100", check=False)
    assert done.returncode != 0 and "names imported MLPerf runs" in done.stderr
    assert "--converge-from mlperf/resnet" in done.stderr and "plugin" not in done.stderr
    # `tasks` says which task MLPerf's benchmark is, and how its runs serve it
    listed = " ".join(inside("tasks").stdout.split())
    assert "MLPerf's resnet: --converge-from mlperf/resnet" in listed
    assert listed.count("--converge-from") == 1  # no other task is one of MLPerf's


def test_an_imported_benchmarks_curves_are_named_by_its_quality(tmp_path: Path) -> None:
    """GNMT's curves (SacreBLEU, logged 0.24 for 24.0) were drawn as "accuracy, %"."""
    from dmlbench.report.html import build_sections

    store = tmp_path / "store"
    sub = submission(tmp_path, times=(90.0, 95.0), benchmark="gnmt")
    for log in sorted(sub.glob("results/*/gnmt/result_*.txt")):
        write_log(log, 90.0, benchmark="gnmt", quality=lambda i: 0.20 + 0.02 * i)
    inside("results", "--store", str(store), "--import-mlperf", str(sub))
    (section,) = build_sections(ResultsStore(store).runs(), price=None)
    (panel,) = section.figures["curves"].axes
    assert panel.get_ylabel() == "SacreBLEU"  # on 0 to 100, as the rules write it
    assert any(line.get_label() == "target 24 BLEU" for line in panel.get_lines())
    assert panel.yaxis.get_major_formatter()(0.24, 0) == "24"  # not 0.24, nor 24%


def test_an_imported_quality_is_written_as_mlperfs_rules_write_it(tmp_path: Path) -> None:
    """A BLEU of 26.0 (logged 0.26) read "26.0%", and DLRM's AUC 0.8026 "80.3%" beside
    a target of "80.2%"; a log whose platform is the reference code's placeholder read
    "box (None)"."""
    store = tmp_path / "store"
    gnmt = submission(tmp_path / "g", times=(90.0,), benchmark="gnmt")
    for log in gnmt.glob("results/*/gnmt/result_*.txt"):
        write_log(log, 90.0, benchmark="gnmt", quality=lambda i: 0.22 + 0.02 * i)
    dlrm = submission(tmp_path / "d", times=(90.0,), name="box", nodes=1, benchmark="dlrm")
    for log in dlrm.glob("results/*/dlrm/result_*.txt"):
        write_log(
            log,
            90.0,
            benchmark="dlrm",
            quality=lambda i: 0.8 + 0.0013 * i,
            platform="SUBMISSION_PLATFORM_PLACEHOLDER",
        )
    for sub in (gnmt, dlrm):
        inside("results", "--store", str(store), "--import-mlperf", str(sub))
    listed = inside("results", "--store", str(store)).stdout
    assert "26.00 BLEU" not in listed and "26.0 BLEU" in listed and "0.8026 AUC" in listed
    assert "%" not in listed
    runs = {r.task: r for r in ResultsStore(store).runs()}
    shown = inside("results", "--store", str(store), runs["mlperf/gnmt"].run_id).stdout
    assert "time to 24.0 BLEU" in shown and "best 26.0 BLEU" in shown
    shown = inside("results", "--store", str(store), runs["mlperf/dlrm"].run_id).stdout
    assert "time to 0.8025 AUC" in shown and "best 0.8026 AUC" in shown
    assert "None" not in shown and "Acme, box; imported" in shown


def test_a_path_outside_mlperfs_layout_is_refused(tmp_path: Path) -> None:
    log = write_log(tmp_path / "result_0.txt", 100.0)
    done = inside(
        "results", "--store", str(tmp_path / "s"), "--import-mlperf", str(log), check=False
    )
    assert done.returncode != 0 and "results/<system>/<benchmark>/result_N.txt" in done.stderr


# MLPerf Training v0.7's published results table (mlcommons.org, "Training v0.7 results",
# closed division, NVIDIA): minutes, the olympic mean of each submission's runs.
PUBLISHED_MINUTES = {
    ("dgxa100_ngc20.06_mxnet", "resnet"): 39.78,
    ("dgxa100_ngc20.06_pytorch", "bert"): 49.01,
    ("dgxa100_n32_ngc20.06_pytorch", "bert"): 3.36,
}


def test_the_kept_v07_logs_score_as_mlperf_published(tmp_path: Path) -> None:
    from dmlbench.results.mlperf import olympic_score, result_files

    kept = REPO / "benchmarks" / "data" / "mlperf" / "training_results_v0.7"
    runs = [read_result(p) for p in result_files(kept)]
    for (system, benchmark), minutes in PUBLISHED_MINUTES.items():
        mine = [r for r in runs if r.origin["system"] == system and r.benchmark == benchmark]
        assert len(mine) in (5, 10)
        assert olympic_score(mine) / 60 == pytest.approx(minutes, abs=0.006)
    assert all(r.origin["commit"] and len(r.origin["commit"]) == 40 for r in runs)
    assert not math.isnan(sum(r.time_to_train_s for r in runs))


def test_simulate_predicts_time_to_train_from_imported_runs(tmp_path: Path) -> None:
    """Issue 54, item 4: samples to the target fitted on runs at two global batches
    (here imported MLPerf logs: 12 epochs at B = 256, 20 at B = 4,096), divided by the
    cluster's throughput, evaluation added at the runs' share."""
    submission(tmp_path, times=(100.0, 110.0, 120.0))
    submission(tmp_path, times=(60.0, 61.0, 62.0), name="box_n32", nodes=32, batch=4096, blocks=5)
    store = tmp_path / "store"
    inside("results", "--store", str(store), "--import-mlperf", str(tmp_path))
    args = ("simulate-cluster", "imagenet-resnet50", "--cluster", "dgx-a100", "--nodes", "1,4,64")
    done = inside(*args, "--store", str(store), "--converge-from", "mlperf/resnet", "--json")
    result = json.loads(done.stdout)
    convergence = result["convergence"]
    assert convergence["runs"] == 6 and convergence["batches"] == [256.0, 4096.0]
    e_min = 12_000 - 256 * (20_000 - 12_000) / (4096 - 256)  # the line through both
    assert convergence["e_min"] == pytest.approx(e_min)
    for row in result["rows"]:
        samples = e_min + row["global_batch"] * (8_000 / 3_840)
        assert row["samples_to_target"] == pytest.approx(samples)
        per_sample = (1 + convergence["eval_share"]) / row["samples_per_s"]
        assert row["time_to_train_s"] == pytest.approx(samples * per_sample)
        low, high = row["time_to_train_band_s"]
        assert low <= row["time_to_train_s"] <= high
    assert [row["extrapolated"] for row in result["rows"]] == [False, False, True]
    shown = inside(*args, "--store", str(store), "--converge-from", "mlperf/resnet")
    assert "to train" in shown.stdout and "B outside the fitted batches" in shown.stdout
    assert convergence["borrowed"] is None and "another model" not in shown.stdout
    alone = inside(*args, "--store", str(store), "--json")
    assert "two or more global batches" in json.loads(alone.stdout)["convergence"]["note"]


def test_runs_that_count_other_samples_an_epoch_are_left_out_of_the_fit(tmp_path: Path) -> None:
    """v0.7's Transformer: NVIDIA's code counts 4,590,101 sentences an epoch and batches
    in tokens, Google's 566,340 packed sequences and batches in them; one fit through
    both put B_noise at 363,573."""
    submission(tmp_path, times=(100.0, 110.0, 120.0))
    submission(tmp_path, times=(60.0, 61.0), name="box_n32", nodes=32, batch=4096, blocks=5)
    packed = submission(tmp_path, times=(70.0, 71.0), name="tpu", nodes=4, batch=512)
    for log in packed.glob("results/tpu/resnet/result_*.txt"):
        text = log.read_text().replace(
            '"key": "train_samples", "value": 1000', '"key": "train_samples", "value": 8000'
        )
        log.write_text(text)
    store = tmp_path / "store"
    inside("results", "--store", str(store), "--import-mlperf", str(tmp_path))
    args = ("simulate-cluster", "imagenet-resnet50", "--cluster", "dgx-a100", "--nodes", "1,4")
    done = inside(*args, "--store", str(store), "--converge-from", "mlperf/resnet", "--json")
    convergence = json.loads(done.stdout)["convergence"]
    assert convergence["runs"] == 5 and convergence["batches"] == [256.0, 4096.0]
    assert convergence["epoch"] == 1000 and convergence["other_counts_left_out"] == {"8000": 2}
    shown = inside(*args, "--store", str(store), "--converge-from", "mlperf/resnet").stdout
    said = " ".join(shown.split())
    assert "(2 runs counting 8,000 left out: another dataset, or samples and batches" in said


def test_time_to_train_fitted_on_another_benchmark_says_so(tmp_path: Path) -> None:
    """ImageNet ResNet-50's time to train fitted on GNMT's runs counted sentences as
    images without a word."""
    submission(tmp_path, times=(100.0, 110.0, 120.0), benchmark="gnmt")
    submission(tmp_path, times=(60.0, 61.0), name="box_n32", nodes=32, batch=4096, benchmark="gnmt")
    store = tmp_path / "store"
    inside("results", "--store", str(store), "--import-mlperf", str(tmp_path))
    args = ("simulate-cluster", "imagenet-resnet50", "--cluster", "dgx-a100", "--nodes", "1,4")
    shown = inside(*args, "--store", str(store), "--converge-from", "mlperf/gnmt").stdout
    assert "MLPerf's gnmt: another model and dataset than imagenet-resnet50's" in " ".join(
        shown.split()
    )


def test_open_division_runs_are_left_out_of_the_fit_where_closed_ones_suffice(
    tmp_path: Path,
) -> None:
    """A whole round's ResNet runs pooled the open division's changed recipes (SIAT's)
    with the closed ones in the samples-to-converge fit, and said nothing of it."""
    submission(tmp_path, times=(100.0, 110.0, 120.0))
    submission(tmp_path, times=(60.0, 61.0, 62.0), name="box_n32", nodes=32, batch=4096, blocks=5)
    submission(
        tmp_path,
        times=(30.0, 31.0),
        name="box_open",
        nodes=4,
        batch=1024,
        blocks=9,
        division="open",
    )
    store = tmp_path / "store"
    inside("results", "--store", str(store), "--import-mlperf", str(tmp_path))
    args = ("simulate-cluster", "imagenet-resnet50", "--cluster", "dgx-a100", "--nodes", "1,4")
    common = ("--store", str(store), "--converge-from", "mlperf/resnet")
    result = json.loads(inside(*args, *common, "--json").stdout)
    convergence = result["convergence"]
    assert convergence["runs"] == 6 and convergence["batches"] == [256.0, 4096.0]
    assert convergence["open_left_out"] == 2
    shown = " ".join(inside(*args, *common).stdout.split())
    assert "closed division only (2 open-division runs: recipes changed)" in shown
    # closed runs at one batch alone cannot fit: the open ones are kept, and counted
    other = tmp_path / "other"
    closed = submission(other / "c", times=(100.0, 110.0, 120.0))
    opened = submission(other / "o", times=(30.0,), name="box_o", batch=1024, division="open")
    for source in (closed, opened):
        inside("results", "--store", str(other / "store"), "--import-mlperf", str(source))
    pooled = ("--store", str(other / "store"), "--converge-from", "mlperf/resnet", "--json")
    convergence = json.loads(inside(*args, *pooled).stdout)["convergence"]
    assert convergence["runs"] == 4 and convergence["open_left_out"] == 0


def test_advise_plans_nodes_for_a_deadline_or_a_budget(tmp_path: Path) -> None:
    """Issue 54, item 4: advise-cluster uses simulate's time to train to choose the
    node count: the cheapest that meets the deadline at the band's slow end, or the
    fastest within the budget."""
    submission(tmp_path, times=(100.0, 110.0, 120.0))
    submission(tmp_path, times=(60.0, 61.0, 62.0), name="box_n32", nodes=32, batch=4096, blocks=5)
    store = tmp_path / "store"
    inside("results", "--store", str(store), "--import-mlperf", str(tmp_path))
    args = ("advise-cluster", "imagenet-resnet50", "--cluster", "dgx-a100", "--nodes", "1,2,4,8")
    common = ("--store", str(store), "--converge-from", "mlperf/resnet", "--price", "2", "--json")
    everything = json.loads(inside(*args, *common, "--deadline", "1e9").stdout)
    rows = everything["rows"]
    deadline = sorted(r["slow_s"] for r in rows)[1] * 1.001  # the two fastest meet it
    plan = json.loads(inside(*args, *common, "--deadline", str(deadline)).stdout)
    meeting = [r for r in plan["rows"] if r["slow_s"] <= deadline]
    assert len(meeting) == 2
    assert plan["choice"] == min(meeting, key=lambda r: r["slow_cost"])
    for row in plan["rows"]:
        assert row["slow_cost"] == pytest.approx(row["slow_s"] * row["devices"] * 2 / 3600)
    budget = sorted(r["slow_cost"] for r in rows)[1] * 1.001  # the two cheapest fit
    plan = json.loads(inside(*args, *common, "--budget", str(budget)).stdout)
    fitting = [r for r in plan["rows"] if r["slow_cost"] <= budget]
    assert plan["choice"] == min(fitting, key=lambda r: r["slow_s"])
    # the profile's all-reduce by default (hierarchical: NCCL's shape), a flat ring asked
    flat = inside(*args, *common, "--deadline", "1e9", "--algorithm", "ring").stdout
    assert json.loads(flat)["algorithm"] == "ring" and everything["algorithm"] == "hierarchical"
    none = inside(*args, *common[:-1], "--deadline", "1")
    assert "no node count meets what was asked" in none.stdout
    # a node count whose global batch is past ImageNet's training set was planned too
    past = ("--nodes", "1,8,16384", "--deadline", "1e9")
    plan = json.loads(inside(*args[:-2], *past, *common).stdout)
    assert [row["nodes"] for row in plan["rows"]] == [1, 8]
    assert plan["past_data"]["left_out"] == [
        {"nodes": 16384, "local_batch": 32, "global_batch": 4_194_304}
    ]
    said = " ".join(inside(*args[:-2], *past, *common[:-1]).stdout.split())
    assert "left out: 16,384 nodes at b = 32 (B = 4,194,304): a global batch larger than" in said
    asked = inside(*args, *common, check=False)
    assert asked.returncode != 0 and "--deadline" in asked.stderr
    # the default price is a CPU machine's: an A100's hour is not priced at it, but at
    # the table's entry for an A100; a V100 has none, and a price given is held to
    plain = json.loads(inside(*args, *common[:4], "--deadline", "1e9", "--json").stdout)
    assert plain["price"]["name"] == "aws-capacity-block-a100"
    for row in plain["rows"]:
        assert row["slow_cost"] == pytest.approx(row["slow_s"] * row["devices"] * 1.844 / 3600)
    v100 = ("advise-cluster", "imagenet-resnet50", "--cluster", "dgx2h-v100", "--nodes", "1,2")
    refused = inside(*v100, *common[:4], "--deadline", "1e9", check=False)
    assert refused.returncode != 0 and "the price table has no entry for" in refused.stderr
    cpu_price = ("--price", "gcp-n1-standard-4")
    cpu = inside(*args, *common[:4], "--deadline", "1e9", *cpu_price, check=False)
    assert cpu.returncode != 0 and "gcp-n1-standard-4 prices a CPU machine" in cpu.stderr
    # issue 54, item 4: it chooses the global batch too, over --local-batch's values
    grid = json.loads(
        inside(*args, *common, "--deadline", str(deadline), "--local-batch", "32,128").stdout
    )
    assert {(r["nodes"], r["local_batch"]) for r in grid["rows"]} == {
        (n, b) for n in (1, 2, 4, 8) for b in (32, 128)
    }
    for row in grid["rows"]:
        assert row["global_batch"] == row["devices"] * row["local_batch"]
    meeting = [r for r in grid["rows"] if r["slow_s"] <= deadline]
    assert grid["choice"] == min(meeting, key=lambda r: r["slow_cost"])
    assert set(grid["compute"]) == {"32", "128"}  # where each batch's compute came from
    shown = inside(*args, *common[:-1], "--deadline", str(deadline), "--local-batch", "32,128")
    assert "compute at local batch 128 a device" in " ".join(shown.stdout.split())
    # the costs name their currency (the choice read "7.60 (at most 8.25)")
    assert "cost, USD" in shown.stdout and " USD (at most " in " ".join(shown.stdout.split())
    # a measured speed is at one local batch: it cannot price several
    speed = ("--samples-per-s", "900", "--local-batch", "32,128", "--deadline", "1e9")
    several = inside(*args, *common, *speed, check=False)
    assert several.returncode == 2 and "give --curve" in several.stderr
    measured = json.loads(inside(*args, *common, *speed[:2], "--deadline", "1e9").stdout)
    assert "900 samples/s a device (given)" in str(measured["compute"])


def test_advise_and_advise_cluster_take_only_their_own_options() -> None:
    """`advise --cluster` took 14 options, and silently dropped the cluster plan's five
    without --cluster and the store advice's five with it: a --deadline, a --dtype or a
    --curve file that does not exist were read as nothing. Each is its own command now."""
    for option in ("--deadline", "--cluster", "--dtype", "--curve", "--nodes"):
        dropped = inside("advise", "imagenet-resnet50", option, "1", check=False)
        assert dropped.returncode == 2 and f"No such option: {option}" in dropped.stderr
    for option in ("--memory-per-worker", "--network", "--workers", "--max-workers"):
        plan = ("advise-cluster", "imagenet-resnet50", "--cluster", "dgx-a100")
        dropped = inside(*plan, "--deadline", "60", option, "1", check=False)
        assert dropped.returncode == 2 and f"No such option: {option}" in dropped.stderr
    several = inside("advise", "imagenet-resnet50", "--local-batch", "32,64", check=False)
    assert several.returncode == 2 and "'--local-batch'" in several.stderr
    assert "valid integer" in several.stderr  # one batch to check: several are the plan's


def test_a_compact_copys_header_becomes_the_origin_only_in_its_form(tmp_path: Path) -> None:
    sub = submission(tmp_path, times=(100.0,))
    path = sub / "results/box_n2/resnet/result_0.txt"
    body = path.read_text()
    sha = "0123456789abcdef0123456789abcdef01234567"
    good = f"# round: v0.7\n# commit: {sha}\n# repository: mlcommons/training_results_v0.7\n"
    path.write_text(good + "# path: Acme/results/box_n2/resnet/result_0.txt\n" + body)
    run = read_result(path)
    assert run.origin["commit"] == sha and run.origin["round"] == "v0.7"
    hostile = "# commit: $(rm -rf ~)\n# path: ../../etc/passwd\n# round: v0.7; drop\n"
    path.write_text(hostile + body)
    run = read_result(path)
    assert run.origin["commit"] is None  # no git checkout here, and the header's refused
    assert run.origin["path"] == "Acme/results/box_n2/resnet/result_0.txt"
    assert run.origin["round"] == "v0.7"  # from the folder's name, not the header
