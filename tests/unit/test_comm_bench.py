"""The all-reduce micro-benchmark: sizes, definitions, a real gloo run, refusals."""

from __future__ import annotations

import pytest
from helpers import comm_record

from dmlbench.comm.bench import bus_factor, summarize_size
from dmlbench.errors import SpecError
from dmlbench.launch.bench import resolve_bench
from dmlbench.spec.bench import CommBenchSpec


def test_sizes_are_a_log_scale_of_whole_elements_ending_at_the_cap() -> None:
    assert CommBenchSpec(max_bytes=4096).sizes() == [4, 16, 64, 256, 1024, 4096]
    assert CommBenchSpec(max_bytes=1000, factor=10).sizes() == [4, 40, 400, 1000]
    assert CommBenchSpec(max_bytes=10**8).sizes()[-1] == 10**8
    assert CommBenchSpec(min_bytes=4, max_bytes=4).sizes() == [4]
    # sizes as a user says them (`--max-bytes 64KiB`, `--set max_bytes=1MB`): it took
    # only a count of bytes, "1MB" was "unable to parse string as an integer"
    assert CommBenchSpec.model_validate({"max_bytes": "64KiB"}).sizes()[-1] == 65536
    assert resolve_bench({"max_bytes": "1MB"}).max_bytes == 10**6
    assert resolve_bench({"max_bytes": "1MB"}).to_json_dict()["max_bytes"] == 10**6


def test_bus_bandwidth_factor_follows_nccl_tests() -> None:
    assert bus_factor(1) == 0.0
    assert bus_factor(2) == 1.0
    assert bus_factor(4) == pytest.approx(1.5)
    assert bus_factor(64) == pytest.approx(2 * 63 / 64)


def test_a_repeat_lasts_as_long_as_its_slowest_rank() -> None:
    per_rank = [[0.010, 0.030, 0.020], [0.012, 0.010, 0.040]]  # 2 ranks × 3 repeats
    row = summarize_size(1_000_000, per_rank, workers=4)
    assert row["latency_min_s"] == 0.012 and row["latency_max_s"] == 0.040
    assert row["latency_s"] == pytest.approx(0.030)  # median of 0.012, 0.030, 0.040
    assert row["algbw"] == pytest.approx(1_000_000 / 0.030)
    assert row["busbw"] == pytest.approx(row["algbw"] * 1.5)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"max_bytes": 2}, "max_bytes"),
        ({"min_bytes": 64, "max_bytes": 16}, "below min_bytes"),
        ({"backend": "nccl"}, "needs CUDA"),
        ({"backend": "tcp"}, "backend"),
        ({"repeats": 0}, "repeats"),
        ({"max_bytes": 2**34, "workers": 4096}, "lower --max-bytes"),
    ],
)
def test_impossible_benchmarks_are_refused(data: dict, message: str) -> None:
    import torch

    if data.get("backend") == "nccl" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SpecError, match=message):
        resolve_bench(data)


def test_nccl_with_more_workers_than_gpus_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each NCCL rank takes the GPU of its local rank: 4 on a host with 2 reached ranks
    that found none. The host's GPUs are what torch reports, given here."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(SpecError, match="each of a node's 4 workers on a GPU of its own"):
        resolve_bench({"backend": "nccl", "workers": 4})
    assert resolve_bench({"backend": "nccl", "workers": 2}).per_node == 2


def test_bad_benchmark_input_is_one_line(dmlbench) -> None:
    for args, message in (
        (["bench", "allreduce", "--max-bytes", "2"], "max_bytes"),
        (["bench", "allreduce", "--max-bytes", "lots"], "max_bytes: could not parse"),
        (["bench", "allreduce", "--backend", "tcp"], "backend"),
        (["bench", "allreduce", "--set", "bogus=1"], "unknown spec key 'bogus'"),
        (["bench", "allreduce", "--workers", "0"], "at least 1"),
    ):
        code, _, err = dmlbench(*args)
        assert code == 2 and message in err, err
        assert len(err.strip().splitlines()) == 1


def test_an_emulated_clusters_scopes_are_drawn_and_tabled_apart() -> None:
    """The report joined an emulated cluster's three scopes (over every rank, within a
    node, two levels) into one zig-zag line per run, its table had no scope column, and
    the legend's long labels ran past both edges of the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dmlbench.report.html import comm_section
    from dmlbench.report.html_tables import comm_view
    from dmlbench.results.records import CommResult, CommRun

    def result(size: int, scope: str | None) -> CommResult:
        took = {"all": 4e-3, "node": 1e-3, "hierarchical": 5e-3, None: 2e-3}[scope] * size
        return CommResult(size, 10, 1, took, took, took, 0.0, size / took, size / took, scope)

    def run(
        run_id: str, nodes: int, scopes: list[str | None], network: str = "1gbit · 1000 Mbit/s"
    ) -> CommRun:
        return comm_record(
            run_id=run_id,
            workers=4,
            network=network,
            spec={"nodes": nodes},
            results=[result(size, scope) for scope in scopes for size in (4, 64, 1024)],
        )

    cluster = run("20261128-140055-51e0af", 2, ["all", "node", "hierarchical"])
    section = comm_section([run("20261128-135446-832ed3", 1, [None]), cluster])
    assert section is not None
    figure = section.figures["allreduce"]
    latency = figure.axes[0]
    labels = latency.get_legend_handles_labels()[1]
    assert labels == [
        "gloo · 4 workers · 1gbit · 1000 Mbit/s",
        *(f"gloo · 4 workers (2 nodes × 2) · 1gbit · 1000 Mbit/s · {s}" for s in SCOPE_WORDS),
    ]
    for line in latency.get_lines():  # no line joins two scopes: sizes only grow along it
        sizes = list(line.get_xdata())
        assert sizes == sorted(set(sizes))
    host = comm_section([run("20261128-135447-aaaaaa", 1, [None], network="none")])
    assert host is not None  # the host's own network: "unshaped", not "none"
    (plain,) = host.figures["allreduce"].axes[0].get_legend_handles_labels()[1]
    assert plain == "gloo · 4 workers · unshaped"
    FigureCanvasAgg(figure).draw()
    (legend,) = figure.legends
    box = legend.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= figure.bbox.width
    table = comm_view(section.runs)
    assert table.head[4] == "scope" and "2-level" in table.caption
    cells = [row.cells for row in table.rows]
    assert [c[4] for c in cells if c[0] == cluster.run_id][::3] == list(SCOPE_WORDS)
    assert {c[2] for c in cells if c[0] == cluster.run_id} == {"4 (2×2)"}


SCOPE_WORDS = ("all", "node", "2-level")


@pytest.mark.parametrize(
    ("workers", "environment", "crowded"),
    [(4, {}, True), (2, {}, False), (4, {"gpus": ["NVIDIA H200"]}, False)],
)
def test_an_all_reduce_on_more_workers_than_cores_says_so(
    workers: int, environment: dict, crowded: bool
) -> None:
    """`bench allreduce --workers 4` on 2 cores printed latencies with nothing saying its
    workers took turns on the cores, as a training run's summary says."""
    from rich.console import Console

    from dmlbench.cli.views.comm import comm_table
    from dmlbench.results.records import CommResult

    row = CommResult(4, 10, 1, 1e-3, 1e-3, 1e-3, 0.0, 4e3, 6e3)
    run = comm_record(
        workers=workers,
        spec={"nodes": 1, "repeats": 10, "warmup": 3, "device": "auto"},
        environment=environment,
        cores=2,
        results=[row],
    )
    console = Console(width=200, record=True)
    console.print(comm_table(run))
    said = console.export_text()
    assert ("oversubscribed: 4 workers on 2 cores" in said) is crowded
    # the report's table stars the run and says why, as its scaling tables do
    from dmlbench.report.html import comm_section
    from dmlbench.report.html_tables import comm_view

    section = comm_section([run])
    assert section is not None
    table = comm_view(section.runs)
    assert ("* oversubscribed" in table.caption) is crowded
    assert table.rows[0].cells[2] == f"{workers}{'*' if crowded else ''}"
