"""Benchmark tasks: the registry and the built-in definitions."""

from dmlbench.tasks import builtin as _builtin  # noqa: F401  (registers the built-in tasks)
from dmlbench.tasks.base import TaskDefinition
from dmlbench.tasks.registry import (
    all_tasks,
    env_plugins,
    get_task,
    import_plugins,
    load_plugins,
    register_task,
)

__all__ = [
    "TaskDefinition",
    "all_tasks",
    "env_plugins",
    "get_task",
    "import_plugins",
    "load_plugins",
    "register_task",
]
