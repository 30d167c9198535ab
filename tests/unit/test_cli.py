"""The `dmlbench` command as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import EXAMPLES, REPO, cli

from dmlbench.results import ResultsStore


def test_tasks_lists_every_reference_task(dmlbench) -> None:
    names = {t["name"] for t in json.loads(dmlbench("tasks", "--json")[1])}
    expected = {"digits-mlp", "epsilon-logreg"} | {f"cifar10-resnet{d}" for d in (20, 32, 44, 56)}
    assert expected <= names
    table = dmlbench("tasks")[1]
    assert "cifar10-resnet56" in table and "α/√t" in table


def test_models_and_exchanges_list_every_registered_one_with_its_options(dmlbench) -> None:
    """Issue 56, item 4: the model zoo and the exchanges were named only in errors."""
    from dmlbench.catalogue import OPEN_EXCHANGES, SYNC_EXCHANGES
    from dmlbench.comm.exchange import EXCHANGES, is_exact
    from dmlbench.models import MODELS

    assert list(EXCHANGES) == [*SYNC_EXCHANGES, *OPEN_EXCHANGES]  # --help's list is whole
    assert all(is_exact(name) for name in SYNC_EXCHANGES)
    assert not any(is_exact(name) for name in OPEN_EXCHANGES)
    code, out, _ = dmlbench("exchanges", "--json")
    exchanges = {e["name"]: e for e in json.loads(out)}
    assert code == 0 and list(exchanges) == list(EXCHANGES)
    assert all(e["summary"] for e in exchanges.values())  # each says what it is
    assert exchanges["fsdp"]["sharded"] and exchanges["fsdp"]["division"] == "closed"
    topk = {o["name"]: o for o in exchanges["topk"]["options"]}
    assert exchanges["topk"]["division"] == "open" and "ratio" in topk
    code, out, _ = dmlbench("models", "--json")
    models = {m["name"]: m for m in json.loads(out)}
    assert code == 0 and list(models) == list(MODELS)
    depth = next(o for o in models["imagenet-resnet"]["options"] if o["name"] == "depth")
    assert depth["default"] == "50" and "ResNet-18" in depth["meaning"]
    code, out, _ = dmlbench("exchanges")
    assert code == 0 and "ef-signsgd" in out and "open division" in out
    # a name a line, what it is and its options below: at 80 columns a three-column
    # table left a dozen characters to a line
    lines = [line.rstrip() for line in out.splitlines()]
    assert "  fsdp  closed division, sharded" in lines
    assert "--set exchange_options.KEY=VALUE" in lines[0]  # how to set one, which works
    assert any(line.startswith("        reshard_after_forward (true): free") for line in lines)
    code, out, _ = dmlbench("run", "--help")
    assert code == 0 and all(name in out for name in EXCHANGES)


def test_networks_lists_the_profiles_a_run_can_name(dmlbench, tmp_path: Path) -> None:
    """`network.profile` said "see `dmlbench networks`", a command that did not exist."""
    from dmlbench.netem.profiles import NetworkSpec, load_profiles

    code, out, _ = dmlbench("networks", "--json")
    listed = {p["name"]: p for p in json.loads(out)}
    assert code == 0 and list(listed) == list(load_profiles())
    assert listed["wan-20ms"]["latency"] == "20ms"
    for name in listed:  # every name it lists is one a run takes
        assert NetworkSpec(profile=name).resolve().name == name
    mine = tmp_path / "mine.yaml"
    mine.write_text("lab: {bandwidth: 40gbit, intra_bandwidth: 200gbit, description: ours}\n")
    code, out, _ = dmlbench("networks", "--file", str(mine))
    assert code == 0 and "lab" in out and "200gbit" in out and "wan-20ms" not in out
    # the listing names the shortest way to a rate of one's own, and a run takes it
    from dmlbench.netem.profiles import network_option

    assert "--network 250mbit (a rate alone)" in " ".join(out.split())
    assert network_option("250mbit") == {"bandwidth": "250mbit"}
    mine.write_text("lab: {bandwidth: fast}\n")
    code, _, err = dmlbench("networks", "--file", str(mine))
    assert code == 2 and "'fast' is not a positive rate" in err


def test_dry_run_resolves_and_starts_nothing(dmlbench, tmp_path: Path) -> None:
    code, out, _ = dmlbench(
        "run",
        "cifar10-resnet20",
        "--workers",
        "4",
        "--dry-run",
        "--json",
        "--store",
        str(tmp_path / "s"),
    )
    plan = json.loads(out)
    assert code == 0 and plan["spec"]["workers"] == 4 and plan["derived"]["global_batch"] == 128
    assert plan["derived"]["lr_first_step"] == pytest.approx(0.1 / 256 * 32)
    assert plan["derived"]["lr_after_warmup"] == pytest.approx(0.1 / 256 * 128)
    assert plan["derived"]["division"] == "closed" and plan["deviations"] == {}
    assert not (tmp_path / "s").exists()
    # without --json: the run in the summary's shape, where it printed 106 lines of JSON
    args = ("run", "cifar10-resnet20", "-w", "4", "--set", "momentum=0.5", "--dry-run")
    code, out, _ = dmlbench(*args, "--store", str(tmp_path / "s"))
    shown = " ".join(out.split())
    assert code == 0 and "{" not in out and not (tmp_path / "s").exists()
    assert "cifar10-resnet20 · 4 workers · open division · a dry run: nothing started" in shown
    assert "batch 32 a worker, 128 in all" in shown
    assert f"{0.1 / 256 * 32:.3g} at the first step, {0.1 / 256 * 128:.3g} after warm-up" in shown
    assert "momentum 0.5" in shown and "differs from recipe recipe.optimizer.momentum=0.5" in shown
    code, out, _ = dmlbench("run", "cifar10-resnet20", "--model", "mlp", "--dry-run")
    assert code == 0 and out.startswith("cifar10-resnet20 (model mlp) · 1 worker")  # as stored


def test_global_batch_flag_fixes_the_global_batch(dmlbench) -> None:
    """One run: local = global / workers; a list of counts: strong scaling at that batch,
    also when given with --set (an inline strong sweep once ignored it)."""
    code, out, _ = dmlbench(
        "run", "digits-mlp", "-w", "2", "--global-batch", "128", "--dry-run", "--json"
    )
    one = json.loads(out)
    assert code == 0 and one["spec"]["recipe"]["local_batch"] == 64
    for args in (["--global-batch", "128"], ["--scaling", "strong", "--set", "global_batch=128"]):
        code, out, _ = dmlbench("run", "digits-mlp", "-w", "1,2", *args, "--dry-run", "--json")
        plan = json.loads(out)
        assert code == 0 and plan["sweep"]["scaling"] == "strong"
        assert [
            (r["spec"]["recipe"]["local_batch"], r["spec"]["global_batch"]) for r in plan["runs"]
        ] == [(128, 128), (64, 128)]


def test_a_sweep_plans_with_dry_run_as_a_run_does(dmlbench, tmp_path: Path) -> None:
    sweep = tmp_path / "s.yaml"
    sweep.write_text("task: digits-mlp\naxes: {workers: [1, 2]}\n")
    plans = [
        dmlbench("sweep", str(sweep), word, "--json", "--store", str(tmp_path / "s"))
        for word in ("--plan", "--dry-run")
    ]
    assert [code for code, _, _ in plans] == [0, 0]
    runs = [[r["spec"]["workers"] for r in json.loads(out)["runs"]] for _, out, _ in plans]
    assert runs == [[1, 2], [1, 2]] and not (tmp_path / "s").exists()
    code, out, _ = dmlbench("sweep", str(sweep), "--plan", "--store", str(tmp_path / "s"))
    assert code == 0 and ": 2 runs (scaling: none)" in out  # it read "(none scaling)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "no-such-task"], "unknown task 'no-such-task'"),
        (["run", "digits-mlp", "--workers", "0", "--dry-run"], "must be at least 1"),
        (["run", "digits-mlp", "--set", "workers=0", "--dry-run"], "workers: Input should be"),
        (["run", "digits-mlp", "--set", "global_batch=33", "--workers", "2"], "not divisible"),
        (
            ["run", "cifar10-resnet20", "--data-dir", "/nonexistent", "--set", "download=false"],
            "CIFAR-10 not found under /nonexistent",
        ),
        (["results", "--store", "/nonexistent/store"], "no results store"),
        (["report", "--store", "/nonexistent/store"], "no results store"),
        (["compare", "--store", "/nonexistent/store"], "no results store"),
        (["sweep", "/nonexistent/sweep.yaml"], "does not exist"),
        (
            ["run", "digits-mlp", "--set", "recipe.precision=tf32", "--set", "device=cpu"],
            "has no TF32 tensor cores",
        ),
        (["run", "--workers", "1,0"], "worker counts must be at least 1"),
        (
            ["run", "--workers", "1,3", "--scaling", "strong", "--dry-run"],
            "global batch 32 does not divide among 3 workers",
        ),
        (
            ["run", "--workers", "1,3", "--global-batch", "128", "--dry-run"],
            "global batch 128 does not divide among 3 workers",
        ),
        (
            ["run", "--workers", "1,2", "--scaling", "weak", "--global-batch", "64", "--dry-run"],
            "weak scaling keeps each worker's local batch: drop --global-batch, or use --scal",
        ),
        (
            ["run", "--workers", "1,2", "--scaling", "sideways", "--dry-run"],
            "--scaling 'sideways': choose",
        ),
        (
            ["run", "--workers", "1,2", "--rerun", "sometimes", "--dry-run"],
            "'sometimes' is not one",
        ),
        (["run", "--workers"], "Option '--workers' requires an argument"),
        (["results", "--upgrade", "--nope"], "No such option: --nope"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(dmlbench, args: list[str], message: str) -> None:
    code, _, err = dmlbench(*args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_start_method_that_is_none_is_refused_before_anything_is_stored(
    dmlbench, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`run`, and `dask fit` on a local cluster (whose workers it starts too: it had
    stored a failed fit)."""
    monkeypatch.setenv("DMLBENCH_START_METHOD", "fork")
    for command in (["run", "--workers", "1"], ["dask", "fit", "synthetic-mlp"]):
        code, _, err = dmlbench(*command, "--store", str(tmp_path / "store"))
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "DMLBENCH_START_METHOD='fork' is not a way to start workers" in err
        assert "forkserver or spawn" in err
        assert ResultsStore(tmp_path / "store").runs() == []


def test_a_run_id_fragment_shows_one_run_or_says_which_match(dmlbench, tmp_path: Path) -> None:
    """A start two runs share said "no single run matches", as for an id the store has
    not; a micro-benchmark's whole id is shown even where training runs start with it."""
    from dmlbench.resolve import resolve_spec
    from dmlbench.results.environment import collect_environment

    store = ResultsStore(tmp_path / "store")
    here, spec = collect_environment(), resolve_spec("synthetic-mlp").to_json_dict()
    for run_id in ("bench-a1", "bench-a2", "bench-b1"):
        store.begin(run_id, spec, {}, here)
    bench = {"op": "allreduce", "workers": 2, "nodes": 1, "backend": "gloo", "network": {}}
    store.begin_comm("bench", bench, here)
    row = {"bytes": 4, "repeats": 1, "iterations": 1, "latency_s": 1e-4, "latency_min_s": 1e-4}
    row |= {"latency_max_s": 1e-4, "latency_std_s": 0.0, "algbw": 4e4, "busbw": 4e4}
    store.finish_comm("bench", status="success", results=[row], error=None)
    where = ("--store", str(tmp_path / "store"), "--json")
    code, _, err = dmlbench("results", "bench-a", *where)
    said = " ".join(err.split())
    assert code == 2 and "2 runs start or end with 'bench-a'" in said
    assert "(bench-a1, bench-a2): give more of one's id" in said
    code, out, _ = dmlbench("results", "bench-b", *where)
    assert code == 0 and json.loads(out)[0]["run_id"] == "bench-b1"
    code, out, _ = dmlbench("results", "bench", *where)  # the micro-benchmark's whole id
    assert code == 0 and json.loads(out)["run_id"] == "bench"
    code, _, err = dmlbench("results", "zzz", *where)
    assert code == 2 and "no run matches 'zzz'" in err and "`dmlbench results` lists" in err


def test_user_and_engine_text_is_printed_literally(dmlbench, tmp_path: Path) -> None:
    from dmlbench.results import ResultsStore

    store = str(tmp_path / "store")
    ResultsStore(Path(store)).prepare()
    code, _, err = dmlbench("results", "abc[/x]", "--store", store)
    assert code == 2 and "no run matches 'abc[/x]'" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = dmlbench("run", "digits-mlp", "--set", "max_epochs=[red]x", "--dry-run")
    assert code == 2 and "(got '[red]x')" in err


def test_help_lists_the_commands(dmlbench) -> None:
    help_text = dmlbench("--help")[1]
    assert all(command in help_text for command in ("tasks", "run", "results"))


def test_docs_task_page_is_generated_from_the_registry() -> None:
    page = REPO / "docs" / "tasks.md"
    # A process of its own: tests before this one may have registered plugin tasks here.
    assert page.read_text() == cli("tasks", "--markdown").stdout, (
        "docs/tasks.md is stale: run `dmlbench tasks --markdown > docs/tasks.md`"
    )


def test_docs_spec_page_is_generated_from_the_run_spec(dmlbench) -> None:
    code, out, _ = dmlbench("spec", "--markdown")
    assert code == 0 and (REPO / "docs" / "spec.md").read_text() == out, (
        "docs/spec.md is stale: run `dmlbench spec --markdown > docs/spec.md`"
    )
    from dmlbench.spec.run import RunSpec

    keys = [f"`{name}`" for name in RunSpec.model_fields] + ["`recipe.optimizer.momentum`"]
    assert all(f"| {key} |" in out for key in keys)  # every field has its row
    assert "`kind: warmup_step`" in out and "| `network.bandwidth` |" in out
    code, shown, _ = dmlbench("spec")  # the terminal's: a key a line, its meaning below
    lines = shown.splitlines()
    assert code == 0 and all(f"  {name}  " in shown for name in RunSpec.model_fields)
    assert "  workers  int, default 1" in lines and "  task  str, required" in lines
    assert "`" not in shown and "| " not in shown  # no Markdown left in it


def test_every_docs_page_is_in_the_readme_s_table() -> None:
    """The README's table is how a newcomer finds a page: mkdocs's nav checks the site,
    nothing else checked the README (the time-to-train page was missing from it)."""
    readme = (REPO / "README.md").read_text()
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"index.md"}
    missing = sorted(name for name in pages if f"](docs/{name})" not in readme)
    assert not missing, f"docs pages the README's table does not link: {missing}"


def _documented_commands() -> list[tuple[str, list[str]]]:
    """(page, words after `dmlbench`) for each command in the pages' code blocks; a
    changelog keeps old commands on purpose and is left out."""
    import re
    import shlex

    pages = [REPO / "README.md", REPO / "BENCHMARKS.md", REPO / "RELIABILITY.md"]
    commands = []
    for page in [*pages, *sorted((REPO / "docs").glob("*.md"))]:
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if "dmlbench " not in line:
                    continue
                line = line.strip().removeprefix("$ ")
                lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
                lexer.whitespace_split = True  # `--set a.b=1` one word; `;`, `&&`, `|` apart
                words: list[str] = []
                for word in [*lexer, ";"]:
                    if word.strip(";&|"):
                        words.append(word)
                        continue
                    if words[:1] in (["do"], ["then"]):  # a loop's or a test's body
                        words.pop(0)
                    if words[:1] == ["dmlbench"]:
                        commands.append((page.name, words[1:]))
                    words = []
    return commands


def test_every_command_the_docs_show_names_options_tasks_and_files_that_exist() -> None:
    """A renamed option or task leaves a page that fails its reader at the first step:
    the pages' commands are checked against the CLI and the task registry (not run)."""
    import typer.main

    from dmlbench.cli.app import app
    from dmlbench.tasks import all_tasks

    root = typer.main.get_command(app)
    tasks = {task.name for task in all_tasks()}
    commands = _documented_commands()
    assert len(commands) > 50  # the pages were read: README's, docs/'s
    wrong = []
    for page, words in commands:
        command = root
        while words and words[0] in getattr(command, "commands", ()):
            command = command.commands[words.pop(0)]
        if hasattr(command, "commands"):  # a group: the words name none of its commands
            if words and not words[0].startswith("-"):
                wrong.append(f"{page}: no command {words[0]!r}")
            continue
        options = {name: p for p in command.params for name in (*p.opts, *p.secondary_opts)}
        given = []  # the words that are no option's value
        while words:
            word = words.pop(0)
            if not word.startswith("-"):
                given.append(word)
            elif (option := options.get(word.split("=")[0])) is None:
                wrong.append(f"{page}: dmlbench {command.name} has no {word}")
            elif not option.is_flag and "=" not in word and words:
                words.pop(0)
        arguments = [p.name for p in command.params if p.param_type_name == "argument"]
        for name, word in zip(arguments, given, strict=False):
            known = word in tasks or (REPO / word).is_file()
            if name in ("task", "target", "file") and not known:
                wrong.append(f"{page}: dmlbench {command.name}: no task or file {word!r}")
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("name", "task"),
    [("digits.yaml", "digits-mlp"), ("cifar10-resnet20.toml", "cifar10-resnet20")],
)
def test_example_spec_files_resolve(dmlbench, name: str, task: str) -> None:
    code, out, err = dmlbench("run", "--config", str(EXAMPLES / name), "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["spec"]["task"] == task


def test_help_shows_no_value_beside_a_flag(dmlbench) -> None:
    code, out, _ = dmlbench("results", "--help")
    assert code == 0 and "--json" in out and "--help" in out
    assert "<bool>" not in out  # typer's default: as if a flag took a value


def test_no_flag_offers_a_switch_that_turns_it_off() -> None:
    """A flag without a name of its own becomes typer's ``--quiet/--no-quiet``: `sweep
    --help` offered a --no-quiet that is the default, beside flags that name one switch."""
    import typer.main

    from dmlbench.cli.app import app

    def commands(group: Any, path: str) -> list[tuple[str, Any]]:
        found = [(path, group)]
        for name, sub in getattr(group, "commands", {}).items():
            found += commands(sub, f"{path} {name}")
        return found

    both = [
        f"{path}: {'/'.join(option.opts + option.secondary_opts)}"
        for path, command in commands(typer.main.get_command(app), "dmlbench")
        for option in command.params
        if getattr(option, "secondary_opts", None)  # typer's options are not click's
    ]
    assert len(commands(typer.main.get_command(app), "dmlbench")) > 20 and not both, both


def test_version_comes_from_the_package_metadata(dmlbench) -> None:
    from importlib.metadata import version

    code, out, _ = dmlbench("--version")
    assert code == 0 and out.strip() == f"dmlbench {version('dmlbench')}"


def test_help_joins_a_docstring_s_lines_so_the_terminal_wraps_each_paragraph_once() -> None:
    """typer 0.29 kept a paragraph's single line breaks and rich wrapped the lines again,
    leaving "the" and "not" on lines of their own in `simulate --help` at 80 columns."""
    from typing import Any, cast

    import typer

    from dmlbench.cli.app import app
    from dmlbench.report.formats import reflowed

    text = "First line.\n\nOne paragraph\n  over two lines.\n\n- an item\n  going on\n- another"
    assert reflowed(text) == (
        "First line.\n\nOne paragraph over two lines.\n\n- an item going on\n- another"
    )
    assert reflowed("\b\nkept\nas is") == "\b\nkept\nas is" and reflowed(None) is None
    simulate = cast(Any, typer.main.get_command(app)).commands["simulate"]
    assert simulate.help and all("\n" not in paragraph for paragraph in simulate.help.split("\n\n"))


def test_no_help_is_cut_short_at_80_columns() -> None:
    """`run --help` at 80 columns cut "--set recipe.model.options.KEY=VALUE" to
    "recipe.model.optio…": a word longer than rich's help column loses its end. Every
    command's help may hold only the ellipses its own text writes."""

    import typer
    from typer.testing import CliRunner

    from dmlbench.cli.app import app

    def commands(group: Any, path: tuple[str, ...] = ()) -> Any:
        for name, command in group.commands.items():
            if hasattr(command, "commands"):  # a group: bench, dask
                yield from commands(command, (*path, name))
            else:
                yield (*path, name), command

    runner = CliRunner()
    listed = list(commands(typer.main.get_command(app)))
    assert len(listed) > 15
    for path, command in listed:
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}).output
        own = (command.help or "") + "".join(getattr(p, "help", None) or "" for p in command.params)
        assert shown.count("…") <= own.count("…"), f"dmlbench {' '.join(path)} --help"
        assert max(map(len, shown.splitlines())) <= 80


def test_the_task_list_cuts_nothing_short_at_80_columns() -> None:
    """`dmlbench tasks` wrote ResNet-50's "zero_init_residual=T…" at 80 columns."""
    from rich.console import Console

    from dmlbench.cli.views.catalogue import tasks_table
    from dmlbench.tasks import all_tasks

    console = Console(width=80, record=True)
    console.print(tasks_table(all_tasks()))
    shown = console.export_text()
    assert "imagenet-resnet50" in shown and "…" not in shown


def test_a_share_there_is_never_reads_zero_percent() -> None:
    """The report's utilisation column read 0% for digits-mlp's 0.3% of the GEMM peak."""
    from dmlbench.report.formats import MISSING, share

    assert [share(v) for v in (0.003, 0.0949, 0.33, 1.0)] == ["0.3%", "9.5%", "33%", "100%"]
    assert share(None) == share(float("nan")) == MISSING


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("600", 600), ("1e9", 1e9), ("90s", 90), ("10min", 600), ("1.5h", 5400), ("2d", 172800),
     ("2:00:00", 7200), ("5:30", 330), ("1.5 h", 5400), ("8 hours", 28800)],
)  # fmt: skip
def test_a_deadline_or_a_budget_takes_a_duration(text: str, seconds: float) -> None:
    """`advise-cluster --deadline 8h` was refused: "Input should be a valid number"."""
    from dmlbench.names import duration_seconds

    assert duration_seconds(text) == seconds


def test_what_is_no_duration_is_refused_in_one_line(dmlbench) -> None:
    for text in ("8 hous", "-5", "1:75", "inf", "9" * 400):
        code, _, err = dmlbench("advise-cluster", "t", "--cluster", "dgx-a100", "--deadline", text)
        assert code == 2 and "no" in err and "duration" in err, (text, err)
        assert len(err.strip().splitlines()) == 1, err
    code, _, err = dmlbench("report", "--budget", "2 weeks")
    assert code == 2 and "is no duration" in err, err
