"""What the commands share: each repeated option defined once, the consoles, the store
and JSON helpers. Light imports only: `dmlbench --help` must not wait for torch."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from dmlbench.errors import DmlbenchError
from dmlbench.names import duration_seconds
from dmlbench.report.formats import plural, reflowed
from dmlbench.results.store import DEFAULT_STORE, STORE_ENV, Rerun

if TYPE_CHECKING:
    from dmlbench.results import ResultsStore

console = Console()
err_console = Console(stderr=True)


def flag(*names: str, **options: Any) -> Any:
    """A flag's ``typer.Option``: typer writes a value type beside every option in
    --help (``<bool>`` for a flag, as if it took a value); an empty metavar shows none."""
    return typer.Option(*names, metavar="", **options)


class _BareHelp:
    """--help is a flag too: typer's own shows ``<bool>`` beside it. Its text is
    :func:`reflowed`."""

    help: str | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = reflowed(self.help)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option


class Command(_BareHelp, typer.core.TyperCommand):
    """Every dmlbench command (``app.command(cls=Command)``)."""


class Group(_BareHelp, typer.core.TyperGroup):
    """Every dmlbench command group (see :func:`command_group`)."""


def command_group(help: str, **settings: Any) -> typer.Typer:
    """A group of commands (``dmlbench bench …``): its help without arguments."""
    return typer.Typer(cls=Group, help=help, no_args_is_help=True, **settings)


DEFAULT_TASK = "digits-mlp"


STORE = Path(DEFAULT_STORE)  # --store's default, where DMLBENCH_STORE is not set
StoreOption = Annotated[
    Path,
    typer.Option(
        "--store",
        envvar=STORE_ENV,
        help="results folder (SQLite + run logs); default ./dmlbench-results",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, flag("--json", help="machine-readable output on stdout")]
TaskArgument = Annotated[
    str | None, typer.Argument(help=f"task name (default {DEFAULT_TASK})", show_default=False)
]
SeedOption = Annotated[int | None, typer.Option(help="random seed")]
DataDirOption = Annotated[Path | None, typer.Option(help="where datasets are found")]
ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML run spec")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="override any spec key: key=value (repeatable)"),
]
PluginOption = Annotated[
    list[str] | None, typer.Option("--plugin", help="module that registers tasks")
]
_RERUN_HELP = (
    "runs the store already has: never (skip all), failed (redo the failed and "
    "interrupted ones), always (run everything again)"
)
RerunOption = Annotated[
    Rerun,
    # the choices, as <never|failed|always>, broke mid-word at 80 columns
    typer.Option(metavar="<when>", help=_RERUN_HELP),
]
SweepRerunOption = Annotated[  # `run`'s: only a sweep has runs to skip
    Rerun | None,
    typer.Option(metavar="<when>", help=f"a sweep's {_RERUN_HELP}; default failed"),
]
NETWORK_HELP = (
    "network profile (`dmlbench networks` lists them) or a rate (250mbit): each worker in "
    "its own namespace, shaped (root)"
)
NprocPerNodeOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="workers per node (torchrun's meaning; default 1, or one per GPU where a "
        "job asks for GPUs)",
    ),
]
QuietOption = Annotated[bool, flag("--quiet", help="keep worker output in the run folders only")]


def duration(text: str) -> float:
    """An option's time (`--deadline 8h`): :func:`duration_seconds`, refused as typer's."""
    try:
        return duration_seconds(text)
    except ValueError as error:  # typer let through as "Value error, …"
        raise typer.BadParameter(str(error)) from None


BudgetOption = Annotated[
    float | None,
    typer.Option(
        parser=duration,
        metavar="<duration>",
        help="accuracy after time (AAT): the best accuracy, or least test loss, within "
        "this time (seconds, or 90s, 30min, 1.5h, H:MM:SS)",
    ),
]
PriceOption = Annotated[
    str | None,
    typer.Option(
        help="price per worker-hour: a number or a name in the price table "
        "(default gcp-n1-standard-4, an example)"
    ),
]
PricesOption = Annotated[
    Path | None, typer.Option(help="your own price table (YAML, like prices.yaml)")
]
IncludeDisturbedOption = Annotated[
    bool,
    flag(
        "--include-disturbed",
        help="count runs disturbed by other processes in timings, speedup and efficiency",
    ),
]
EpochsOption = Annotated[
    float | None,
    typer.Option(
        help="epochs to the target at the recipe's batch, assumed until a run reaches it",
        min=0.01,
    ),
]


def output_option(help: str, what: str, *, folder: bool = False) -> Any:
    """A ``--out``/``--png`` option whose path is refused in one line before the command
    does any work: a file option takes a regular file or a free name, a folder option a
    folder or a free name (see :mod:`dmlbench.files`). The writer checks again as it
    writes; this is so that nothing is computed in vain."""
    return typer.Option(help=help, callback=OutputCheck(what, folder))


@dataclass
class OutputCheck:
    """The callback of :func:`output_option`; ``output`` (in its ``__dict__``, which
    typer's wrapper copies) marks the option for the test that walks every command."""

    what: str
    folder: bool = False
    output: str = field(init=False)

    def __post_init__(self) -> None:
        self.output = "folder" if self.folder else "file"

    def __call__(self, value: Path | None) -> Path | None:
        if value is not None:
            from dmlbench.files import check_output_file, check_output_folder

            if self.folder:
                check_output_folder(value, self.what, make=False)
            else:
                check_output_file(value, self.what)
        return value


def one_form(**asked: bool) -> None:
    """Refuse two forms of one output on stdout (``json=True, csv=True``): one was
    written and the other dropped without a word."""
    given = [f"--{name}" for name, on in asked.items() if on]
    if len(given) > 1:
        raise DmlbenchError(f"{' or '.join(given)}: one form of the output on stdout")


def print_json(data: Any) -> None:
    """``data`` as strict JSON on stdout; stored records in their ``as_dict()`` form. A
    float that is not finite (a diverged run's loss) is ``null``: JSON has no NaN, and
    strict readers (jq, browsers) refuse Python's bare ``NaN``."""
    try:
        text = json.dumps(data, indent=2, default=_jsonable, allow_nan=False)
    except ValueError:
        text = json.dumps(_strict(data), indent=2, default=_jsonable, allow_nan=False)
    sys.stdout.write(text + "\n")


def _strict(value: Any) -> Any:
    from dmlbench.results.events import map_leaves

    if hasattr(value, "as_dict"):
        return _strict(value.as_dict())
    if isinstance(value, dict | list | tuple):
        return map_leaves(value, _strict)
    return value if not isinstance(value, float) or math.isfinite(value) else None


def _jsonable(value: Any) -> Any:
    return value.as_dict() if hasattr(value, "as_dict") else str(value)


def open_store(store: Path, *, existing: bool = False) -> ResultsStore:
    """The store at ``store``. Opening writes nothing: commands that add runs create it
    on their first write. ``existing`` (commands that read it): refused in one line
    where there is none, with a note where its run folders were never stored."""
    from dmlbench.results import ResultsStore

    opened = ResultsStore(store)
    if not existing:
        return opened
    if not opened.path.is_file():
        raise DmlbenchError(f"no results store at {store}; run a benchmark first or pass --store")
    unlisted = opened.unlisted_run_dirs()
    if opened.read_only:
        err_console.print(f"[yellow]note[/yellow]: read-only: {escape(opened.read_only)}")
    if unlisted:
        err_console.print(
            f"[yellow]note[/yellow]: {escape(str(opened.path))} holds no runs, but "
            f"{plural(len(unlisted), 'run folder')} in {escape(str(store / 'runs'))} could be "
            f"stored: dmlbench results --store {escape(str(store))} --import "
            f"{escape(str(store / 'runs'))}",
            soft_wrap=True,
        )
    return opened


def show_stored_run(store: ResultsStore, run_id: str, status: str, json_out: bool) -> None:
    """A run just stored: its summary (or its JSON); exit 1 where it failed."""
    from dmlbench.cli.views.summary import run_summary

    stored = store.runs(run_id)[0]
    if json_out:
        print_json(stored)
    else:
        console.print(run_summary(stored))
    if status == "failed":
        raise typer.Exit(1)


def spec_from(
    task: str | None, config: Path | None, overrides: list[str] | None, **fields: Any
) -> Any:
    """The run spec of a command's task argument (else the spec file's task, else the
    default), the spec file and ``--set``, and the command's own ``fields``."""
    from dmlbench.resolve import resolve_spec

    config_task, config_data = load_config(config)
    return resolve_spec(
        task or config_task or DEFAULT_TASK,
        config=config_data,
        overrides=overrides or [],
        **fields,
    )


def load_config(config: Path | None) -> tuple[str | None, dict[str, Any]]:
    """A run spec file's task (if it names one) and the rest of its keys."""
    from dmlbench.spec.run import load_config_file

    data = load_config_file(config) if config else {}
    return data.pop("task", None), data
