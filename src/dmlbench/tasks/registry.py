"""Task registry. Built-in tasks register on import; users add theirs from a module.

A module named with ``--plugin my.module`` (or ``plugins: [my.module]`` in a spec file)
is imported in the launcher and in every worker, so it may call ``register_task``.
Installed packages may also expose an entry point in the ``dmlbench.tasks`` group.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from importlib.metadata import entry_points

from dmlbench.errors import SpecError, unknown
from dmlbench.tasks.base import TaskDefinition

TASKS: dict[str, TaskDefinition] = {}
_entry_points_loaded = False


def register_task(definition: TaskDefinition, *, replace: bool = False) -> TaskDefinition:
    if definition.name in TASKS and not replace and TASKS[definition.name] is not definition:
        raise SpecError(f"task '{definition.name}' is already registered")
    TASKS[definition.name] = definition
    return definition


def import_plugins(modules: Iterable[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # any failure in user code is reported the same way
            raise SpecError(f"plugin module '{module}' failed to import: {error}") from None


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for point in entry_points(group="dmlbench.tasks"):
        try:
            point.load()
        except Exception as error:
            raise SpecError(f"task entry point '{point.name}' failed to load: {error}") from None


def all_tasks() -> list[TaskDefinition]:
    _load_entry_points()
    return sorted(TASKS.values(), key=lambda t: (t.builtin_for_tests, t.name))


def get_task(name: str) -> TaskDefinition:
    _load_entry_points()
    if name in TASKS:
        return TASKS[name]
    raise SpecError(unknown("task", name, TASKS, "`dmlbench tasks` lists them"))
