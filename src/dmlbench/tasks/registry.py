"""Task registry. Built-in tasks register on import; users add theirs from a module.

A module named with ``--plugin my.module`` (or ``plugins: [my.module]`` in a spec file)
is imported in the launcher and in every worker, so it may call ``register_task``.
Installed packages may also expose an entry point in the ``dmlbench.tasks`` group, and
``DMLBENCH_PLUGINS=my.module,other`` names modules every command imports, as it loads
those entry points: `dmlbench tasks`, `advise` and `simulate` then know the tasks too.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from importlib.metadata import entry_points

from dmlbench.errors import SpecError, unknown
from dmlbench.names import comma_list, shorten
from dmlbench.qualities import imported_benchmark
from dmlbench.tasks.base import TaskDefinition

TASKS: dict[str, TaskDefinition] = {}
PLUGINS_VARIABLE = "DMLBENCH_PLUGINS"
_plugins_loaded = False


def register_task(definition: TaskDefinition, *, replace: bool = False) -> TaskDefinition:
    if definition.name in TASKS and not replace and TASKS[definition.name] is not definition:
        raise SpecError(f"task '{definition.name}' is already registered")
    TASKS[definition.name] = definition
    return definition


def import_plugins(modules: Iterable[str], *, named_in: str = "") -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # any failure in user code is reported the same way
            where = f" ({named_in})" if named_in else ""
            said = f"plugin module '{module}'{where} failed to import: {error}"
            if isinstance(error, ModuleNotFoundError) and error.name == module.split(".")[0]:
                said += (
                    ": install it, or put its folder on PYTHONPATH (PYTHONPATH=examples for "
                    "examples/my_tasks.py); a plugin is never imported from the current folder"
                )
            raise SpecError(said) from None


def env_plugins() -> list[str]:
    """The modules ``DMLBENCH_PLUGINS`` names, comma-separated."""
    return comma_list(os.environ.get(PLUGINS_VARIABLE, ""))


def load_plugins() -> None:
    """Import the ``dmlbench.tasks`` entry points and the ``DMLBENCH_PLUGINS`` modules,
    once a process: what registers tasks and models without a ``--plugin``."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for point in entry_points(group="dmlbench.tasks"):
        try:
            point.load()
        except Exception as error:
            raise SpecError(f"task entry point '{point.name}' failed to load: {error}") from None
    import_plugins(env_plugins(), named_in=PLUGINS_VARIABLE)


def all_tasks() -> list[TaskDefinition]:
    load_plugins()
    return sorted(TASKS.values(), key=lambda t: (t.builtin_for_tests, t.name))


def get_task(name: str) -> TaskDefinition:
    load_plugins()
    if name in TASKS:
        return TASKS[name]
    if imported_benchmark(name) is not None:  # what `results --import-mlperf` names its runs
        raise SpecError(
            f"'{shorten(name)}' names imported MLPerf runs, not a task dmlbench trains: give "
            f"one of `dmlbench tasks`, and --converge-from {shorten(name)} to fit time to "
            "train on those runs (simulate-cluster, advise-cluster)"
        )
    listed = (
        "`dmlbench tasks` lists them; a task of your own: --plugin MODULE (run, sweep), or "
        f"{PLUGINS_VARIABLE}=MODULE for every command"
    )
    raise SpecError(unknown("task", name, TASKS, listed))
