"""Errors a user can act on. The CLI prints their message on one line, no traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DmlbenchError(Exception):
    """Base class: the message says what went wrong and what to do about it."""


class SpecError(DmlbenchError):
    """A run spec is impossible or names something unknown; refused before any process starts."""


class DatasetError(DmlbenchError):
    """A dataset is missing, truncated or malformed."""


class WorkerFailed(DmlbenchError):
    """A worker process died or raised; the run is stored as failed."""


class StoreError(DmlbenchError):
    """The results store cannot be read or written (a full disk, a broken file)."""


class ResultsNotStored(StoreError):
    """A run ended but the store could not take it; its folder keeps what it reached."""


class AlreadyClaimed(DmlbenchError):
    """A sweep point another launcher is running, or that the store already has."""


def unknown(kind: str, name: str, known: Iterable[str], listed: str | None = None) -> str:
    """``unknown KIND 'NAME' (did you mean 'CLOSEST'?); LISTED``: the one line for a name
    no registry holds. ``listed`` says where the names are (default: all of them)."""
    names = sorted(known)
    close = difflib.get_close_matches(name[:200], names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    shown = name if len(name) <= 120 else f"{name[:120]}… ({len(name):,} characters)"
    return f"unknown {kind} '{shown}'{hint}; {listed or 'registered: ' + ', '.join(names)}"


def registered(kind: str, name: str, registry: Iterable[str]) -> str:
    """``name`` if ``registry`` holds it; otherwise a ValueError that suggests the closest
    registered name and lists them all (pydantic turns it into the spec's one line)."""
    names = list(registry)
    if name in names:
        return name
    raise ValueError(unknown(kind, name, names))
