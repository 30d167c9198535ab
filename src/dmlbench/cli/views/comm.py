"""Communication in what the CLI prints: the network profiles, the stored
micro-benchmarks, and one all-reduce benchmark's sizes."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from dmlbench.cli.views import figures_table
from dmlbench.cli.views.summary import STATUS_WORDS
from dmlbench.report.formats import (
    SCOPE_NOTE,
    SCOPES,
    human_bytes,
    layout,
    microseconds,
    plural,
)
from dmlbench.results.records import CommRun


def networks_table(profiles: dict[str, dict[str, Any]]) -> Table:
    """`dmlbench networks`: each named profile's links; unset ones are left unshaped."""
    table = figures_table(
        "network profiles: --network NAME",
        "bandwidth per link and direction, latency one way per packet; between nodes, or "
        "between every worker when each is its own host. Your own values: --network "
        "250mbit (a rate alone), --set network.bandwidth=250mbit --set "
        "network.latency=5ms, or --set network.profiles_file=FILE",
    )
    for column in ("name", "bandwidth", "latency", "inside a node", "what"):
        table.add_column(column, overflow="fold")
    for name, profile in profiles.items():
        inside = [profile.get(key) for key in ("intra_bandwidth", "intra_latency")]
        table.add_row(
            escape(name),
            escape(str(profile.get("bandwidth") or "unshaped")),
            escape(str(profile.get("latency") or "—")),
            escape(" · ".join(str(value) for value in inside if value) or "loopback"),
            escape(str(profile.get("description") or "")),
        )
    return table


def comm_runs_table(runs: list[CommRun]) -> Table:
    """The stored communication micro-benchmarks, a line each (`dmlbench results RUN`
    shows one's sizes)."""
    table = figures_table(plural(len(runs), "communication micro-benchmark"))
    for column in ("run", "op", "backend", "N", "network", "status"):
        table.add_column(column, overflow="fold", justify="right" if column == "N" else "left")
    for run in runs:
        table.add_row(
            run.run_id,
            escape(run.op),
            escape(run.backend),
            f"{run.workers}{layout(run.nodes, run.workers // run.nodes, compact=True)}",
            escape(run.network.split(" · ")[0]),
            STATUS_WORDS.get(run.status, run.status),
        )
    return table


def comm_table(run: CommRun) -> Table:
    """One all-reduce micro-benchmark: latency and bandwidth per message size."""
    spec = run.spec
    nodes = run.nodes
    scoped = any(row.scope for row in run.results)
    table = figures_table(
        escape(
            f"{run.op} · {run.backend} · {plural(run.workers, 'worker')}"
            f"{layout(nodes, run.workers // nodes)} · network "
            f"{run.network} · run {run.run_id}"
        ),
        f"median of {spec['repeats']} timed repeats after {spec['warmup']} warm-up, "
        "each after a barrier; a repeat is `iter` back-to-back all-reduces and lasts as long "
        "as its slowest rank. busbw = algbw × 2(n−1)/n (NCCL-tests)"
        + (f"\n{SCOPE_NOTE}" if scoped else "")
        + (
            f"\noversubscribed: {run.workers} workers on {run.cores} cores, so the times "
            "include workers waiting for a core"
            if run.oversubscribed
            else ""
        ),
    )
    if scoped:  # an emulated cluster: across nodes, within each node, two levels
        table.add_column("scope")
    for column in ("size", "iter", "latency µs", "min µs", "max µs", "algbw MB/s", "busbw MB/s"):
        table.add_column(column, justify="right")
    for row in run.results:
        table.add_row(
            *([SCOPES.get(row.scope or "", "")] if scoped else []),
            human_bytes(row.bytes),
            str(row.iterations),
            microseconds(row.latency_s),
            microseconds(row.latency_min_s),
            microseconds(row.latency_max_s),
            f"{row.algbw / 1e6:,.2f}",
            f"{row.busbw / 1e6:,.2f}",
        )
    if run.error:
        table.add_row(
            f"[red]{run.status}[/red]",
            escape(run.error),
            "",
            "",
            "",
            "",
            "",
            *([""] if scoped else []),
        )
    return table
