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


def registered(kind: str, name: str, registry: Iterable[str]) -> str:
    """``name`` if ``registry`` holds it; otherwise a ValueError that suggests the closest
    registered name and lists them all (pydantic turns it into the spec's one line)."""
    known = sorted(registry)
    if name in known:
        return name
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ValueError(f"unknown {kind} '{name}'{hint}; registered: {', '.join(known)}")
