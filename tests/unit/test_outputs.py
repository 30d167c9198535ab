"""What dmlbench writes for a user (reports, exports, figures, job files) goes only over
regular files or free names, whole or not at all; every refusal is one line (issue 40)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import pytest

from dmlbench.files import write_file
from dmlbench.resolve import deviations, resolve_spec
from dmlbench.results import ResultsStore
from dmlbench.results.environment import collect_environment
from dmlbench.results.summary import summarize

HOSTILE_SWEEP = '=HYPERLINK("http://x","y") [bold]b[/] x[/]'


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A store holding one failed run whose sweep name and error are hostile text."""
    spec = resolve_spec("synthetic-mlp")
    root = tmp_path / "store"
    store = ResultsStore(root)
    sweep = {"name": HOSTILE_SWEEP, "scaling": "none", "repeat": 0, "key": "k", "point": {}}
    store.begin("r1", spec.to_json_dict(), deviations(spec), collect_environment(), sweep=sweep)
    store.finish("r1", status="failed", summary=summarize([]), evals=[], error="@SUM(A1) [/]")
    return root


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def test_a_file_is_replaced_whole_and_keeps_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "a" / "out.txt"
    write_file(target, "first")
    write_file(target, b"second")
    assert target.read_text() == "second"
    assert os.listdir(target.parent) == ["out.txt"]  # no temporary left behind
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


@pytest.mark.parametrize("kind", ["fifo", "symlink", "folder"])
def test_only_regular_files_are_written_over(tmp_path: Path, kind: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    target = tmp_path / "target"
    if kind == "fifo":
        _fifo(target)
    elif kind == "symlink":
        target.symlink_to(victim)
    else:
        target.mkdir()
    with pytest.raises(Exception, match="writes only over regular files"):
        write_file(target, "x")
    assert victim.read_text() == "keep"
    assert {"fifo": stat.S_ISFIFO, "symlink": stat.S_ISLNK, "folder": stat.S_ISDIR}[kind](
        os.lstat(target).st_mode
    )


def test_report_refuses_what_is_not_a_regular_file(dmlbench, stored: Path, tmp_path: Path) -> None:
    pipe = _fifo(tmp_path / "pipe")
    not_a_folder = tmp_path / "file.png"
    not_a_folder.write_text("x")
    cases = [
        (("--out", str(pipe)), "is a named pipe"),
        (("--out", str(tmp_path)), "is a folder"),
        (("--out", ""), "is a folder"),
        (("--png", str(not_a_folder)), "is not a folder"),
    ]
    if os.geteuid() == 0:  # the attack: a device node replaced by the report
        device = tmp_path / "null"
        os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        cases.append((("--out", str(device)), "is a device"))
    for args, message in cases:
        code, _, err = dmlbench("report", "--store", str(stored), *args)
        assert code == 2 and message in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode) and not_a_folder.read_text() == "x"
    if os.geteuid() == 0:
        assert stat.S_ISCHR(os.lstat(tmp_path / "null").st_mode)
    code, _, err = dmlbench("report", "--store", str(stored), "--out", str(tmp_path / "r.html"))
    assert code == 0 and (tmp_path / "r.html").is_file(), err


def test_export_writes_no_file_through_a_planted_link(
    dmlbench, stored: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    folder = tmp_path / "tables"
    folder.mkdir()
    (folder / "evals.csv").symlink_to(victim)
    code, _, err = dmlbench(
        "export", "--store", str(stored), "--out", str(folder), "--format", "csv"
    )
    assert code == 2 and "evals.csv is a symbolic link" in err, err
    assert victim.read_text() == "keep" and sorted(os.listdir(folder)) == ["evals.csv"]
    code, _, err = dmlbench("export", "--store", str(stored), "--out", str(victim))
    assert code == 2 and "is not a folder" in err and "Traceback" not in err, err


def test_csv_cells_a_spreadsheet_would_run_are_quoted(
    dmlbench, stored: Path, tmp_path: Path
) -> None:
    import pandas as pd

    code, _, err = dmlbench(
        "export", "--store", str(stored), "--out", str(tmp_path / "t"), "--format", "csv"
    )
    assert code == 0, err
    runs = pd.read_csv(tmp_path / "t" / "runs.csv")
    assert runs.loc[0, "sweep"] == "'" + HOSTILE_SWEEP
    assert runs.loc[0, "error"].startswith("'@SUM")
    assert runs.loc[0, "workers"] == 1  # numbers stay numbers
    code, text, err = dmlbench("compare", "--store", str(stored), "--csv")
    assert code == 0 and "'=HYPERLINK" in text, err
    assert not any(cell.startswith(("=", "@", '"=')) for cell in text.replace("\n", ",").split(","))
    # both forms asked: the JSON was written and the CSV dropped without a word
    code, text, err = dmlbench("compare", "--store", str(stored), "--csv", "--json")
    assert code == 2 and text == "" and "--json or --csv: one form" in err
    for command in ("tasks", "spec"):  # and the docs page beside the JSON
        code, text, err = dmlbench(command, "--markdown", "--json")
        assert code == 2 and text == "" and "--json or --markdown: one form" in err


def test_markup_in_user_text_is_printed_literally_by_every_command(
    dmlbench, stored: Path, tmp_path: Path
) -> None:
    """A sweep named ``x[/]`` crashed a hint with rich's MarkupError; ``[bold]`` vanished
    (issue 40). Each command that shows stored text shows it as it is."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: '{HOSTILE_SWEEP}'\ntask: synthetic-mlp\naxes: {{workers: [1]}}\n")
    for args, wanted in [
        (("results", "--store", str(stored)), "r1"),
        (("results", "r1", "--store", str(stored)), "@SUM(A1) [/]"),
        (("compare", "--store", str(stored), "--by", "workers,sweep"), "[bold]b[/]"),
        (("report", "--store", str(stored), "--out", str(tmp_path / "r.html")), "[bold]b[/]"),
        (("sweep", str(sweep), "--plan", "--store", str(stored)), "[bold]b[/]"),
    ]:
        code, out, err = dmlbench(*args)
        assert code == 0, (args, err)
        assert "MarkupError" not in err and "Traceback" not in err, err
        shown = "".join((out + err).split())  # tables wrap long cells
        assert wanted.replace(" ", "") in shown, (args, out)


# Every option that names something dmlbench reads from the user; the rest of the Path
# options are outputs, marked by their callback (``checked_output``). A new Path option
# must be put in one or the other: the walk below fails on one it does not know.
INPUT_OPTIONS = {
    "store",
    "prices",
    "config",
    "data_dir",
    "import_dirs",
    "import_mlperf",
    "curve",
    "hardware",
    "file",
    "setup_file",
}
# What each command with an output option needs besides it, to reach the check.
OUTPUT_CALLS = {
    ("report", "out"): ("report", "--store", "{store}", "--out"),
    ("report", "png"): ("report", "--store", "{store}", "--png"),
    ("export", "out"): ("export", "--store", "{store}", "--out"),
    ("simulate", "png"): ("simulate", "digits-mlp", "--store", "{store}", "--png"),
    ("simulate-cluster", "png"): (
        "simulate-cluster",
        "imagenet-resnet50",
        "--cluster",
        "dgx-a100",
        "--png",
    ),
    ("bench curve", "out"): ("bench", "curve", "cifar10-resnet20", "--store", "{store}", "--out"),
    ("slurm", "out"): ("slurm", "digits-mlp", "--out"),
    ("k8s", "out"): ("k8s", "digits-mlp", "--image", "img", "--out"),
}


def _path_options() -> dict[tuple[str, str], str | None]:
    """(command, option) → "file", "folder" (an output) or None (an input), for every
    option of every command (subcommands too) whose type is a path."""
    import typing

    import typer

    from dmlbench.cli.app import app

    def walk(group: typing.Any, prefix: str = "") -> typing.Iterator[tuple[str, typing.Any]]:
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from walk(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    found = {}
    for name, command in walk(typer.main.get_command(app)):
        hints = typing.get_type_hints(command.callback)
        for param in command.params:
            if "Path" in repr(hints.get(param.name)):
                found[(name, param.name)] = getattr(param.callback, "output", None)
    return found


def test_every_output_option_refuses_what_is_not_a_regular_file_or_folder(
    dmlbench, stored: Path, tmp_path: Path
) -> None:
    """Issue 53: `simulate --png` wrote through a symbolic link, made `/dev/full.png`
    from `--png /dev/full`, wrote `DIR.png` for a folder, and gave a FIFO a traceback:
    it called matplotlib's savefig past the checks `report --out` had. Every output
    option of every command now goes through the one checked writer, refused before
    any work in one line, the thing named left as it was."""
    options = _path_options()
    outputs = {key: kind for key, kind in options.items() if kind is not None}
    unknown = {key for key, kind in options.items() if kind is None and key[1] not in INPUT_OPTIONS}
    assert unknown == set(), f"classify these path options: {unknown}"
    assert set(outputs) == set(OUTPUT_CALLS), "each output option needs a call here"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "link").symlink_to(victim)
    _fifo(hostile / "pipe")
    (hostile / "folder").mkdir()
    if os.geteuid() == 0:
        os.mknod(hostile / "full", 0o600 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's
    for (command, option), kind in sorted(outputs.items()):
        cases = {"link": "is a symbolic link", "pipe": "is a named pipe"}
        if kind == "file":
            cases["folder"] = "is a folder"
            if os.geteuid() == 0:
                cases["full"] = "is a device"
        else:
            cases = {"link": "is not a folder", "pipe": "is not a folder"}
        for name, message in cases.items():
            call = [part.format(store=stored) for part in OUTPUT_CALLS[(command, option)]]
            code, _, err = dmlbench(*call, str(hostile / name))
            assert code == 2 and message in err, (command, option, name, err)
            assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert victim.read_text() == "keep"
    assert sorted(os.listdir(hostile)) == sorted(
        ["link", "pipe", "folder", "full"][: 3 + (os.geteuid() == 0)]
    )
    assert os.listdir(hostile / "folder") == []
    assert not Path("/dev/full.png").exists()


def test_simulate_writes_its_png_at_exactly_the_path_given(dmlbench, tmp_path: Path) -> None:
    target = tmp_path / "scaling"  # no suffix: matplotlib would have written scaling.png
    code, _, err = dmlbench(
        "simulate-cluster",
        "imagenet-resnet50",
        "--cluster",
        "dgx-a100",
        "--nodes",
        "1,2",
        "--png",
        str(target),
    )
    assert code == 0, err
    assert (
        target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not target.with_suffix(".png").exists()
    )


def test_a_line_that_prints_a_path_is_never_broken_inside_it(
    stored: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 53: the report's line broke where the terminal ended, inside the path or
    between "(1" and "figure,": a user could not copy the path, and a test's check
    depended on the path's length. A line that prints a path soft-wraps at any width."""
    import sys

    from dmlbench.cli.app import main

    out = tmp_path / ("a-rather-long-folder-name-" * 4) / "report.html"
    monkeypatch.setattr(
        sys, "argv", ["dmlbench", "report", "--store", str(stored), "--out", str(out)]
    )
    monkeypatch.setenv("COLUMNS", "60")
    with contextlib.suppress(SystemExit):
        main()
    lines = capsys.readouterr().out.splitlines()
    assert any(f"report: {out} (" in line and "figure" in line for line in lines), lines


def test_export_formats_take_a_comma_list_as_the_other_list_options_do() -> None:
    """`export --format csv,parquet` was refused as "--format 'csv,parquet': choose csv
    or parquet", where `--workers 1,2` and `--algorithm ring,ps` take such lists."""
    from dmlbench.errors import DmlbenchError
    from dmlbench.report.export import check_formats, parquet_available

    assert check_formats(["csv", "csv, csv"]) == ["csv"]
    if parquet_available():
        assert check_formats(["csv,parquet"]) == ["csv", "parquet"]
    with pytest.raises(DmlbenchError, match="--format 'xls': choose csv or parquet"):
        check_formats(["csv,xls"])
