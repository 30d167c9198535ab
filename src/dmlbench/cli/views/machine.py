"""What a run's summary says about the machine it ran on: the hardware line (FLOPs,
utilisation, memory, page faults, what was on), torch.compile's time, the CPU's
contention, and the cost of the emulated network's delay forwarder."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from dmlbench.report.formats import flops, human_bytes, percent, plural, seconds
from dmlbench.results.records import RunRecord, RunSummary


def compilation_text(summary: RunSummary) -> str:
    """The compile time, apart from the clock, and any recompilation that was not."""
    text = f"{seconds(summary.compile_s, unit=True)} torch.compile (before the clock starts)"
    again = summary.recompiles_in_clock or 0
    if again:
        text += (
            f"; recompiled {again} time{'s' * (again > 1)} inside the clock (a new input "
            "shape?): those steps include compile time"
        )
    return text


def hardware_text(summary: RunSummary) -> str:
    """The summary's hardware line: FLOPs per step, FLOP/s and utilisation per worker,
    samples/s per worker, peak memory and page faults, and the speed-ups that were on."""
    parts = []
    if step_flops := summary.flops_per_step:
        parts.append(f"{flops(step_flops)} per step per worker")
    if summary.flops_per_s:
        achieved = f"{flops(summary.flops_per_s, per_second=True)} per worker"
        if summary.utilisation is not None:
            achieved += (
                f" = {percent(summary.utilisation)} of "
                f"{flops(summary.peak_flops_per_s or 0.0, per_second=True)} "
                f"({summary.peak_source})"
            )
        parts.append(achieved)
    if summary.samples_per_s_per_worker:
        parts.append(f"{summary.samples_per_s_per_worker:,.0f} samples/s per worker")
        if per_sample := summary.tokens_per_sample:
            tokens = summary.samples_per_s_per_worker * per_sample
            parts.append(f"{tokens:,.0f} tokens/s per worker")
    memory = [m for m in summary.peak_memory_bytes or [] if m]
    if memory:
        parts.append(f"peak memory {human_bytes(max(memory))} per worker (the most)")
    faults = summary.page_faults_per_step
    if faults:
        parts.append(f"{plural(round(max(faults)), 'page fault')} per step (the most)")
    compiled = summary.compiled
    mode = f"compiled ({compiled})" if isinstance(compiled, str) else "compiled"
    on = [
        name for name, used in (("channels-last", summary.channels_last), (mode, compiled)) if used
    ]
    allocator = str(summary.cpu_allocator or "")
    host = "host's " if str(summary.device or "").startswith("cuda") else ""  # not the GPU's
    if allocator.startswith("jemalloc"):
        on.append(f"{host}jemalloc")
    elif allocator.startswith("tuned"):
        on.append(f"{host}tuned allocator" + (" (no jemalloc)" if "jemalloc" in allocator else ""))
    if parts and on:
        parts.append(" and ".join(on))
    return "; ".join(parts)


def contention_row(contention: dict[str, Any], disturbed: bool | None) -> tuple[str, str]:
    """The summary's CPU line: what the workers waited for and who else ran."""
    if disturbed:
        text = (
            f"{contention['reason']}. Its times are not the machine's: compare and "
            "report leave it out of speedup and efficiency (--include-disturbed counts "
            "it); run it again on a quiet machine"
        )
        return "[yellow]disturbed[/yellow]", escape(text)
    machines = [m for m in contention.get("machines") or [] if m.get("outside_cores") is not None]
    if contention.get("wait_share_max") is None or not machines:
        return "CPU", escape(str(contention.get("reason") or "not measured"))
    outside = max(m["outside_cores"] + (m.get("steal_cores") or 0.0) for m in machines)
    text = (
        f"workers waited for a core {percent(contention['wait_share_max'])} of the CPU time "
        f"they asked for; other processes used {outside:.2f} cores: undisturbed"
    )
    if contention.get("reason"):  # oversubscribed by its own layout
        text = str(contention["reason"])
    return "CPU", escape(text)


def forwarder_cost(run: RunRecord) -> str | None:
    """The TUN delay forwarder's own cost, from the run folder's network.json."""
    import json
    from pathlib import Path

    from dmlbench.errors import DmlbenchError
    from dmlbench.files import read_bounded

    path = Path(run.run_dir) / "network.json"
    try:
        recorded = json.loads(read_bounded(path, 1 << 20, "network record"))
    except (DmlbenchError, ValueError, RecursionError):
        return None
    stats = recorded.get("forwarder") if isinstance(recorded, dict) else None
    if not isinstance(stats, dict):
        return None
    if not stats.get("packets"):
        return None
    elapsed = run.elapsed_s or 0.0
    share = f", {stats['cpu_s'] / elapsed:.0%} of one core over the run" if elapsed else ""
    warn = (
        " — it shares the cores with the workers"
        if elapsed and stats["cpu_s"] / elapsed > 0.05
        else ""
    )
    return (
        f"{stats['packets']:,} packets, {stats['cpu_s']:.2f} s CPU{share}; released "
        f"{stats['late_mean_s'] * 1e6:.0f} µs late on average (max "
        f"{stats['late_max_s'] * 1e3:.1f} ms){warn}"
    )
