"""`dmlbench`: run benchmark tasks on N workers and read the stored results.

Examples::

    dmlbench tasks                                   # every task and its reference recipe
    dmlbench run digits-mlp --workers 2              # a real 2-process run, then a summary
    dmlbench run digits-mlp --workers 1,2,4 --scaling weak --repeats 3   # a sweep
    dmlbench results --json                          # every stored run, machine-readable
    dmlbench report --out report.html                # terminal tables + one HTML file

Each command family lives in a module of its own; this one registers them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Annotated

import typer
from rich.markup import escape

from dmlbench.cli import (
    advise,
    bench,
    cluster,
    dask,
    jobs,
    predict,
    reports,
    results,
    run,
    sweeps,
    tasks,
)
from dmlbench.cli.options import Command, command_group, err_console, flag
from dmlbench.errors import DmlbenchError
from dmlbench.names import shorten

MAX_ERROR_CHARS = 2000

app = command_group(
    "Benchmark distributed data-parallel training: time to accuracy, phases, scaling.",
    pretty_exceptions_enable=False,
    add_completion=False,
)
COMMANDS: dict[str, Callable[..., None]] = {
    "tasks": tasks.tasks,
    "models": tasks.models,
    "exchanges": tasks.exchanges,
    "networks": tasks.networks,
    "spec": tasks.spec,
    "run": run.run,
    "results": results.results,
    "sweep": sweeps.sweep,
    "report": reports.report,
    "compare": reports.compare,
    "export": reports.export,
    "simulate": predict.simulate,
    "simulate-cluster": cluster.simulate_cluster,
    "advise": advise.advise,
    "advise-cluster": advise.advise_cluster,
    "slurm": jobs.slurm,
    "k8s": jobs.k8s,
}
for name, command in COMMANDS.items():
    app.command(name, cls=Command)(command)
app.add_typer(bench.bench_app, name="bench")
app.add_typer(dask.dask_app, name="dask")


def _version(given: bool) -> None:
    if given:
        from dmlbench import __version__

        sys.stdout.write(f"dmlbench {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        flag("--version", callback=_version, is_eager=True, help="print the version"),
    ] = False,
    verbose: Annotated[
        int,
        flag(
            "--verbose",
            "-v",
            count=True,
            help="show what the library logs on stderr: -v what it does, -vv its details",
        ),
    ] = 0,
) -> None:
    """Benchmark distributed data-parallel training: time to accuracy, phases, scaling."""
    if verbose:
        show_logs(logging.INFO if verbose == 1 else logging.DEBUG)


def show_logs(level: int) -> None:
    """The library's log records (``logging``, under ``dmlbench``) on stderr at
    ``level``; what the CLI prints for people stays on the consoles."""
    from rich.logging import RichHandler

    handler = RichHandler(console=err_console, show_path=False, markup=False)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger = logging.getLogger("dmlbench")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False


def main() -> None:
    # torch's C++ side warns on every retry while a node waits for the rendezvous host
    # (nodes start in any order); dmlbench reports what failed in one line instead.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    from dmlbench.system import interruptible

    interruptible()
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as error:  # a flag's value, a missing argument: one line too
        code = getattr(error, "exit_code", 2)
        if type(error).__name__ == "NoArgsIsHelpError":  # a bare command group: its help
            from typer.rich_utils import rich_format_error

            rich_format_error(error)  # type: ignore[arg-type]
            sys.exit(code)
        ctx = getattr(error, "ctx", None)
        where = f"; see {ctx.command_path} --help" if ctx is not None else ""
        said = error.format_message() if hasattr(error, "format_message") else str(error)
        message = escape(shorten(f"{said.rstrip('.')}{where}", MAX_ERROR_CHARS))
        err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
        sys.exit(code)
    except (KeyboardInterrupt, typer.Abort):  # between the places that store what it
        err_console.print("interrupted")  # interrupted
        sys.exit(130)
    except DmlbenchError as error:
        # whatever a message echoes of the user's input, it stays a readable line
        message = escape(shorten(str(error), MAX_ERROR_CHARS))
        err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except Exception as error:
        # torch's launcher raises SignalException from its own signal handlers; they are
        # put back after each launch, so only a signal inside the launch reaches here
        if type(error).__name__ != "SignalException":
            raise
        err_console.print(f"interrupted ({getattr(error, 'sigval', 'a signal')!s})")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
