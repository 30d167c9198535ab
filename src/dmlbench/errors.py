"""Errors a user can act on. The CLI prints their message on one line, no traceback."""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

Choice = TypeVar("Choice", bound=str)


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


def known_keys(
    entry: Mapping[object, object], allowed: Sequence[str], where: str, holder: str
) -> None:
    """Refuse in one line a key of ``entry`` that ``allowed`` lacks, naming the closest
    it has: a data file's misspelt key (``currenc: EUR``) was dropped without a word.
    ``where`` names the entry, ``holder`` what takes the keys (``a profile``)."""
    for key in entry:
        if key not in allowed:
            said = unknown("key", str(key), allowed, f"{holder} takes {', '.join(allowed)}")
            raise SpecError(f"{where}: {said}")


def registered(kind: str, name: str, registry: Iterable[str]) -> str:
    """``name`` if ``registry`` holds it; otherwise a ValueError that suggests the closest
    registered name and lists them all (pydantic turns it into the spec's one line)."""
    names = list(registry)
    if name in names:
        return name
    raise ValueError(unknown(kind, name, names))


def chosen(option: str, names: Sequence[str], allowed: Sequence[Choice]) -> list[Choice]:
    """``names`` as the ``allowed`` values they name (a ``Literal`` type's), the first
    one not allowed refused in one line: ``--format 'xls': choose csv or parquet``."""
    by_name: dict[str, Choice] = {value: value for value in allowed}
    for name in names:
        if name not in by_name:
            listed: list[str] = (
                [", ".join(allowed[:-1]), allowed[-1]] if allowed[:-1] else [*allowed]
            )
            raise SpecError(f"{option} {name!r}: choose {' or '.join(listed)}")
    return [by_name[name] for name in names]


def unwritable(error: OSError, elsewhere: str) -> str:
    """What to do where a write failed with ``error``: free space on a full disk, look
    elsewhere where it is not writable or not there; ``elsewhere`` names the option
    that points somewhere else (``--store``)."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"free space there (or pass another {elsewhere})"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"this user cannot write there: pass another {elsewhere}"
    return f"pass another {elsewhere}"
