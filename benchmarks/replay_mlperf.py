"""Time to train on clusters dmlbench does not have, held against MLPerf Training v0.7.

Development set (issue 54): NVIDIA's closed-division ResNet-50 (MXNet) and BERT
(PyTorch) submissions whose logs ``benchmarks/data/mlperf`` keeps in compact form, read
by dmlbench's own importer (``dmlbench.results.mlperf``). Later rounds are held out for
an independent check: nothing here reads them.

Per larger submission (a family's single-node submission is its calibration):

- **throughput**: calibrated from the family's smallest submission only (its measured
  samples/s gives one device's compute per step at its local batch ``b1``). At another
  local batch ``b`` the compute follows :func:`compute_at` — the stated model: a fixed
  part per step (kernels per step × a per-kernel floor) and the rest in proportion to
  ``b`` — or a measured curve (``--curve FILE``: seconds per step against local batch
  on one device, e.g. from ``gpu_check.sh``), whose shape replaces the stated model.
  Communication: the cluster's links from ``hardware.yaml`` (NVLink/NVSwitch inside a
  node, the node's InfiniBand ports between nodes, the two-level algorithm), a fixed
  cost per all-reduce call, overlapped with backward as the implementation overlaps it
  (ResNet-50's Horovod buckets), or one call after the last backward (BERT: NVIDIA's
  ``--allreduce_post_accumulation``), which the calibration's compute then excludes.
- **samples (or epochs) to converge**: leave one out: McCandlish's ``E = E_min(1 +
  B/B_noise)`` fitted on the round's other submissions of that benchmark, any system
  (``dmlbench.perfmodel.convergence``), predicted at the left-out global batch, with
  its 95% band.
- **time to train** = samples / throughput + evaluation + start-up, evaluation scaled
  from the calibration submission by evaluations and devices (BERT's logs do not time
  its evaluations; they are inside its measured throughput).
- **null models** side by side: linear scaling of the smallest submission's per-device
  throughput, and the model with communication free.

    python benchmarks/replay_mlperf.py [--curve FILE] [--json OUT] [--png FIGURE]
    python benchmarks/replay_mlperf.py --results training_results_v1.0/NVIDIA --json OUT

The second form is the independent check on a held-out round, for whoever holds it:
the same protocol on its submissions (families without a profile, benchmarks without a
workload, and cells without two other batches to fit on are left out, said so).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from summary import run_main, write_summary

# The per-kernel floor (3.8 µs, NVIDIA's "Getting Started with CUDA Graphs", 2019),
# fixed before this replay and not fitted to it.
from dmlbench.perfmodel.cluster import (
    BACKWARD_SHARE,
    KERNEL_FLOOR_S,
    ddp_buckets,
    ddp_step,
)
from dmlbench.perfmodel.convergence import fit
from dmlbench.perfmodel.curve import read_curve, step_line
from dmlbench.perfmodel.hardware import Hardware, load_hardware
from dmlbench.perfmodel.model import Layout, cluster_allreduce_time
from dmlbench.perfmodel.workloads import WORKLOADS, Workload
from dmlbench.results.mlperf import MlperfRun, olympic_score, read_results
from dmlbench.results.mlperf_system import Devices

DATA = Path(__file__).parent / "data" / "mlperf" / "training_results_v0.7"
OUT = Path(__file__).parent / "results" / "replays" / "mlperf_v07.json"
STATED = OUT.with_name("mlperf_v07_stated.json")


# NVIDIA's system families, by their names' first part: the hardware profiles that can
# describe each. The description's accelerator chooses among them (a DGX A100 of 40 or
# 80 GB); a family not here, or a description no profile of its family fits, is left
# out: an accelerator's name alone does not say its links (a PCIe V100 server is no
# DGX-1).
FAMILIES = {
    "dgx1": ("dgx1-v100-edr",),
    "dgx2h": ("dgx2h-v100",),
    "dgxa100": ("dgx-a100-40gb", "dgx-a100"),
    "dgxh100": ("dgx-h100",),
}


def profile_for(system: str, devices: Devices, hardware: Hardware) -> tuple[str | None, str]:
    """The hardware profile of ``system``'s family (:data:`FAMILIES`) whose accelerator
    its description names most specifically (``A100-SXM4-40GB`` before ``A100``), with
    as many devices a node; and why none, where none does."""
    prefix = system.split("_")[0]  # as NVIDIA names them: dgxa100_n96_…
    keys = FAMILIES.get(prefix.lower(), ())
    if not keys:
        return None, f"no profile for the family {prefix}"
    fits: dict[str, int] = {}
    for key in keys if devices.accelerators else ():  # host processors: no profile
        profile = hardware.clusters[key]
        fit = hardware.accelerators[profile.accelerator].specificity(devices.model)
        if fit and profile.devices_per_node == devices.per_node:
            fits[key] = fit
    if not fits:
        return None, f"no {prefix} profile has {devices.per_node} × {devices.model} a node"
    return max(fits, key=fits.__getitem__), ""


def family(run: MlperfRun) -> str:
    """Submissions one calibrates another's throughput within: a submitter's systems of
    one accelerator model (clock and memory included: a DGX-2's 350 W V100s are not a
    DGX-2H's 450 W ones) and one framework."""
    framework = run.system.get("framework") or "unknown framework"
    return f"{run.origin['submitter']} · {run.devices.model} · {framework}"


# A fixed cost per all-reduce call (NCCL's kernel launch and set-up), stated: the
# interconnect profiles' per-message cost, 5 µs, for each bucket's call.
CALL_COST_S = 5e-6


@dataclass(frozen=True)
class Submission:
    system: str
    benchmark: str
    family: str  # :func:`family`
    profile: str  # the hardware profile its links come from: :func:`profile_for`
    nodes: int
    per_node: int
    global_batch: int
    accumulation: int
    throughput: float  # samples/s, median of converged runs, evaluation excluded
    samples: float  # to converge: median of converged runs
    epochs: float | None
    dataset: int | None
    time_to_train_s: float  # MLPerf's olympic score
    eval_s: float
    evaluations: float
    startup_s: float
    round: str | None = None  # MLPerf's round, as the import reads it

    @property
    def workers(self) -> int:
        return self.nodes * self.per_node

    @property
    def local_batch(self) -> float:
        """Samples one device computes per micro-step."""
        return self.global_batch / (self.workers * self.accumulation)


def submissions(root: Path, hardware: Hardware) -> tuple[list[Submission], list[str]]:
    """Each system's submission of a benchmark the replay models, on hardware it has a
    profile for (:func:`profile_for`), and what it cannot replay, said: a log the
    import would skip (minigo's, a damaged one) is said so too."""
    reading = read_results([root])
    runs: dict[tuple[str, str], list[MlperfRun]] = {}
    for run in reading.runs:
        runs.setdefault((run.origin["system"], run.benchmark), []).append(run)
    found: list[Submission] = []
    left_out = reading.skipped()
    for (system, benchmark), mine in sorted(runs.items()):
        done = [r for r in mine if r.status == "success"]
        profile, unfit = profile_for(system, mine[0].devices, hardware)
        why = _unreplayable(benchmark, profile, unfit, done)
        if why or profile is None:
            left_out.append(f"{system} {benchmark}: {why}")
            continue
        first = done[0]
        found.append(
            Submission(
                system=system,
                benchmark=benchmark,
                family=family(first),
                profile=profile,
                nodes=first.devices.nodes,
                per_node=first.devices.per_node,
                global_batch=first.global_batch,
                accumulation=first.gradient_accumulation,
                throughput=statistics.median(r.throughput or math.nan for r in done),
                samples=statistics.median(r.samples or math.nan for r in done),
                epochs=statistics.median(r.epochs or math.nan for r in done)
                if first.epochs
                else None,
                dataset=first.dataset_samples,
                time_to_train_s=olympic_score(mine),
                eval_s=statistics.median(r.eval_s for r in done),
                evaluations=statistics.median(len(r.evals) for r in done),
                startup_s=statistics.median(r.startup_s for r in done),
                round=first.origin.get("round"),
            )
        )
    return found, left_out


def _unreplayable(
    benchmark: str, profile: str | None, unfit: str, done: list[MlperfRun]
) -> str | None:
    """Why a submission cannot be replayed, if it cannot."""
    if benchmark not in WORKLOADS:
        return f"no workload for {benchmark}"
    if profile is None:
        return unfit
    return None if done else "no run reached the target"


def load_curve(path: Path | None) -> list[tuple[float, float]] | None:
    """A measured curve: ``[[local_batch, seconds per step], ...]`` on one device."""
    if path is None:
        return None
    points = list(read_curve(path).points)
    if len({b for b, _ in points}) < 2:
        sys.exit(f"{path}: a curve needs two or more local batches")
    return points


def fixed_part(curve: list[tuple[float, float]] | None, workload: Workload) -> tuple[float, str]:
    """A step's time that does not grow with the local batch, and where it comes from:
    the intercept of the straight line through a measured curve (the time a device's
    step takes at no batch: kernel launches and the host's work, which a faster device
    does not shorten), or, without one, the stated kernels per step × the per-kernel
    floor."""
    if curve is None:
        return workload.kernels_per_step * KERNEL_FLOOR_S, (
            f"stated: {workload.kernels_per_step} kernels a step × {KERNEL_FLOOR_S * 1e6:.1f} µs"
        )
    fixed, _ = step_line(curve)
    return fixed, f"measured: intercept of the curve, {1000 * fixed:.2f} ms a step"


def compute_at(batch: float, calibration_batch: float, calibration_s: float, fixed: float) -> float:
    """One device's compute per micro-step at ``batch``: the fixed part, and the rest of
    the calibration's step in proportion to the batch."""
    fixed = min(fixed, calibration_s)
    return fixed + (calibration_s - fixed) * batch / calibration_batch


def _step(
    sub: Submission, compute_s: float, workload: Workload, comm: bool, hardware: Hardware
) -> float:
    """An optimizer step: accumulation micro-steps, the last overlapped with all-reduce
    where the implementation overlaps it, or followed by one call for all gradients."""
    cluster = hardware.cluster(sub.profile)
    inter, intra = cluster.links(sub.per_node)
    calibration = cluster.calibration()
    layout = Layout(sub.nodes, intra)

    def allreduce(size: float) -> float:
        if not comm:
            return 0.0
        took = cluster_allreduce_time("hierarchical", sub.workers, size, inter, layout, calibration)
        return CALL_COST_S + took

    if not workload.overlapped:
        return sub.accumulation * compute_s + allreduce(workload.gradient_bytes)
    buckets = ddp_buckets(workload.gradient_bytes)
    last, _, _ = ddp_step(
        compute_s * (1 - BACKWARD_SHARE), compute_s * BACKWARD_SHARE, buckets, allreduce
    )
    return (sub.accumulation - 1) * compute_s + last


def replay(
    curve: list[tuple[float, float]] | None = None,
    curves_for: tuple[str, ...] = ("resnet",),
    root: Path = DATA,
) -> dict:
    """Every cell of the submissions under ``root``; ``curve`` (measured on a device, for
    the benchmarks ``curves_for`` names) gives the fixed part of a step in place of the
    stated kernel floor."""
    hardware = load_hardware()
    subs, left_out = submissions(root, hardware)
    cells = []
    for sub in subs:
        kin = [s for s in subs if s.family == sub.family and s.benchmark == sub.benchmark]
        base = min(kin, key=lambda s: (s.workers, s.nodes))
        workload = WORKLOADS[sub.benchmark]
        # calibration: one device's compute per micro-step at the smallest submission
        measured_step = base.global_batch / base.throughput
        exposed = _step(base, 0.0, workload, True, hardware)  # all-reduce past a zero backward
        overlap_free = max(measured_step - exposed, 1e-9)
        calibration_s = measured_step / base.accumulation
        if exposed > 0.05 * measured_step or not workload.overlapped:
            # not hidden: take it out of the compute
            calibration_s = overlap_free / base.accumulation
        fixed, fixed_source = fixed_part(curve if sub.benchmark in curves_for else None, workload)
        compute_s = compute_at(sub.local_batch, base.local_batch, calibration_s, fixed)
        step = _step(sub, compute_s, workload, True, hardware)
        step_free = _step(sub, compute_s, workload, False, hardware)
        throughput = sub.global_batch / step
        throughput_free = sub.global_batch / step_free
        throughput_linear = base.throughput / base.workers * sub.workers
        # samples to converge, leave one out: every other submission of the benchmark
        others = [(s.global_batch, s.samples) for s in subs if s.benchmark == sub.benchmark]
        others.remove((sub.global_batch, sub.samples))
        if len({b for b, _ in others}) < 2:  # a round with fewer submissions: no fit
            left_out.append(f"{sub.system} {sub.benchmark}: no two other batches to fit on")
            continue
        scaling = fit(others)
        samples = scaling.predict(sub.global_batch)
        low, high = scaling.band(sub.global_batch)
        # evaluation and start-up, from the calibration submission
        if sub.epochs and base.epochs:
            evaluations = base.evaluations * (samples / sub.dataset) / base.epochs  # type: ignore[operator]
            eval_s = base.eval_s * evaluations / base.evaluations * base.workers / sub.workers
        else:
            eval_s = 0.0  # inside the measured throughput (BERT's logs)
        overhead = eval_s + base.startup_s

        def ttt(rate: float, samples: float = samples, overhead: float = overhead) -> float:
            return samples / rate + overhead

        cells.append(
            {
                "benchmark": sub.benchmark,
                "system": sub.system,
                "profile": sub.profile,
                "calibration": base.system,
                "role": "calibration" if sub is base else "predicted",
                "nodes": sub.nodes,
                "devices": sub.workers,
                "global_batch": sub.global_batch,
                "local_batch": sub.local_batch,
                "accumulation": sub.accumulation,
                "compute_s": compute_s,
                "fixed_s": fixed,
                "fixed_source": fixed_source,
                "step_s": step,
                "throughput": {
                    "published": sub.throughput,
                    "model": throughput,
                    "linear": throughput_linear,
                    "comm_free": throughput_free,
                },
                "samples": {
                    "published": sub.samples,
                    "model": samples,
                    "band": [low, high],
                    "extrapolates": scaling.extrapolates(sub.global_batch),
                    "b_noise": scaling.b_noise,
                },
                "time_to_train_s": {
                    "published": sub.time_to_train_s,
                    "model": ttt(throughput),
                    "band": [ttt(throughput, low), ttt(throughput, high)],
                    "linear": ttt(throughput_linear),
                    "comm_free": ttt(throughput_free),
                },
            }
        )
    rounds = ", ".join(sorted({s.round or "(round unknown)" for s in subs}))
    return {"round": rounds, "cells": cells, "left_out": left_out, "summary": summary(cells)}


def error(predicted: float, published: float) -> float:
    return predicted / published - 1


def summary(cells: list[dict]) -> dict:
    predicted = [c for c in cells if c["role"] == "predicted"]
    out: dict = {"cells": len(predicted)}
    if not predicted:
        return out
    for measure in ("throughput", "time_to_train_s"):
        for model in ("model", "linear", "comm_free"):
            errors = [abs(error(c[measure][model], c[measure]["published"])) for c in predicted]
            out[f"{measure}.{model}.median_abs_error"] = statistics.median(errors)
    errors = [abs(error(c["samples"]["model"], c["samples"]["published"])) for c in cells]
    out["samples.loo.median_abs_error"] = statistics.median(errors)
    return out


def _pct(value: float) -> str:
    return f"{100 * value:+.0f}%"


def show(result: dict) -> None:
    sources = {(c["benchmark"], c["fixed_source"]) for c in result["cells"]}
    for benchmark, source in sorted(sources):
        print(f"{benchmark}: a step's fixed part {source}")
    header = (
        f"{'benchmark':6} {'system':30} {'dev':>4} {'B':>6} {'b':>5} | "
        f"{'samples/s pub':>13} {'model':>6} {'linear':>6} {'free':>6} | "
        f"{'to converge pub':>15} {'model':>6} | "
        f"{'TTT pub min':>11} {'model':>6} {'band':>13} {'linear':>6} {'free':>6}"
    )
    print(header)
    print("-" * len(header))
    for c in result["cells"]:
        t, s, ttt = c["throughput"], c["samples"], c["time_to_train_s"]
        mark = "*" if c["role"] == "calibration" else " "
        band = f"{_pct(error(ttt['band'][1], ttt['published']))}/" + _pct(
            error(ttt["band"][0], ttt["published"])
        )
        print(
            f"{c['benchmark']:6} {c['system'] + mark:30} {c['devices']:4} "
            f"{c['global_batch']:6} {c['local_batch']:5.0f} | "
            f"{t['published']:13,.0f} {_pct(error(t['model'], t['published'])):>6} "
            f"{_pct(error(t['linear'], t['published'])):>6} "
            f"{_pct(error(t['comm_free'], t['published'])):>6} | "
            f"{s['published']:15,.0f} {_pct(error(s['model'], s['published'])):>6} | "
            f"{ttt['published'] / 60:11.2f} {_pct(error(ttt['model'], ttt['published'])):>6} "
            f"{band:>13} {_pct(error(ttt['linear'], ttt['published'])):>6} "
            f"{_pct(error(ttt['comm_free'], ttt['published'])):>6}"
        )
    for line in result["left_out"]:
        print(f"left out: {line}")
    print("* the family's calibration (its smallest submission): throughput errors are 0 by")
    print("  construction; samples to converge are still left out of their own fit")
    print("errors: predicted / published − 1; band: time to train at the 95% band of samples")
    for key, value in result["summary"].items():
        print(f"  {key}: {value if key == 'cells' else f'{100 * value:.1f}%'}")


def figure(result: dict, path: Path) -> None:
    """Predicted against published throughput and time to train over devices, per
    benchmark and system family, with the null models and the band of samples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dmlbench.files import write_figure

    cells = result["cells"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True)
    colours = ["tab:gray", "tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:brown"]
    for column, benchmark in enumerate(("resnet", "bert")):
        for row, measure in enumerate(("throughput", "time_to_train_s")):
            ax = axes[row][column]
            mine_all = [c for c in cells if c["benchmark"] == benchmark]
            bases = sorted({c["calibration"] for c in mine_all})  # a family each
            for base, colour in zip(bases, colours, strict=False):
                mine = sorted(
                    (c for c in mine_all if c["calibration"] == base), key=lambda c: c["devices"]
                )
                family = mine[0]["profile"]
                x = [c["devices"] for c in mine]
                scale = 1 / 60 if measure == "time_to_train_s" else 1.0
                pub = [c[measure]["published"] * scale for c in mine]
                ax.plot(x, pub, "o", color=colour, ms=8, label=f"{family}: published")
                ax.plot(
                    x,
                    [c[measure]["model"] * scale for c in mine],
                    "-",
                    color=colour,
                    label=f"{family}: dmlbench",
                )
                ax.plot(
                    x,
                    [c[measure]["linear"] * scale for c in mine],
                    ":",
                    color=colour,
                    label=f"{family}: linear null",
                )
                ax.plot(
                    x,
                    [c[measure]["comm_free"] * scale for c in mine],
                    "--",
                    color=colour,
                    alpha=0.6,
                    label=f"{family}: comm free",
                )
                if measure == "time_to_train_s":
                    low = [c[measure]["band"][0] * scale for c in mine]
                    high = [c[measure]["band"][1] * scale for c in mine]
                    ax.fill_between(x, low, high, color=colour, alpha=0.12)
            if not mine_all:
                ax.text(0.5, 0.5, "no cell replayed", ha="center", transform=ax.transAxes)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("devices")
            ax.set_ylabel("samples/s" if measure == "throughput" else "time to train (min)")
            ax.set_title(
                f"MLPerf {result['round']} {benchmark}: "
                f"{'throughput' if row == 0 else 'time to train'}"
            )
            ax.grid(True, which="both", alpha=0.3)
        if axes[0][column].get_legend_handles_labels()[0]:  # a benchmark the round has
            axes[0][column].legend(fontsize=7)
    write_figure(fig, path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--curve", type=Path, help="ResNet-50's measured seconds per step by local batch"
    )
    parser.add_argument(
        "--json",
        type=Path,
        help=f"where the results go (default: {OUT.name}, or {STATED.name} without --curve)",
    )
    parser.add_argument("--png", type=Path, help="draw the figure here")
    parser.add_argument(
        "--results",
        type=Path,
        help="another round's submission folder to replay (the independent check: e.g. a "
        "training_results_v1.0 checkout's NVIDIA folder); written only with --json",
    )
    args = parser.parse_args()
    result = replay(load_curve(args.curve), root=args.results or DATA)
    show(result)
    if args.png:
        figure(result, args.png)
    if args.results is not None and args.json is None:
        return  # a held-out round's replay goes where it is asked to, not over v0.7's
    # without a curve it is the stated-floor variant: never over the measured result
    write_summary(args.json or (OUT if args.curve else STATED), result)


if __name__ == "__main__":
    run_main(main)
