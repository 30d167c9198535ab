"""Errors a user can act on. The CLI prints their message on one line, no traceback."""


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
