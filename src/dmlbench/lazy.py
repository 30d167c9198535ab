"""Package attributes that load on first use (PEP 562): a package's light modules then
import without its heavy ones (torch), and ``from package import Name`` still works."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``homes`` is taken from the
    module it names (in full, so that the import walk of tests/unit/test_imports.py sees
    the edge) when first asked for."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(homes[name]), name)

    return __getattr__
